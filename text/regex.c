/*  regex.c — parse a pattern into a tree, compile the tree to a program for a backtracking VM
    (Thompson's instructions run depth-first, so the first MATCH reached is the Perl match). */
#include "baton/regex.h"
#include "baton/unicode.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_NODES 4096
#define S_MAX_REPEAT 1000 /* largest {m,n} bound */

/* ---- the tree ------------------------------------------------------------------------------ */

typedef enum {
    N_EMPTY,
    N_CHAR,
    N_CLASS,
    N_ANY,
    N_CONCAT,
    N_ALT,
    N_REPEAT,
    N_LOOK,
    N_BOL,
    N_EOL
} s_kind;

typedef struct {
    s_kind kind;
    uint32_t c;   /* N_CHAR: the code point; N_CLASS: the class index */
    bool flag;    /* N_CHAR: fold ASCII case; N_REPEAT: lazy; N_LOOK: negative */
    int a, b;     /* children: N_CONCAT/N_ALT a, b; N_REPEAT/N_LOOK a */
    int min, max; /* N_REPEAT; max -1 is unbounded */
} s_node;

typedef enum { K_RANGE, K_MAJOR, K_CATEGORY, K_SPACE, K_DIGIT, K_WORD } s_item_kind;

typedef struct {
    s_item_kind kind;
    bool negated;
    uint32_t lo, hi; /* K_RANGE: lo..hi; K_MAJOR: the letter; K_CATEGORY: the bt_uc_category */
} s_item;

typedef struct {
    int first, count; /* into items */
    bool negated;
} s_class;

/* ---- the program --------------------------------------------------------------------------- */

typedef enum { I_CHAR, I_CLASS, I_ANY, I_SPLIT, I_JMP, I_LOOK, I_BOL, I_EOL, I_MATCH } s_op;

typedef struct {
    s_op op;
    bool flag;  /* I_CHAR: fold case; I_LOOK: negative */
    uint32_t c; /* I_CHAR: code point; I_CLASS: class index */
    int x, y;   /* I_SPLIT: preferred, other; I_JMP: x; I_LOOK: sub-program x, continue at y */
} s_inst;

struct bt_regex {
    s_inst *prog;
    int n_prog;
    s_item *items;
    int n_items;
    s_class *classes;
    int n_classes;
};

/* ---- parser -------------------------------------------------------------------------------- */

typedef struct {
    const uint32_t *cp; /* the pattern's code points */
    const size_t *off;  /* their byte offsets, for messages */
    size_t n, i;
    s_node *nodes;
    int n_nodes;
    s_item *items;
    int n_items, cap_items;
    s_class *classes;
    int n_classes, cap_classes;
    bool icase;
    bt_status st;
} s_parser;

static int s_err(s_parser *p, const char *what) {
    if (p->st == BT_OK) {
        size_t at = p->i < p->n ? p->off[p->i] : p->off[p->n];
        p->st = bt_fail(BT_EFORMAT, "regex: %s at byte %zu", what, at);
    }
    return -1;
}

static int s_node_new(s_parser *p, s_kind kind) {
    if (p->n_nodes >= S_MAX_NODES)
        return s_err(p, "pattern too long");
    s_node *n = &p->nodes[p->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->a = n->b = -1;
    return p->n_nodes++;
}

static int s_pair(s_parser *p, s_kind kind, int a, int b) {
    int n = s_node_new(p, kind);
    if (n >= 0) {
        p->nodes[n].a = a;
        p->nodes[n].b = b;
    }
    return n;
}

static bool s_more(const s_parser *p) {
    return p->i < p->n;
}
static uint32_t s_peek(const s_parser *p) {
    return p->i < p->n ? p->cp[p->i] : 0;
}

static bool s_item_add(s_parser *p, s_item it) {
    if (p->n_items == p->cap_items) {
        int cap = p->cap_items ? 2 * p->cap_items : 16;
        s_item *grown = realloc(p->items, (size_t)cap * sizeof *grown);
        if (!grown) {
            p->st = bt_fail(BT_ENOMEM, "regex: out of memory");
            return false;
        }
        p->items = grown;
        p->cap_items = cap;
    }
    p->items[p->n_items++] = it;
    return true;
}

static int s_hex(uint32_t c) {
    if (c >= '0' && c <= '9')
        return (int)(c - '0');
    if (c >= 'a' && c <= 'f')
        return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F')
        return (int)(c - 'A' + 10);
    return -1;
}

/*  Reads exactly `digits` hex digits (or, when digits is 0, `{H..}`). */
static bool s_parse_hex(s_parser *p, int digits, uint32_t *out) {
    uint32_t v = 0;
    if (digits == 0) {
        if (s_peek(p) != '{')
            return false;
        p->i++;
        int k = 0;
        for (; s_more(p) && s_peek(p) != '}'; k++, p->i++) {
            int h = s_hex(s_peek(p));
            if (h < 0 || k >= 6)
                return false;
            v = v * 16 + (uint32_t)h;
        }
        if (!s_more(p) || k == 0)
            return false;
        p->i++;
    } else {
        for (int k = 0; k < digits; k++, p->i++) {
            int h = s_more(p) ? s_hex(s_peek(p)) : -1;
            if (h < 0)
                return false;
            v = v * 16 + (uint32_t)h;
        }
    }
    if (v > 0x10FFFF)
        return false;
    *out = v;
    return true;
}

static const struct {
    const char *name;
    int category; /* a bt_uc_category, or -1 for a major class */
    char major;
} s_categories[] = {
    {"L", -1, 'L'},      {"Letter", -1, 'L'}, {"M", -1, 'M'},      {"Mark", -1, 'M'},
    {"N", -1, 'N'},      {"Number", -1, 'N'}, {"P", -1, 'P'},      {"Punctuation", -1, 'P'},
    {"S", -1, 'S'},      {"Symbol", -1, 'S'}, {"Z", -1, 'Z'},      {"Separator", -1, 'Z'},
    {"C", -1, 'C'},      {"Other", -1, 'C'},  {"Lu", BT_UC_LU, 0}, {"Ll", BT_UC_LL, 0},
    {"Lt", BT_UC_LT, 0}, {"Lm", BT_UC_LM, 0}, {"Lo", BT_UC_LO, 0}, {"Mn", BT_UC_MN, 0},
    {"Mc", BT_UC_MC, 0}, {"Me", BT_UC_ME, 0}, {"Nd", BT_UC_ND, 0}, {"Nl", BT_UC_NL, 0},
    {"No", BT_UC_NO, 0}, {"Pc", BT_UC_PC, 0}, {"Pd", BT_UC_PD, 0}, {"Ps", BT_UC_PS, 0},
    {"Pe", BT_UC_PE, 0}, {"Pi", BT_UC_PI, 0}, {"Pf", BT_UC_PF, 0}, {"Po", BT_UC_PO, 0},
    {"Sm", BT_UC_SM, 0}, {"Sc", BT_UC_SC, 0}, {"Sk", BT_UC_SK, 0}, {"So", BT_UC_SO, 0},
    {"Zs", BT_UC_ZS, 0}, {"Zl", BT_UC_ZL, 0}, {"Zp", BT_UC_ZP, 0}, {"Cc", BT_UC_CC, 0},
    {"Cf", BT_UC_CF, 0}, {"Cs", BT_UC_CS, 0}, {"Co", BT_UC_CO, 0}, {"Cn", BT_UC_CN, 0},
};

/*  After `\p` or `\P`: `{Name}` or a single letter. */
static bool s_parse_category(s_parser *p, bool negated, s_item *out) {
    char name[16];
    size_t k = 0;
    if (s_peek(p) == '{') {
        p->i++;
        while (s_more(p) && s_peek(p) != '}' && k + 1 < sizeof name)
            name[k++] = (char)(s_peek(p) < 128 ? s_peek(p) : '?'), p->i++;
        if (s_peek(p) != '}')
            return false;
        p->i++;
    } else if (s_more(p) && s_peek(p) < 128) {
        name[k++] = (char)s_peek(p);
        p->i++;
    }
    name[k] = '\0';
    for (size_t j = 0; j < sizeof s_categories / sizeof s_categories[0]; j++)
        if (strcmp(name, s_categories[j].name) == 0) {
            if (s_categories[j].category < 0)
                *out = (s_item){K_MAJOR, negated, (uint32_t)s_categories[j].major, 0};
            else
                *out = (s_item){K_CATEGORY, negated, (uint32_t)s_categories[j].category, 0};
            return true;
        }
    return false;
}

/*  An escape after the backslash.  Either a single code point (*is_item false, *c set) or a
    class item (\p, \s, \d, \w and their negations). */
static bool s_parse_escape(s_parser *p, bool *is_item, s_item *item, uint32_t *c) {
    if (!s_more(p))
        return s_err(p, "pattern ends in a backslash"), false;
    uint32_t e = s_peek(p);
    p->i++;
    *is_item = true;
    switch (e) {
    case 'p':
    case 'P':
        if (!s_parse_category(p, e == 'P', item))
            return s_err(p, "unknown Unicode category after \\p"), false;
        return true;
    case 's':
    case 'S': *item = (s_item){K_SPACE, e == 'S', 0, 0}; return true;
    case 'd':
    case 'D': *item = (s_item){K_DIGIT, e == 'D', 0, 0}; return true;
    case 'w':
    case 'W': *item = (s_item){K_WORD, e == 'W', 0, 0}; return true;
    default: break;
    }
    *is_item = false;
    switch (e) {
    case 'r': *c = '\r'; return true;
    case 'n': *c = '\n'; return true;
    case 't': *c = '\t'; return true;
    case 'f': *c = '\f'; return true;
    case 'v': *c = '\v'; return true;
    case '0': *c = 0; return true;
    case 'x':
        if (s_peek(p) == '{' ? s_parse_hex(p, 0, c) : s_parse_hex(p, 2, c))
            return true;
        return s_err(p, "bad \\x escape"), false;
    case 'u':
        if (s_parse_hex(p, 4, c))
            return true;
        return s_err(p, "bad \\u escape"), false;
    default:
        if (e < 128 &&
            ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))) {
            p->i--;
            return s_err(p, "unsupported escape"), false;
        }
        *c = e; /* escaped punctuation or a non-ASCII code point stands for itself */
        return true;
    }
}

/*  Registers cls and returns an N_CLASS node for it. */
static int s_class_node(s_parser *p, s_class cls) {
    if (p->n_classes == p->cap_classes) {
        int cap = p->cap_classes ? 2 * p->cap_classes : 8;
        s_class *grown = realloc(p->classes, (size_t)cap * sizeof *grown);
        if (!grown)
            return p->st = bt_fail(BT_ENOMEM, "regex: out of memory"), -1;
        p->classes = grown;
        p->cap_classes = cap;
    }
    p->classes[p->n_classes] = cls;
    int n = s_node_new(p, N_CLASS);
    if (n >= 0)
        p->nodes[n].c = (uint32_t)p->n_classes++;
    return n;
}

/*  After `[`: items up to `]`. */
static int s_parse_class(s_parser *p) {
    s_class cls = {p->n_items, 0, false};
    if (s_peek(p) == '^') {
        cls.negated = true;
        p->i++;
    }
    bool first = true;
    while (s_more(p) && (s_peek(p) != ']' || first)) {
        first = false;
        s_item it;
        uint32_t lo = s_peek(p);
        p->i++;
        if (lo == '[')
            return s_err(p, "nested class");
        if (lo == '\\') {
            bool is_item;
            if (!s_parse_escape(p, &is_item, &it, &lo))
                return -1;
            if (is_item) {
                if (!s_item_add(p, it))
                    return -1;
                continue;
            }
        }
        uint32_t hi = lo;
        if (s_peek(p) == '-' && p->i + 1 < p->n && p->cp[p->i + 1] != ']') {
            p->i++;
            hi = s_peek(p);
            p->i++;
            if (hi == '\\') {
                bool is_item;
                if (!s_parse_escape(p, &is_item, &it, &hi))
                    return -1;
                if (is_item)
                    return s_err(p, "a class escape cannot end a range");
            }
            if (hi < lo)
                return s_err(p, "range out of order");
        }
        if (!s_item_add(p, (s_item){K_RANGE, false, lo, hi}))
            return -1;
    }
    if (!s_more(p))
        return s_err(p, "unterminated [");
    p->i++; /* ] */
    cls.count = p->n_items - cls.first;
    return s_class_node(p, cls);
}

/*  A single-item class for \p, \s, ... outside brackets. */
static int s_item_class(s_parser *p, s_item it) {
    s_class cls = {p->n_items, 1, false};
    return s_item_add(p, it) ? s_class_node(p, cls) : -1;
}

static int s_parse_alt(s_parser *p);

static int s_parse_atom(s_parser *p) {
    uint32_t c = s_peek(p);
    p->i++;
    switch (c) {
    case '(': {
        bool saved = p->icase;
        int look = 0; /* 1 positive, 2 negative */
        if (s_peek(p) == '?') {
            p->i++;
            uint32_t k = s_peek(p);
            p->i++;
            if (k == '=')
                look = 1;
            else if (k == '!')
                look = 2;
            else if (k == 'i' && s_peek(p) == ':') {
                p->i++;
                p->icase = true;
            } else if (k != ':') {
                p->i -= 2;
                return s_err(p, "unsupported group kind (only (?:, (?i:, (?= and (?!)");
            }
        }
        int inner = s_parse_alt(p);
        p->icase = saved;
        if (inner < 0)
            return -1;
        if (s_peek(p) != ')' || !s_more(p))
            return s_err(p, "missing )");
        p->i++;
        if (!look)
            return inner;
        int n = s_node_new(p, N_LOOK);
        if (n >= 0) {
            p->nodes[n].a = inner;
            p->nodes[n].flag = look == 2;
        }
        return n;
    }
    case '[': return s_parse_class(p);
    case '.': return s_node_new(p, N_ANY);
    case '^': return s_node_new(p, N_BOL);
    case '$': return s_node_new(p, N_EOL);
    case '\\': {
        bool is_item;
        s_item it;
        if (!s_parse_escape(p, &is_item, &it, &c))
            return -1;
        if (is_item)
            return s_item_class(p, it);
        break;
    }
    case ')':
    case '*':
    case '+':
    case '?':
    case '{': p->i--; return s_err(p, "nothing to repeat or unbalanced )");
    default: break;
    }
    int n = s_node_new(p, N_CHAR);
    if (n >= 0) {
        p->nodes[n].c = c;
        p->nodes[n].flag = p->icase;
    }
    return n;
}

static bool s_parse_int(s_parser *p, int *out) {
    int v = 0, k = 0;
    for (; s_more(p) && s_peek(p) >= '0' && s_peek(p) <= '9'; k++, p->i++) {
        v = v * 10 + (int)(s_peek(p) - '0');
        if (v > S_MAX_REPEAT)
            return false;
    }
    *out = v;
    return k > 0;
}

static int s_parse_repeat(s_parser *p) {
    int atom = s_parse_atom(p);
    while (atom >= 0 && s_more(p)) {
        int min, max;
        uint32_t q = s_peek(p);
        if (q == '*')
            min = 0, max = -1;
        else if (q == '+')
            min = 1, max = -1;
        else if (q == '?')
            min = 0, max = 1;
        else if (q == '{') {
            size_t at = p->i;
            p->i++;
            if (!s_parse_int(p, &min))
                return s_err(p, "bad {m,n} repeat");
            max = min;
            if (s_peek(p) == ',') {
                p->i++;
                max = -1;
                if (s_peek(p) != '}' && !s_parse_int(p, &max))
                    return s_err(p, "bad {m,n} repeat");
            }
            if (s_peek(p) != '}' || (max >= 0 && max < min)) {
                p->i = at;
                return s_err(p, "bad {m,n} repeat");
            }
        } else
            break;
        p->i++;
        bool lazy = false;
        if (s_peek(p) == '?' && s_more(p)) {
            lazy = true;
            p->i++;
        } else if (s_peek(p) == '+' && s_more(p))
            return s_err(p, "possessive quantifiers are not supported");
        int n = s_node_new(p, N_REPEAT);
        if (n < 0)
            return -1;
        p->nodes[n].a = atom;
        p->nodes[n].min = min;
        p->nodes[n].max = max;
        p->nodes[n].flag = lazy;
        atom = n;
    }
    return atom;
}

static int s_parse_concat(s_parser *p) {
    int left = -1;
    while (s_more(p) && s_peek(p) != '|' && s_peek(p) != ')') {
        int r = s_parse_repeat(p);
        if (r < 0)
            return -1;
        left = left < 0 ? r : s_pair(p, N_CONCAT, left, r);
        if (left < 0)
            return -1;
    }
    return left < 0 ? s_node_new(p, N_EMPTY) : left;
}

static int s_parse_alt(s_parser *p) {
    int left = s_parse_concat(p);
    while (left >= 0 && s_more(p) && s_peek(p) == '|') {
        p->i++;
        int right = s_parse_concat(p);
        if (right < 0)
            return -1;
        left = s_pair(p, N_ALT, left, right);
    }
    return left;
}

/*  Whether node n can match the empty string (an unbounded repeat of such a node would loop). */
static bool s_nullable(const s_node *nodes, int n) {
    const s_node *x = &nodes[n];
    switch (x->kind) {
    case N_EMPTY:
    case N_LOOK:
    case N_BOL:
    case N_EOL: return true;
    case N_CONCAT: return s_nullable(nodes, x->a) && s_nullable(nodes, x->b);
    case N_ALT: return s_nullable(nodes, x->a) || s_nullable(nodes, x->b);
    case N_REPEAT: return x->min == 0 || s_nullable(nodes, x->a);
    default: return false;
    }
}

/* ---- compiler ------------------------------------------------------------------------------ */

typedef struct {
    s_inst *prog;
    int n, cap;
    bt_status st;
} s_emitter;

static int s_emit(s_emitter *e, s_inst in) {
    if (e->n == e->cap) {
        int cap = e->cap ? 2 * e->cap : 64;
        s_inst *grown = realloc(e->prog, (size_t)cap * sizeof *grown);
        if (!grown) {
            e->st = bt_fail(BT_ENOMEM, "regex: out of memory");
            return -1;
        }
        e->prog = grown;
        e->cap = cap;
    }
    e->prog[e->n] = in;
    return e->n++;
}

static bool s_compile(s_emitter *e, const s_node *nodes, int n) {
    const s_node *x = &nodes[n];
    switch (x->kind) {
    case N_EMPTY: return true;
    case N_CHAR: return s_emit(e, (s_inst){.op = I_CHAR, .c = x->c, .flag = x->flag}) >= 0;
    case N_CLASS: return s_emit(e, (s_inst){.op = I_CLASS, .c = x->c}) >= 0;
    case N_ANY: return s_emit(e, (s_inst){.op = I_ANY}) >= 0;
    case N_BOL: return s_emit(e, (s_inst){.op = I_BOL}) >= 0;
    case N_EOL: return s_emit(e, (s_inst){.op = I_EOL}) >= 0;
    case N_CONCAT: return s_compile(e, nodes, x->a) && s_compile(e, nodes, x->b);
    case N_ALT: {
        int split = s_emit(e, (s_inst){.op = I_SPLIT});
        if (split < 0 || !s_compile(e, nodes, x->a))
            return false;
        int jmp = s_emit(e, (s_inst){.op = I_JMP});
        if (jmp < 0)
            return false;
        e->prog[split].x = split + 1;
        e->prog[split].y = e->n;
        if (!s_compile(e, nodes, x->b))
            return false;
        e->prog[jmp].x = e->n;
        return true;
    }
    case N_LOOK: {
        int look = s_emit(e, (s_inst){.op = I_LOOK, .flag = x->flag});
        if (look < 0 || !s_compile(e, nodes, x->a) || s_emit(e, (s_inst){.op = I_MATCH}) < 0)
            return false;
        e->prog[look].x = look + 1;
        e->prog[look].y = e->n;
        return true;
    }
    case N_REPEAT: {
        for (int k = 0; k < x->min; k++)
            if (!s_compile(e, nodes, x->a))
                return false;
        if (x->max < 0) { /* L: SPLIT body, out; body; JMP L */
            int split = s_emit(e, (s_inst){.op = I_SPLIT});
            if (split < 0 || !s_compile(e, nodes, x->a) ||
                s_emit(e, (s_inst){.op = I_JMP, .x = split}) < 0)
                return false;
            e->prog[split].x = x->flag ? e->n : split + 1;
            e->prog[split].y = x->flag ? split + 1 : e->n;
            return true;
        }
        int splits[S_MAX_REPEAT];
        int k_opt = x->max - x->min;
        for (int k = 0; k < k_opt; k++) { /* nested: skipping one skips the rest */
            splits[k] = s_emit(e, (s_inst){.op = I_SPLIT});
            if (splits[k] < 0 || !s_compile(e, nodes, x->a))
                return false;
        }
        for (int k = 0; k < k_opt; k++) {
            e->prog[splits[k]].x = x->flag ? e->n : splits[k] + 1;
            e->prog[splits[k]].y = x->flag ? splits[k] + 1 : e->n;
        }
        return true;
    }
    }
    return false;
}

/*  Unbounded repeats of possibly empty expressions, found before compiling. */
static bool s_has_empty_loop(const s_node *nodes, int n) {
    const s_node *x = &nodes[n];
    switch (x->kind) {
    case N_CONCAT:
    case N_ALT: return s_has_empty_loop(nodes, x->a) || s_has_empty_loop(nodes, x->b);
    case N_LOOK: return s_has_empty_loop(nodes, x->a);
    case N_REPEAT: return (x->max < 0 && s_nullable(nodes, x->a)) || s_has_empty_loop(nodes, x->a);
    default: return false;
    }
}

bt_status bt_regex_compile(const char *pattern, bt_regex_t **out) {
    *out = NULL;
    size_t len = strlen(pattern);
    uint32_t *cps = malloc((len + 1) * sizeof *cps);
    size_t *offs = malloc((len + 1) * sizeof *offs);
    s_node *nodes = malloc(S_MAX_NODES * sizeof *nodes);
    s_parser p = {.cp = cps, .off = offs, .nodes = nodes};
    s_emitter e = {0};
    bt_regex_t *re = NULL;
    if (!cps || !offs || !nodes) {
        p.st = bt_fail(BT_ENOMEM, "regex: out of memory");
        goto out;
    }
    for (size_t i = 0; i < len;) {
        bool valid;
        offs[p.n] = i;
        size_t used = bt_utf8_decode(pattern + i, len - i, &cps[p.n], &valid);
        if (!valid) {
            p.st = bt_fail(BT_EFORMAT, "regex: invalid UTF-8 at byte %zu", i);
            goto out;
        }
        p.n++;
        i += used;
    }
    offs[p.n] = len;
    int root = s_parse_alt(&p);
    if (root >= 0 && p.i < p.n)
        root = s_err(&p, "unbalanced )");
    if (root < 0)
        goto out;
    if (s_has_empty_loop(nodes, root)) {
        p.st = bt_fail(BT_EFORMAT, "regex: an unbounded repeat of something that can match "
                                   "nothing is not supported");
        goto out;
    }
    if (!s_compile(&e, nodes, root) || s_emit(&e, (s_inst){.op = I_MATCH}) < 0) {
        p.st = e.st;
        goto out;
    }
    re = malloc(sizeof *re);
    if (!re) {
        p.st = bt_fail(BT_ENOMEM, "regex: out of memory");
        goto out;
    }
    *re = (bt_regex_t){e.prog, e.n, p.items, p.n_items, p.classes, p.n_classes};
    e.prog = NULL;
    p.items = NULL;
    p.classes = NULL;
    *out = re;
out:
    free(e.prog);
    free(p.items);
    free(p.classes);
    free(nodes);
    free(offs);
    free(cps);
    return p.st;
}

void bt_regex_destroy(bt_regex_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_regex_t *self = *self_p;
    free(self->prog);
    free(self->items);
    free(self->classes);
    free(self);
    *self_p = NULL;
}

/* ---- matcher ------------------------------------------------------------------------------- */

static bool s_item_matches(const s_item *it, uint32_t c) {
    bool in;
    switch (it->kind) {
    case K_RANGE: in = c >= it->lo && c <= it->hi; break;
    case K_MAJOR: in = bt_uc_major(bt_uc_category_of(c)) == (char)it->lo; break;
    case K_CATEGORY: in = bt_uc_category_of(c) == (bt_uc_category)it->lo; break;
    case K_SPACE: in = bt_uc_is_white_space(c); break;
    case K_DIGIT: in = bt_uc_category_of(c) == BT_UC_ND; break;
    default: { /* K_WORD */
        bt_uc_category k = bt_uc_category_of(c);
        char m = bt_uc_major(k);
        in = m == 'L' || m == 'M' || k == BT_UC_ND || k == BT_UC_PC;
        break;
    }
    }
    return in != it->negated;
}

static bool s_class_matches(const bt_regex_t *re, const s_class *cls, uint32_t c) {
    bool in = false;
    for (int k = 0; k < cls->count && !in; k++)
        in = s_item_matches(&re->items[cls->first + k], c);
    return in != cls->negated;
}

static uint32_t s_fold(uint32_t c) {
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

typedef struct {
    int pc;
    size_t pos;
} s_thread;

static int64_t s_run(const bt_regex_t *re, const uint32_t *cps, size_t n, size_t pos, int pc) {
    s_thread local[64], *stack = local;
    size_t depth = 0, cap = 64;
    int64_t result = -1;
    for (;;) {
        const s_inst *in = &re->prog[pc];
        bool ok = true;
        switch (in->op) {
        case I_CHAR:
            ok = pos < n && (cps[pos] == in->c || (in->flag && s_fold(cps[pos]) == s_fold(in->c)));
            pos += ok;
            pc++;
            break;
        case I_CLASS:
            ok = pos < n && s_class_matches(re, &re->classes[in->c], cps[pos]);
            pos += ok;
            pc++;
            break;
        case I_ANY:
            ok = pos < n && cps[pos] != '\n';
            pos += ok;
            pc++;
            break;
        case I_BOL:
            ok = pos == 0;
            pc++;
            break;
        case I_EOL:
            ok = pos == n;
            pc++;
            break;
        case I_JMP: pc = in->x; break;
        case I_SPLIT:
            if (depth == cap) {
                s_thread *grown = malloc(2 * cap * sizeof *grown);
                if (!grown) /* out of memory: give up on this branch (reported as no match) */
                    goto out;
                memcpy(grown, stack, depth * sizeof *grown);
                if (stack != local)
                    free(stack);
                stack = grown;
                cap *= 2;
            }
            stack[depth++] = (s_thread){in->y, pos};
            pc = in->x;
            break;
        case I_LOOK:
            ok = (s_run(re, cps, n, pos, in->x) >= 0) != in->flag;
            pc = in->y;
            break;
        case I_MATCH: result = (int64_t)pos; goto out;
        }
        if (!ok) {
            if (depth == 0)
                goto out;
            depth--;
            pc = stack[depth].pc;
            pos = stack[depth].pos;
        }
    }
out:
    if (stack != local)
        free(stack);
    return result;
}

int64_t bt_regex_match_at(const bt_regex_t *self, const uint32_t *cps, size_t n, size_t pos) {
    if (pos > n)
        return -1;
    return s_run(self, cps, n, pos, 0);
}
