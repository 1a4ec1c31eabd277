/*  source.c — the arithmetic and JSONL tasks: training streams, held-out sets, verifiers.
    Random numbers: splitmix64 used counter-based, so a draw depends on its (key, index) alone. */
#define _POSIX_C_SOURCE 200809L
#include "baton/source.h"

#include "baton/buf.h"
#include "baton/code.h"
#include "baton/dataset.h"
#include "baton/dtype.h"
#include "baton/rng.h"
#include "baton/unicode.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_TAG_TRAIN 0x747261696eULL       /* "train": the arithmetic training stream */
#define S_TAG_HELDOUT 0x68656c646f7574ULL /* "heldout": the arithmetic held-out stream */
#define S_TAG_RESERVE 0x72657365727665ULL /* "reserve": the held-out membership hash */
#define S_TAG_EPOCH 0x65706f6368ULL       /* "epoch": the JSONL epoch shuffles */
#define S_TAG_ASIDE 0x6173696465ULL       /* "aside": the distractor sentences */
#define S_TAG_FEWSHOT 0x66657773686f74ULL /* "fewshot": the exemplars of a held-out item */
#define S_RESERVE_ONE_IN 10               /* one problem in ten is reserved for held-out use */
#define S_ENUMERATE_MAX 10000000ULL       /* problem spaces up to this size are counted exactly */
#define S_HELDOUT_MAX 1000000             /* largest arithmetic held-out set */
#define S_LINE_MAX (1u << 20)             /* longest JSONL line, newline excluded */
#define S_MATH_MAX 256                    /* longest normal form of a math answer, NUL included */
#define S_RULES_VERSION 1u /* of s_record_problem and s_fast_record: a change rebuilds indexes */

static const char s_ops[] = "+-*"; /* an operator is stored as its index here */

typedef enum { S_ARITH, S_JSONL } s_kind;

struct bt_task {
    s_kind kind;
    uint64_t seed;
    /* arithmetic */
    uint64_t modulus; /* 10^digits */
    int ops[3];       /* (n_ops) indices into s_ops */
    int n_ops;
    double format_reward;
    uint64_t *heldout_codes; /* (n_heldout_codes) problems, see s_code() */
    size_t n_heldout_codes;
    /* JSONL */
    bt_source_verifier verifier;
    bt_dataset_t *train_file;   /* the training records */
    bt_dataset_t *heldout_file; /* NULL: records 10, 20, 30, ... of train_file are held out */
    uint64_t n_train, n_heldout;
    char *chat_template;     /* NULL: prompts as written */
    char *system_prompt;     /* NULL: "" */
    char *demonstration_key;    /* NULL: the answer demonstrates (bt_source_example.demo) */
    char *observation_template; /* NULL: the chat template's tool turn */
    bt_reward_fn *reward_fn; /* a host's reward, or NULL */
    void *reward_user;
    /* few-shot held-out prompts (bt_source_set_fewshot) */
    int64_t fewshot_k; /* 0: none */
    char *fewshot_separator, *fewshot_delimiter;
    const bt_source_t *fewshot_pool; /* the exemplars' source; NULL: this one's held-out set */
    uint64_t fewshot_seed;
    bt_sandbox_config sandbox; /* the code verifier's limits */
};

/* ---- arithmetic --------------------------------------------------------------------------- */
void bt_source_arith_config_init(bt_source_arith_config *cfg) {
    *cfg = (bt_source_arith_config){
        .seed = 0, .digits = 2, .operators = "+", .heldout_size = 500, .format_reward = 0.0};
}

/*  A problem as one integer: operator index in bits 60-61, a in bits 30-59, b in bits 0-29. */
static uint64_t s_code(int op, uint64_t a, uint64_t b) {
    return (uint64_t)op << 60 | a << 30 | b;
}

/*  Held-out membership depends on the problem alone, never on the seed or the digits. */
static bool s_is_reserved(uint64_t code) {
    return bt_rng_mix(code ^ S_TAG_RESERVE) % S_RESERVE_ONE_IN == 0;
}

/*  Try `attempt` at problem `index` of the stream `key`. */
static uint64_t s_arith_draw(const bt_source_t *self, uint64_t key, uint64_t index,
                             uint64_t attempt) {
    uint64_t state = bt_rng_key(bt_rng_key(key, index), attempt);
    uint64_t a = bt_rng_next(&state) % self->modulus;
    uint64_t b = bt_rng_next(&state) % self->modulus;
    int op = self->ops[bt_rng_next(&state) % (uint64_t)self->n_ops];
    return s_code(op, a, b);
}

/*  The operator index and operands of a problem made by s_code(). */
static void s_decode(uint64_t code, int *op, int64_t *a, int64_t *b) {
    *op = (int)(code >> 60);
    *a = (int64_t)(code >> 30 & 0x3fffffff);
    *b = (int64_t)(code & 0x3fffffff);
}

/*  Writes "a<op>b=" and the answer into ex->storage. */
static void s_arith_format(uint64_t code, bt_source_example *ex) {
    int op;
    int64_t a, b;
    s_decode(code, &op, &a, &b);
    int64_t c = op == 0 ? a + b : op == 1 ? a - b : a * b;
    char *prompt = ex->storage, *answer = ex->storage + sizeof ex->storage / 2;
    snprintf(prompt, sizeof ex->storage / 2, "%" PRId64 "%c%" PRId64 "=", a, s_ops[op], b);
    snprintf(answer, sizeof ex->storage / 2, "%" PRId64, c);
    ex->prompt = prompt;
    ex->answer = answer;
}

static bt_status s_arith_check(const bt_source_arith_config *cfg) {
    if (cfg->digits < 1 || cfg->digits > 9)
        return bt_fail(BT_EINVAL, "digits: expected 1..9, got %d", cfg->digits);
    const char *ops = cfg->operators ? cfg->operators : "";
    bool ok = ops[0] != '\0';
    for (const char *p = ops; ok && *p; p++)
        ok = strchr(s_ops, *p) && !strchr(p + 1, *p);
    if (!ok)
        return bt_fail(BT_EINVAL,
                       "operators: expected a non-empty subset of \"+-*\" without repeats, got "
                       "\"%s\"",
                       ops);
    if (cfg->heldout_size > S_HELDOUT_MAX)
        return bt_fail(BT_EINVAL, "heldout_size: expected at most %d, got %zu", S_HELDOUT_MAX,
                       cfg->heldout_size);
    if (!(cfg->format_reward >= 0.0) || isinf(cfg->format_reward))
        return bt_fail(BT_EINVAL, "format_reward: expected a finite number >= 0, got %g",
                       cfg->format_reward);
    return BT_OK;
}

/*  The reserved problems of a space small enough to enumerate; UINT64_MAX for a larger space, whose
    reserved tenth (>= 10^7) always exceeds S_HELDOUT_MAX. */
static uint64_t s_arith_count_reserved(const bt_source_t *self) {
    if ((uint64_t)self->n_ops * self->modulus * self->modulus > S_ENUMERATE_MAX)
        return UINT64_MAX;
    uint64_t n = 0;
    for (int k = 0; k < self->n_ops; k++)
        for (uint64_t a = 0; a < self->modulus; a++)
            for (uint64_t b = 0; b < self->modulus; b++)
                n += s_is_reserved(s_code(self->ops[k], a, b));
    return n;
}

/*  Adds code to an open-addressing set of cap slots (a power of two) that hold code + 1;
    returns false when it was already there. */
static bool s_set_insert(uint64_t *slots, size_t cap, uint64_t code) {
    for (size_t i = bt_rng_mix(code) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (slots[i] == code + 1)
            return false;
        if (slots[i] == 0) {
            slots[i] = code + 1;
            return true;
        }
    }
}

/*  The held-out set: the first `size` distinct reserved problems of the seed's held-out stream. */
static bt_status s_arith_build_heldout(bt_source_t *self, const bt_source_arith_config *cfg) {
    size_t size = cfg->heldout_size;
    uint64_t reserved = s_arith_count_reserved(self);
    if (size > reserved)
        return bt_fail(BT_EINVAL,
                       "heldout_size: %zu exceeds the %" PRIu64 " held-out problems of %d-digit "
                       "\"%s\" (one problem in %d is held out); lower heldout_size or raise digits",
                       size, reserved, cfg->digits, cfg->operators, S_RESERVE_ONE_IN);
    if (size == 0)
        return BT_OK;
    size_t cap = 1;
    while (cap < 2 * size)
        cap *= 2;
    uint64_t *slots = calloc(cap, sizeof *slots);
    self->heldout_codes = malloc(size * sizeof *self->heldout_codes);
    if (!slots || !self->heldout_codes) {
        free(slots);
        return bt_fail(BT_ENOMEM, "arithmetic task: out of memory for %zu held-out problems", size);
    }
    uint64_t key = bt_rng_key(self->seed, S_TAG_HELDOUT);
    for (uint64_t j = 0; self->n_heldout_codes < size; j++) {
        uint64_t code = s_arith_draw(self, key, j, 0);
        if (s_is_reserved(code) && s_set_insert(slots, cap, code))
            self->heldout_codes[self->n_heldout_codes++] = code;
    }
    free(slots);
    return BT_OK;
}

bt_status bt_source_new_arith(const bt_source_arith_config *cfg, bt_source_t **task_out) {
    *task_out = NULL;
    bt_status st = s_arith_check(cfg);
    if (st != BT_OK)
        return st;
    bt_source_t *self = calloc(1, sizeof *self);
    if (!self)
        return bt_fail(BT_ENOMEM, "arithmetic task: out of memory");
    self->kind = S_ARITH;
    self->seed = cfg->seed;
    self->modulus = 1;
    for (int i = 0; i < cfg->digits; i++)
        self->modulus *= 10;
    for (const char *p = cfg->operators; *p; p++)
        self->ops[self->n_ops++] = (int)(strchr(s_ops, *p) - s_ops);
    self->format_reward = cfg->format_reward;
    st = s_arith_build_heldout(self, cfg);
    if (st != BT_OK) {
        bt_source_destroy(&self);
        return st;
    }
    *task_out = self;
    return BT_OK;
}

static void s_arith_train_example(const bt_source_t *self, uint64_t index, bt_source_example *ex) {
    uint64_t key = bt_rng_key(self->seed, S_TAG_TRAIN), code;
    /* Nine problems in ten are not reserved, so this ends after about 1.1 tries. */
    for (uint64_t attempt = 0;; attempt++) {
        code = s_arith_draw(self, key, index, attempt);
        if (!s_is_reserved(code))
            break;
    }
    s_arith_format(code, ex);
}

/* ---- JSONL datasets ------------------------------------------------------------------------ */
static bool s_is_one_number(const char *s, size_t len);
static bool s_math_reference(const char *s, size_t *at, size_t *n);
static size_t s_put(char *buf, size_t len, const char *text, size_t n);

/*  Why a parsed line is not a record, or NULL when it is one. */
static const char *s_record_problem(const cJSON *root, bt_source_verifier verifier) {
    if (!root)
        return "not valid JSON";
    if (!cJSON_IsObject(root))
        return "expected a JSON object";
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *answer = cJSON_GetObjectItemCaseSensitive(root, "answer");
    if (!prompt)
        return "missing \"prompt\"";
    if (!cJSON_IsString(prompt))
        return "\"prompt\" is not a string";
    if (!answer)
        return "missing \"answer\"";
    if (!cJSON_IsString(answer) && !cJSON_IsNumber(answer))
        return "\"answer\" is neither a string nor a number";
    if (cJSON_IsNumber(answer) && !isfinite(answer->valuedouble))
        return "\"answer\" is out of range";
    if (verifier == BT_SOURCE_VERIFY_NUMERIC && cJSON_IsString(answer) &&
        !s_is_one_number(answer->valuestring, strlen(answer->valuestring)))
        return "\"answer\" is not a number (verifier \"numeric\")";
    size_t at, n;
    if (verifier == BT_SOURCE_VERIFY_MATH && cJSON_IsString(answer) &&
        !s_math_reference(answer->valuestring, &at, &n))
        return "\"answer\" holds no answer (verifier \"math\")";
    return NULL;
}

/*  x printed with 15 significant digits, or 17 when 15 do not read back exactly. */
static void s_format_number(double x, char out[32]) {
    snprintf(out, 32, "%.15g", x);
    if (strtod(out, NULL) != x)
        snprintf(out, 32, "%.17g", x);
}

/*  The fast path of the record check: most lines are one flat object in strict JSON, which a
    scanner that allocates nothing checks about 5 times faster than cJSON builds a tree of it.  It
    accepts only what cJSON accepts too, and finds the same "prompt" and "answer" (the first of
    each name, as cJSON_GetObjectItemCaseSensitive does); anything else it leaves to cJSON, whose
    verdict and reason then stand.  So the errors are cJSON's and s_record_problem's alone. */
typedef enum { S_FIELD_NONE, S_FIELD_STRING, S_FIELD_NUMBER, S_FIELD_OTHER } s_field_type;

typedef struct {
    const char *at; /* the value as written: a string's bytes between its quotes */
    size_t len;
    s_field_type type;
    bool escaped; /* a string that holds escapes */
} s_field;

static size_t s_fast_space(const char *s, size_t i, size_t n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
        i++;
    return i;
}

/*  The bytes of x (8 bytes of text, loaded little-endian) that are '"', '\\' or a control byte
    (< 0x20), as the top bit of each such byte: Mycroft's haszero and hasless tests.  Above the
    first such byte the flags may be false (a borrow), so only the lowest one is used. */
static uint64_t s_specials8(uint64_t x) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    return (((q - ones) & ~q) | ((b - ones) & ~b) | ((x - ones * 0x20) & ~x)) & highs;
}

/*  A string at s[i] == '"' without control bytes or \u escapes: the index after its closing
    quote, or 0.  Little-endian machines skip to the next '"', '\\' or control byte 8 bytes at
    a time, which also spares the loop exit of a byte-wise scan its mispredictions (with one, a
    first open of bench_dataset's file took 25% longer). */
static size_t s_fast_string(const char *s, size_t i, size_t n, s_field *f) {
    *f = (s_field){.at = s + i + 1, .type = S_FIELD_STRING};
    for (size_t p = i + 1;;) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
        for (uint64_t x, special; p + 8 <= n; p += 8) {
            memcpy(&x, s + p, 8);
            if ((special = s_specials8(x)) != 0) {
                p += (size_t)__builtin_ctzll(special) / 8;
                break;
            }
        }
#endif
        while (p < n && s[p] != '"' && s[p] != '\\' && (unsigned char)s[p] >= 0x20)
            p++;
        if (p >= n || (unsigned char)s[p] < 0x20)
            return 0;
        if (s[p] == '"') {
            f->len = p - (i + 1);
            return p + 1;
        }
        if (p + 1 >= n || s[p + 1] == '\0' || !strchr("\"\\/bfnrt", s[p + 1]))
            return 0; /* a \u escape, or no escape at all: cJSON decides */
        f->escaped = true;
        p += 2;
    }
}

static size_t s_fast_digits(const char *s, size_t i, size_t n) {
    while (i < n && isdigit((unsigned char)s[i]))
        i++;
    return i;
}

/*  A value at s[i]: a string (see s_fast_string), a number in strict JSON syntax shorter than
    cJSON's 63-byte number buffer, true, false or null.  The index after it, or 0. */
static size_t s_fast_value(const char *s, size_t i, size_t n, s_field *f) {
    if (i >= n)
        return 0;
    if (s[i] == '"')
        return s_fast_string(s, i, n, f);
    *f = (s_field){.at = s + i, .type = S_FIELD_OTHER};
    const char *word = s[i] == 't' ? "true" : s[i] == 'f' ? "false" : s[i] == 'n' ? "null" : NULL;
    if (word) {
        size_t k = strlen(word);
        return n - i >= k && !memcmp(s + i, word, k) ? i + k : 0;
    }
    size_t p = i + (s[i] == '-');
    if (p < n && s[p] == '0')
        p++;
    else if (p < n && s[p] >= '1' && s[p] <= '9')
        p = s_fast_digits(s, p, n);
    else
        return 0;
    if (p < n && s[p] == '.') {
        if (p + 1 >= n || !isdigit((unsigned char)s[p + 1]))
            return 0;
        p = s_fast_digits(s, p + 1, n);
    }
    if (p < n && (s[p] == 'e' || s[p] == 'E')) {
        p += p + 1 < n && (s[p + 1] == '+' || s[p + 1] == '-') ? 2 : 1;
        if (p >= n || !isdigit((unsigned char)s[p]))
            return 0;
        p = s_fast_digits(s, p, n);
    }
    if (p - i > 62)
        return 0;
    f->type = S_FIELD_NUMBER;
    f->len = p - i;
    return p;
}

/*  A string field's text with its escapes undone, NUL-terminated, into out (f->len + 1 bytes);
    returns its length. */
static size_t s_fast_unescape(const s_field *f, char *out) {
    size_t k = 0;
    for (size_t p = 0; p < f->len; p++) {
        char c = f->at[p];
        if (c == '\\') {
            c = f->at[++p];
            c = c == 'b'   ? '\b'
                : c == 'f' ? '\f'
                : c == 'n' ? '\n'
                : c == 'r' ? '\r'
                : c == 't' ? '\t'
                           : c;
        }
        out[k++] = c;
    }
    out[k] = '\0';
    return k;
}

/*  Whether a key is name, 6 letters (two loads, not a call to memcmp). */
static bool s_is_key(const s_field *key, const char name[7]) {
    uint32_t a, b;
    uint16_t c, d;
    if (key->escaped || key->len != 6)
        return false;
    memcpy(&a, key->at, 4);
    memcpy(&b, name, 4);
    memcpy(&c, key->at + 4, 2);
    memcpy(&d, name + 4, 2);
    return a == b && c == d;
}

/*  Whether s[0, n) is certainly a record (true), or must be asked of cJSON (false). */
static bool s_fast_record(const char *s, size_t n, bt_source_verifier verifier, char *scratch) {
    size_t i = s_fast_space(s, 0, n);
    if (i >= n || s[i] != '{')
        return false;
    s_field prompt = {0}, answer = {0};
    do {
        s_field key, value;
        i = s_fast_space(s, i + 1, n);
        if (i >= n || s[i] != '"' || !(i = s_fast_string(s, i, n, &key)))
            return false;
        i = s_fast_space(s, i, n);
        if (i >= n || s[i] != ':')
            return false;
        if (!(i = s_fast_value(s, s_fast_space(s, i + 1, n), n, &value)))
            return false;
        /* an escaped key is never "prompt" or "answer": no escape but \u makes a letter */
        if (s_is_key(&key, "prompt") && !prompt.type)
            prompt = value;
        else if (s_is_key(&key, "answer") && !answer.type)
            answer = value;
        i = s_fast_space(s, i, n);
    } while (i < n && s[i] == ',');
    if (i >= n || s[i] != '}' || s_fast_space(s, i + 1, n) != n)
        return false;
    if (prompt.type != S_FIELD_STRING)
        return false;
    if (answer.type == S_FIELD_NUMBER) {
        char number[64];
        memcpy(number, answer.at, answer.len);
        number[answer.len] = '\0';
        return isfinite(strtod(number, NULL));
    }
    if (answer.type != S_FIELD_STRING)
        return false;
    if (verifier == BT_SOURCE_VERIFY_EXACT)
        return true;
    size_t len = s_fast_unescape(&answer, scratch), at, m;
    if (verifier == BT_SOURCE_VERIFY_NUMERIC)
        return s_is_one_number(scratch, len);
    return s_math_reference(scratch, &at, &m);
}

/*  The dataset's record check (bt_dataset_check_fn): user points to the verifier. */
static const char *s_check_record(const char *line, size_t len, char *scratch, void *user) {
    bt_source_verifier verifier = *(const bt_source_verifier *)user;
    if (verifier == BT_SOURCE_VERIFY_CODE)
        return bt_code_parse(line, len, NULL);
    if (s_fast_record(line, len, verifier, scratch))
        return NULL;
    memcpy(scratch, line, len);
    scratch[len] = '\0';
    cJSON *root = cJSON_ParseWithOpts(scratch, NULL, true);
    const char *problem = s_record_problem(root, verifier);
    cJSON_Delete(root);
    return problem;
}

/*  Maps path as a dataset of records checked under verifier; "PATH: no examples" when it has
    none. */
static bt_status s_open_dataset(bt_source_t *self, const char *path, bt_dataset_t **out) {
    bt_dataset_config dc = {.path = path,
                            .check = s_check_record,
                            .user = &self->verifier,
                            .rules = S_RULES_VERSION << 8 | (uint32_t)self->verifier,
                            .line_max = S_LINE_MAX};
    BT_TRY(bt_dataset_open(&dc, out));
    if (bt_dataset_count(*out) == 0) {
        bt_dataset_destroy(out);
        return bt_fail(BT_EFORMAT, "%s: no examples", path);
    }
    return BT_OK;
}

/*  A keyed bijection of [0, n): a 4-round Feistel network (Luby and Rackoff 1988) on [0, 4^h),
    4^h the smallest power of 4 >= n, its round function splitmix64 of (key, round, half); values
    >= n are encrypted again until one lands below n (cycle walking, Black and Rogaway 2002), at
    most 4 tries on average since 4^h < 4n. */
static uint64_t s_permute(uint64_t x, uint64_t n, uint64_t key) {
    BT_ASSERT(x < n && n <= (1ULL << 62));
    int h = 0;
    while ((1ULL << 2 * h) < n)
        h++;
    uint64_t mask = (1ULL << h) - 1, round_key[4];
    for (uint64_t r = 0; r < 4; r++)
        round_key[r] = bt_rng_key(key, r);
    do {
        uint64_t left = x >> h, right = x & mask;
        for (int r = 0; r < 4; r++) {
            uint64_t next = left ^ (bt_rng_mix(round_key[r] ^ right) & mask);
            left = right;
            right = next;
        }
        x = left << h | right;
    } while (x >= n);
    return x;
}

bt_status bt_chat_apply(const char *tmpl, const char *system, const char *prompt, char **out) {
    *out = NULL;
    system = system ? system : "";
    bool with_system = system[0] != '\0';
    if (!strcmp(tmpl, "chatml"))
        tmpl = with_system ? "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{prompt}"
                             "<|im_end|>\n<|im_start|>assistant\n"
                           : "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n";
    else if (!strcmp(tmpl, "llama3"))
        tmpl = with_system ? "<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>"
                             "<|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\n\n"
                           : "<|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\n\n";
    const char *first = strstr(tmpl, "{prompt}"), *sys = strstr(tmpl, "{system}");
    if (!first || strstr(first + 1, "{prompt}"))
        return bt_fail(BT_EINVAL,
                       "chat template: expected \"chatml\", \"llama3\" or a text holding "
                       "{prompt} once, got \"%.60s\"",
                       tmpl);
    if (sys && strstr(sys + 1, "{system}"))
        return bt_fail(BT_EINVAL, "chat template: {system} more than once in \"%.60s\"", tmpl);
    bt_buf text = {0};
    for (const char *p = tmpl; *p && !text.failed;) {
        const char *next = strchr(p, '{');
        if (next && !strncmp(next, "{prompt}", 8)) {
            bt_buf_put(&text, p, (size_t)(next - p));
            bt_buf_puts(&text, prompt);
            p = next + 8;
        } else if (next && !strncmp(next, "{system}", 8)) {
            bt_buf_put(&text, p, (size_t)(next - p));
            bt_buf_puts(&text, system);
            p = next + 8;
        } else {
            size_t n = next ? (size_t)(next - p) + 1 : strlen(p);
            bt_buf_put(&text, p, n);
            p += n;
        }
    }
    if (!(*out = bt_buf_detach(&text, NULL)))
        return bt_fail(BT_ENOMEM, "chat template: out of memory");
    return BT_OK;
}

bt_status bt_chat_observation(const char *tmpl, const char *observation_template,
                              const char *observation, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    const char *frame = "{observation}";
    if (observation_template && observation_template[0])
        frame = observation_template;
    else if (tmpl && !strcmp(tmpl, "chatml"))
        frame = "<|im_end|>\n<|im_start|>tool\n{observation}<|im_end|>\n<|im_start|>assistant\n";
    else if (tmpl && !strcmp(tmpl, "llama3"))
        frame = "<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{observation}<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n";
    const char *at = strstr(frame, "{observation}");
    if (!at || strstr(at + 1, "{observation}"))
        return bt_fail(BT_EINVAL,
                       "observation template: expected a text holding {observation} once, got "
                       "\"%.60s\"",
                       frame);
    bt_buf text = {0};
    bt_buf_put(&text, frame, (size_t)(at - frame));
    if (len > 0)
        bt_buf_put(&text, observation, len);
    bt_buf_puts(&text, at + strlen("{observation}"));
    if (!(*out = bt_buf_detach(&text, out_len)))
        return bt_fail(BT_ENOMEM, "observation template: out of memory");
    return BT_OK;
}

static char *s_strdup_or_null(const char *s) {
    return s ? strdup(s) : NULL;
}

/*  The code verifier's sandbox limits, and one run of a trivial program, so a machine that cannot
    run completions fails now, not with every reward. */
static bt_status s_code_setup(bt_source_t *self, const bt_source_jsonl_config *cfg) {
    bt_sandbox_config_init(&self->sandbox);
    if (cfg->code_timeout_s > 0) {
        self->sandbox.timeout_s = cfg->code_timeout_s;
        self->sandbox.cpu_s = (int)ceil(cfg->code_timeout_s);
    }
    if (cfg->code_memory_bytes > 0)
        self->sandbox.memory_bytes = cfg->code_memory_bytes;
    bt_sandbox_result r;
    BT_TRY(bt_sandbox_run(&self->sandbox, "pass\n", 5, &r));
    if (r.verdict != BT_SANDBOX_PASS)
        return bt_fail(BT_EIO, "sandbox: /usr/bin/python3 cannot run \"pass\" (%s): %.200s",
                       bt_sandbox_verdict_name(r.verdict), r.head);
    return BT_OK;
}

bt_status bt_source_new_jsonl(const bt_source_jsonl_config *cfg, bt_source_t **task_out) {
    *task_out = NULL;
    if (!cfg->train_path)
        return bt_fail(BT_EINVAL, "train_path: required");
    if (cfg->verifier != BT_SOURCE_VERIFY_EXACT && cfg->verifier != BT_SOURCE_VERIFY_NUMERIC &&
        cfg->verifier != BT_SOURCE_VERIFY_MATH && cfg->verifier != BT_SOURCE_VERIFY_CODE)
        return bt_fail(BT_EINVAL, "verifier: expected exact, numeric, math or code, got %d",
                       cfg->verifier);
    bt_source_t *self = calloc(1, sizeof *self);
    if (!self)
        return bt_fail(BT_ENOMEM, "%s: out of memory", cfg->train_path);
    self->kind = S_JSONL;
    self->seed = cfg->seed;
    self->verifier = cfg->verifier;
    bt_status st = s_open_dataset(self, cfg->train_path, &self->train_file);
    if (st == BT_OK && cfg->heldout_path)
        st = s_open_dataset(self, cfg->heldout_path, &self->heldout_file);
    if (st == BT_OK) {
        uint64_t n = bt_dataset_count(self->train_file);
        self->n_heldout = self->heldout_file ? bt_dataset_count(self->heldout_file) : n / 10;
        self->n_train = self->heldout_file ? n : n - n / 10;
    }
    if (st == BT_OK && cfg->verifier == BT_SOURCE_VERIFY_CODE)
        st = s_code_setup(self, cfg);
    if (st == BT_OK && cfg->chat_template && cfg->chat_template[0]) {
        char *probe = NULL; /* a bad template fails now, not at the first example */
        st = bt_chat_apply(cfg->chat_template, cfg->system_prompt, "", &probe);
        free(probe);
        self->chat_template = strdup(cfg->chat_template);
        self->system_prompt = s_strdup_or_null(cfg->system_prompt);
        if (st == BT_OK && (!self->chat_template || (cfg->system_prompt && !self->system_prompt)))
            st = bt_fail(BT_ENOMEM, "%s: out of memory", cfg->train_path);
    }
    if (st == BT_OK && cfg->demonstration_key && cfg->demonstration_key[0]) {
        char *probe = NULL; /* a bad observation template fails now, not at the first example */
        size_t n = 0;
        st = bt_chat_observation(cfg->chat_template, cfg->observation_template, "", 0, &probe, &n);
        free(probe);
        self->demonstration_key = strdup(cfg->demonstration_key);
        self->observation_template = s_strdup_or_null(cfg->observation_template);
        if (st == BT_OK && (!self->demonstration_key ||
                            (cfg->observation_template && !self->observation_template)))
            st = bt_fail(BT_ENOMEM, "%s: out of memory", cfg->train_path);
    }
    if (st != BT_OK) {
        bt_source_destroy(&self);
        return st;
    }
    *task_out = self;
    return BT_OK;
}

/*  The JSON type of item, for messages. */
static const char *s_json_type(const cJSON *item) {
    if (cJSON_IsString(item))
        return "a string";
    if (cJSON_IsNumber(item))
        return "a number";
    if (cJSON_IsBool(item))
        return "a boolean";
    if (cJSON_IsNull(item))
        return "null";
    if (cJSON_IsArray(item))
        return "an array";
    return "an object";
}

/*  Fills ex->demo from item, record rec's demonstration (a string, or an array of strings
    [model, observation, model, ...] of odd length): each observation framed by the observation
    template, all in one block at ex->demo_heap. */
static bt_status s_set_demo(const bt_source_t *self, const bt_dataset_t *ds, uint64_t rec,
                            const cJSON *item, bt_source_example *ex) {
    int n = cJSON_IsString(item) ? 1 : cJSON_IsArray(item) ? cJSON_GetArraySize(item) : 0;
    char why[96] = "";
    if (!cJSON_IsString(item) && !cJSON_IsArray(item))
        snprintf(why, sizeof why, "%s", s_json_type(item));
    else if (n % 2 == 0)
        snprintf(why, sizeof why, "an array of %d", n);
    for (int i = 0; i < n && !why[0] && cJSON_IsArray(item); i++) {
        const cJSON *part = cJSON_GetArrayItem(item, i);
        if (!cJSON_IsString(part))
            snprintf(why, sizeof why, "%s at [%d]", s_json_type(part), i);
    }
    if (why[0])
        return bt_fail(BT_EFORMAT,
                       "%s: record %" PRIu64 ": \"%s\": expected a string or an array of strings "
                       "[model, observation, model, ...] of odd length, got %s",
                       bt_dataset_path(ds), rec + 1, self->demonstration_key, why);
    char **texts = calloc((size_t)n, sizeof *texts);
    size_t *lens = calloc((size_t)n, sizeof *lens), bytes = 0;
    bt_status st = texts && lens ? BT_OK : bt_fail(BT_ENOMEM, "dataset: out of memory");
    for (int i = 0; i < n && st == BT_OK; i++) {
        const char *v =
            cJSON_IsString(item) ? item->valuestring : cJSON_GetArrayItem(item, i)->valuestring;
        if (i % 2)
            st = bt_chat_observation(self->chat_template, self->observation_template, v, strlen(v),
                                     &texts[i], &lens[i]);
        else if (!(texts[i] = strdup(v)))
            st = bt_fail(BT_ENOMEM, "dataset: out of memory");
        else
            lens[i] = strlen(v);
        bytes += lens[i];
    }
    bt_source_turn *demo = NULL;
    if (st == BT_OK && !(demo = malloc((size_t)n * sizeof *demo + bytes + 1)))
        st = bt_fail(BT_ENOMEM, "dataset: out of memory");
    char *at = demo ? (char *)(demo + n) : NULL;
    for (int i = 0; i < n && st == BT_OK; i++) {
        memcpy(at, texts[i], lens[i]);
        demo[i] = (bt_source_turn){.text = at, .len = lens[i], .observation = i % 2 == 1};
        at += lens[i];
    }
    for (int i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(lens);
    if (st != BT_OK) {
        free(demo);
        return st;
    }
    ex->demo_heap = demo;
    ex->demo = demo;
    ex->n_demo = n;
    return BT_OK;
}

/*  Fills ex with prompt (chat template applied unless raw), answer and columns (NULL: none), all
    in one heap block. */
static bt_status s_set_example(const bt_source_t *self, const char *prompt, const char *answer,
                               const char *columns, bool raw, bt_source_example *ex) {
    char *templated = NULL;
    bt_status st = BT_OK;
    if (self->chat_template && !raw) {
        st = bt_chat_apply(self->chat_template, self->system_prompt, prompt, &templated);
        prompt = templated;
    }
    if (st == BT_OK) {
        size_t plen = strlen(prompt), alen = strlen(answer), clen = columns ? strlen(columns) : 0;
        ex->heap = malloc(plen + alen + clen + 3);
        if (ex->heap) {
            memcpy(ex->heap, prompt, plen + 1);
            memcpy(ex->heap + plen + 1, answer, alen + 1);
            ex->prompt = ex->heap;
            ex->answer = ex->heap + plen + 1;
            if (columns) {
                memcpy(ex->heap + plen + alen + 2, columns, clen + 1);
                ex->columns = ex->heap + plen + alen + 2;
            }
        } else
            st = bt_fail(BT_ENOMEM, "dataset: out of memory");
    }
    free(templated);
    return st;
}

/*  A record that the index check took but that reads otherwise now. */
static bt_status s_changed(const bt_dataset_t *ds, uint64_t rec, const char *problem) {
    return bt_fail(BT_EFORMAT, "%s: record %" PRIu64 ": %s (the file changed since it was indexed)",
                   bt_dataset_path(ds), rec + 1, problem);
}

/*  A code record: its prompt, and its harness as the answer. */
static bt_status s_code_example(const bt_source_t *self, const bt_dataset_t *ds, uint64_t rec,
                                const char *line, size_t len, bool raw, bt_source_example *ex) {
    bt_code_record r = {0};
    const char *problem = bt_code_parse(line, len, &r);
    if (problem && !strcmp(problem, "out of memory"))
        return bt_fail(BT_ENOMEM, "%s: record %" PRIu64 ": out of memory", bt_dataset_path(ds),
                       rec + 1);
    if (problem)
        return s_changed(ds, rec, problem);
    bt_status st = s_set_example(self, r.prompt, r.harness, NULL, raw, ex);
    bt_code_record_release(&r);
    return st;
}

/*  The keys of a record's root other than "prompt" and "answer" (which the caller has detached)
    as a compact JSON object into *out (caller frees; NULL when there are none), each byte of a
    string that is not well-formed UTF-8 written \ufffd: cJSON's printer escapes only control
    bytes, so every byte from 0x80 up that it writes lies inside a string. */
static bt_status s_columns(const cJSON *root, char **out) {
    *out = NULL;
    if (!root->child)
        return BT_OK;
    char *text = cJSON_PrintUnformatted(root);
    if (!text)
        return bt_fail(BT_ENOMEM, "dataset: out of memory");
    size_t n = strlen(text);
    if (bt_utf8_is_valid((const uint8_t *)text, n)) {
        *out = text;
        return BT_OK;
    }
    bt_buf b = {0};
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        bool valid;
        size_t k = bt_utf8_decode(text + i, n - i, &cp, &valid);
        if (valid)
            bt_buf_put(&b, text + i, k);
        else
            bt_buf_puts(&b, "\\ufffd");
        i += k;
    }
    free(text);
    *out = bt_buf_detach(&b, NULL);
    return *out ? BT_OK : bt_fail(BT_ENOMEM, "dataset: out of memory");
}

/*  Parses record rec of ds into ex: the prompt, chat template applied, the answer (a number as
    its shortest exact text; the code verifier's harness) and the other keys as columns, all in
    one heap block. */
static bt_status s_jsonl_example(const bt_source_t *self, const bt_dataset_t *ds, uint64_t rec,
                                 bool raw, bt_source_example *ex) {
    size_t len;
    char *line = NULL;
    BT_TRY(bt_dataset_record(ds, rec, &line, &len));
    if (self->verifier == BT_SOURCE_VERIFY_CODE) {
        bt_status st = s_code_example(self, ds, rec, line, len, raw, ex);
        free(line);
        return st;
    }
    cJSON *root = cJSON_ParseWithOpts(line, NULL, true);
    free(line);
    const char *problem = s_record_problem(root, self->verifier);
    if (problem) {
        bt_status st = s_changed(ds, rec, problem);
        cJSON_Delete(root);
        return st;
    }
    cJSON *answer = cJSON_DetachItemFromObjectCaseSensitive(root, "answer");
    cJSON *prompt = cJSON_DetachItemFromObjectCaseSensitive(root, "prompt");
    cJSON *demo = self->demonstration_key
                      ? cJSON_DetachItemFromObjectCaseSensitive(root, self->demonstration_key)
                      : NULL; /* for SFT, not a column the reward sees */
    char number[32], *columns = NULL;
    if (cJSON_IsNumber(answer))
        s_format_number(answer->valuedouble, number);
    bt_status st = demo ? s_set_demo(self, ds, rec, demo, ex) : BT_OK;
    cJSON_Delete(demo);
    if (st == BT_OK)
        st = s_columns(root, &columns);
    if (st == BT_OK)
        st = s_set_example(self, prompt->valuestring,
                           cJSON_IsString(answer) ? answer->valuestring : number, columns, raw, ex);
    free(columns);
    cJSON_Delete(prompt);
    cJSON_Delete(answer);
    cJSON_Delete(root);
    return st;
}

/*  Training record j (0 .. n_train) that stream index `index` shows: epoch index / n_train's
    permutation of the training records. */
static uint64_t s_train_record(const bt_source_t *self, uint64_t index) {
    uint64_t epoch = index / self->n_train;
    return s_permute(index % self->n_train, self->n_train,
                     bt_rng_key(bt_rng_key(self->seed, S_TAG_EPOCH), epoch));
}

static bt_status s_jsonl_train_example(const bt_source_t *self, uint64_t index,
                                       bt_source_example *ex) {
    uint64_t j = s_train_record(self, index);
    /* without a held-out file, training record j skips every tenth record */
    uint64_t rec = self->heldout_file ? j : j / 9 * 10 + j % 9;
    return s_jsonl_example(self, self->train_file, rec, false, ex);
}

/* ---- any task ------------------------------------------------------------------------------- */
void bt_source_destroy(bt_source_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_source_t *self = *self_p;
    bt_dataset_destroy(&self->train_file);
    bt_dataset_destroy(&self->heldout_file);
    free(self->chat_template);
    free(self->system_prompt);
    free(self->demonstration_key);
    free(self->observation_template);
    free(self->fewshot_separator);
    free(self->fewshot_delimiter);
    free(self->heldout_codes);
    free(self);
    *self_p = NULL;
}

void bt_source_example_init(bt_source_example *ex) {
    memset(ex, 0, sizeof *ex);
}

void bt_source_example_release(bt_source_example *ex) {
    free(ex->heap);
    ex->heap = NULL;
    free(ex->demo_heap);
    ex->demo_heap = NULL;
    ex->demo = NULL;
    ex->n_demo = 0;
    ex->prompt = NULL;
    ex->answer = NULL;
    ex->columns = NULL;
}

bt_status bt_source_train_example(const bt_source_t *self, uint64_t index, bt_source_example *ex) {
    bt_source_example_release(ex);
    if (self->kind == S_JSONL)
        return s_jsonl_train_example(self, index, ex);
    s_arith_train_example(self, index, ex);
    return BT_OK;
}

uint64_t bt_source_record(const bt_source_t *self, uint64_t index) {
    return self->kind == S_ARITH ? index : s_train_record(self, index);
}

uint64_t bt_source_epoch_size(const bt_source_t *self) {
    return self->kind == S_ARITH ? 0 : self->n_train;
}

size_t bt_source_heldout_count(const bt_source_t *self) {
    return self->kind == S_ARITH ? self->n_heldout_codes : (size_t)self->n_heldout;
}

/*  Held-out example i as written (raw: without the chat template). */
static bt_status s_heldout(const bt_source_t *self, size_t i, bool raw, bt_source_example *ex) {
    bt_source_example_release(ex);
    if (self->kind == S_ARITH) {
        s_arith_format(self->heldout_codes[i], ex);
        return BT_OK;
    }
    if (self->heldout_file)
        return s_jsonl_example(self, self->heldout_file, i, raw, ex);
    return s_jsonl_example(self, self->train_file, (uint64_t)i * 10 + 9, raw, ex);
}

bt_status bt_source_set_fewshot(bt_source_t *self, const bt_source_fewshot *f) {
    const bt_source_t *pool = f->pool ? f->pool : self;
    if (f->k > 0 && ((self->kind == S_JSONL && self->verifier == BT_SOURCE_VERIFY_CODE) ||
                     (pool->kind == S_JSONL && pool->verifier == BT_SOURCE_VERIFY_CODE)))
        return bt_fail(BT_EINVAL,
                       "num_fewshot: expected 0 for a code dataset (its answers are "
                       "tests, not solutions to show), got %lld",
                       (long long)f->k);
    BT_TRY(bt_source_fewshot_check(f->k, bt_source_heldout_count(pool), !f->pool));
    free(self->fewshot_separator);
    free(self->fewshot_delimiter);
    self->fewshot_separator = strdup(f->separator ? f->separator : "\n\n");
    self->fewshot_delimiter = strdup(f->delimiter ? f->delimiter : " ");
    if (!self->fewshot_separator || !self->fewshot_delimiter)
        return bt_fail(BT_ENOMEM, "source: out of memory");
    self->fewshot_k = f->k;
    self->fewshot_pool = f->pool;
    self->fewshot_seed = f->seed;
    return BT_OK;
}

bt_status bt_source_fewshot_check(int64_t k, size_t n, bool own) {
    size_t lends = n - (own && n > 0); /* never the item itself */
    if (k < 0 || k > BT_SOURCE_FEWSHOT_MAX || (size_t)k > lends)
        return bt_fail(BT_EINVAL,
                       "num_fewshot: expected an integer in [0, %d] and at most the %zu exemplars "
                       "the %s holds, got %lld",
                       BT_SOURCE_FEWSHOT_MAX, lends,
                       own ? "dataset's other items" : "fewshot_source", (long long)k);
    return BT_OK;
}

void bt_source_fewshot_pick(uint64_t seed, size_t i, size_t n, bool own, int64_t k,
                            size_t *picked) {
    BT_ASSERT(k >= 0 && k <= BT_SOURCE_FEWSHOT_MAX && (size_t)k + own <= n);
    uint64_t state = bt_rng_key(bt_rng_key(seed, S_TAG_FEWSHOT), i);
    for (int64_t q = 0; q < k; q++) {
        size_t j = 0;
        bool fresh = false;
        while (!fresh) { /* rejection: distinct, and not the item itself */
            j = (size_t)(bt_rng_next(&state) % n);
            fresh = !(own && j == i);
            for (int64_t r = 0; r < q && fresh; r++)
                fresh = picked[r] != j;
        }
        picked[q] = j;
    }
}

/*  The few-shot prompt of held-out item i into b: k exemplars of the pool
    (bt_source_fewshot_pick), each prompt, delimiter, answer, separator; then item i's prompt.  The
    answer and columns of item i into *answer and *columns (caller frees; columns may be NULL). */
static bt_status s_fewshot(const bt_source_t *self, size_t i, bt_buf *b, char **answer,
                           char **columns) {
    const bt_source_t *pool = self->fewshot_pool ? self->fewshot_pool : self;
    size_t picked[BT_SOURCE_FEWSHOT_MAX];
    bt_source_fewshot_pick(self->fewshot_seed, i, bt_source_heldout_count(pool), pool == self,
                           self->fewshot_k, picked);
    bt_source_example ex;
    bt_source_example_init(&ex);
    bt_status st = BT_OK;
    for (int64_t k = 0; k < self->fewshot_k && st == BT_OK; k++) {
        size_t j = picked[k];
        st = s_heldout(pool, j, true, &ex);
        if (st == BT_OK && !(bt_buf_puts(b, ex.prompt ? ex.prompt : "") &&
                             bt_buf_puts(b, self->fewshot_delimiter) &&
                             bt_buf_puts(b, ex.answer ? ex.answer : "") &&
                             bt_buf_puts(b, self->fewshot_separator)))
            st = bt_fail(BT_ENOMEM, "source: out of memory");
    }
    if (st == BT_OK)
        st = s_heldout(self, i, true, &ex);
    if (st == BT_OK && !bt_buf_puts(b, ex.prompt ? ex.prompt : ""))
        st = bt_fail(BT_ENOMEM, "source: out of memory");
    *answer = st == BT_OK ? strdup(ex.answer ? ex.answer : "") : NULL;
    *columns = st == BT_OK && ex.columns ? strdup(ex.columns) : NULL;
    bool lost = st == BT_OK && (!*answer || (ex.columns && !*columns));
    bt_source_example_release(&ex);
    return lost ? bt_fail(BT_ENOMEM, "source: out of memory") : st;
}

bt_status bt_source_heldout_example(const bt_source_t *self, size_t i, bt_source_example *ex) {
    BT_ASSERT(i < bt_source_heldout_count(self));
    if (self->fewshot_k == 0)
        return s_heldout(self, i, false, ex);
    bt_source_example_release(ex);
    bt_buf b = {0};
    char *answer = NULL, *columns = NULL;
    bt_status st = s_fewshot(self, i, &b, &answer, &columns);
    if (st == BT_OK) /* the whole few-shot prompt is the user's turn of the chat template */
        st = s_set_example(self, b.len ? b.data : "", answer, columns, false, ex);
    free(answer);
    free(columns);
    bt_buf_release(&b);
    return st;
}

/* ---- verifiers ------------------------------------------------------------------------------ */
/*  Narrows [*start, *end) of s to drop white space at both ends. */
static void s_trim(const char *s, size_t *start, size_t *end) {
    while (*start < *end && isspace((unsigned char)s[*start]))
        (*start)++;
    while (*end > *start && isspace((unsigned char)s[*end - 1]))
        (*end)--;
}

static size_t s_skip_digits(const char *s, size_t i, size_t end) {
    while (i < end && isdigit((unsigned char)s[i]))
        i++;
    return i;
}

/*  Length of the number at s[i, end), 0 if none.  Format:
    [+-]? (D (",ddd")* ("." D)? | "." D) ([eE] [+-]? D)?   where D is one or more digits, and a
    thousands group ",ddd" is exactly three digits. */
static size_t s_number_at(const char *s, size_t i, size_t end) {
    size_t p = i + (i < end && (s[i] == '-' || s[i] == '+'));
    size_t int_end = s_skip_digits(s, p, end);
    bool has_int = int_end > p;
    p = int_end;
    while (has_int && p + 4 <= end && s[p] == ',' && s_skip_digits(s, p + 1, end) == p + 4)
        p += 4;
    bool has_frac = p + 1 < end && s[p] == '.' && isdigit((unsigned char)s[p + 1]);
    if (has_frac)
        p = s_skip_digits(s, p + 1, end);
    if (!has_int && !has_frac)
        return 0;
    if (p < end && (s[p] == 'e' || s[p] == 'E')) {
        size_t q = p + 1 + (p + 1 < end && (s[p + 1] == '-' || s[p + 1] == '+'));
        size_t exp_end = s_skip_digits(s, q, end);
        if (exp_end > q)
            p = exp_end;
    }
    return p - i;
}

/*  Finds the last number of s[0, len): sets *at and returns its length, 0 if none.  A sign right
    after a letter or digit ("2024-01") is not part of the number. */
static size_t s_last_number(const char *s, size_t len, size_t *at) {
    size_t found = 0;
    for (size_t i = 0; i < len;) {
        bool glued_sign = (s[i] == '-' || s[i] == '+') && i > 0 && isalnum((unsigned char)s[i - 1]);
        size_t n = glued_sign ? 0 : s_number_at(s, i, len);
        if (n > 0) {
            *at = i;
            found = n;
        }
        i += n > 0 ? n : 1;
    }
    return found;
}

/*  Value of the number s[0, n) without its thousands commas; false when longer than 127 chars. */
static bool s_number_value(const char *s, size_t n, double *out) {
    char buf[128];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ',')
            continue;
        if (k + 1 >= sizeof buf)
            return false;
        buf[k++] = s[i];
    }
    buf[k] = '\0';
    *out = strtod(buf, NULL);
    return true;
}

/*  Whether s[0, len), trimmed, is exactly one number. */
static bool s_is_one_number(const char *s, size_t len) {
    size_t start = 0, end = len;
    s_trim(s, &start, &end);
    return end > start && s_number_at(s, start, end) == end - start;
}

/*  math.isclose with rel_tol 1e-6, abs_tol 1e-9. */
static bool s_is_close(double x, double y) {
    return fabs(x - y) <= fmax(1e-6 * fmax(fabs(x), fabs(y)), 1e-9);
}

static void s_verify_arith(const char *answer, const char *c, size_t len, bt_reward_detail *d) {
    size_t start = 0, end = len;
    s_trim(c, &start, &end);
    size_t digits = start + (start < end && c[start] == '-');
    size_t stop = s_skip_digits(c, digits, end);
    bool found = stop > digits;
    d->extracted_start = start;
    d->extracted_len = found ? stop - start : 0;
    d->correct =
        found && strlen(answer) == stop - start && !memcmp(answer, c + start, stop - start);
    d->well_formed = found && stop == end;
}

static void s_verify_exact(const char *answer, const char *c, size_t len, bt_reward_detail *d) {
    size_t start = 0, end = len, a_start = 0, a_end = strlen(answer);
    s_trim(c, &start, &end);
    s_trim(answer, &a_start, &a_end);
    d->extracted_start = start;
    d->extracted_len = end - start;
    d->correct =
        end - start == a_end - a_start && !memcmp(c + start, answer + a_start, end - start);
    d->well_formed = end > start;
}

static void s_verify_numeric(const char *answer, const char *c, size_t len, bt_reward_detail *d) {
    size_t at = 0, n = s_last_number(c, len, &at);
    size_t a_start = 0, a_end = strlen(answer);
    s_trim(answer, &a_start, &a_end);
    double x, y;
    d->extracted_start = at;
    d->extracted_len = n;
    d->correct = n > 0 && s_is_one_number(answer, a_end) && s_number_value(c + at, n, &x) &&
                 s_number_value(answer + a_start, a_end - a_start, &y) && s_is_close(x, y);
    d->well_formed = s_is_one_number(c, len);
}

/* ---- the math verifier ---------------------------------------------------------------------- */
/*  Whether s[i, end) starts with the NUL-terminated word w. */
static bool s_starts(const char *s, size_t i, size_t end, const char *w) {
    size_t n = strlen(w);
    return end - i >= n && !memcmp(s + i, w, n);
}

/*  Length of "\frac{A}{B}" (or \dfrac, \tfrac) at s[i, end), A and B numbers; 0 if none. */
static size_t s_frac_at(const char *s, size_t i, size_t end) {
    size_t p = i;
    if (s_starts(s, p, end, "\\frac{"))
        p += 6;
    else if (s_starts(s, p, end, "\\dfrac{") || s_starts(s, p, end, "\\tfrac{"))
        p += 7;
    else
        return 0;
    size_t a = s_number_at(s, p, end);
    if (a == 0 || p + a + 1 >= end || s[p + a] != '}' || s[p + a + 1] != '{')
        return 0;
    p += a + 2;
    size_t b = s_number_at(s, p, end);
    if (b == 0 || p + b >= end || s[p + b] != '}')
        return 0;
    return p + b + 1 - i;
}

/*  Length of a math number at s[i, end), 0 if none: [+-]? \frac{A}{B}, or a number (see
    s_number_at) optionally followed by "/" and an unsigned number. */
static size_t s_math_number_at(const char *s, size_t i, size_t end) {
    size_t sign = i < end && (s[i] == '-' || s[i] == '+');
    size_t frac = s_frac_at(s, i + sign, end);
    if (frac > 0)
        return sign + frac;
    size_t n = s_number_at(s, i, end);
    if (n > 0 && i + n < end && s[i + n] == '/' && i + n + 1 < end &&
        (isdigit((unsigned char)s[i + n + 1]) || s[i + n + 1] == '.')) {
        size_t d = s_number_at(s, i + n + 1, end);
        if (d > 0)
            n += 1 + d;
    }
    return n;
}

/*  The content of the last "\boxed{...}" of s[0, len) with its braces balanced: sets *at and *n
    and returns true; false when there is none or the last one is not closed. */
static bool s_math_boxed(const char *s, size_t len, size_t *at, size_t *n) {
    static const char open[] = "\\boxed{";
    size_t k = sizeof open - 1;
    for (size_t i = len >= k ? len - k + 1 : 0; i-- > 0;) {
        if (memcmp(s + i, open, k) != 0)
            continue;
        int depth = 1;
        for (size_t p = i + k; p < len; p++) {
            depth += s[p] == '{' ? 1 : s[p] == '}' ? -1 : 0;
            if (depth == 0) {
                *at = i + k;
                *n = p - (i + k);
                return true;
            }
        }
        return false;
    }
    return false;
}

/*  The marked answer of s[0, len): the rest of the line after the last "####", else the last
    balanced \boxed{}.  Returns 1 and sets the trimmed span when found, -1 when the marker holds
    nothing ("#### " at the end, "\boxed{}"), 0 when s has no marker. */
static int s_math_marked(const char *s, size_t len, size_t *at, size_t *n) {
    size_t start = 0, end = 0;
    bool hashes = false;
    for (size_t i = len >= 4 ? len - 3 : 0; i-- > 0;) {
        if (memcmp(s + i, "####", 4) == 0) {
            start = i + 4;
            end = start;
            while (end < len && s[end] != '\n')
                end++;
            hashes = true;
            break;
        }
    }
    if (!hashes) {
        size_t n_box;
        if (!s_math_boxed(s, len, &start, &n_box))
            return 0;
        end = start + n_box;
    }
    s_trim(s, &start, &end);
    *at = start;
    *n = end - start;
    return end > start ? 1 : -1;
}

/*  The answer of a completion: the marked answer, else the last math number.  Sets *marked. */
static bool s_math_find(const char *s, size_t len, size_t *at, size_t *n, bool *marked) {
    int m = s_math_marked(s, len, at, n);
    *marked = m == 1;
    if (m != 0)
        return m == 1;
    *n = 0;
    for (size_t i = 0; i < len;) {
        bool glued_sign = (s[i] == '-' || s[i] == '+') && i > 0 && isalnum((unsigned char)s[i - 1]);
        size_t k = glued_sign ? 0 : s_math_number_at(s, i, len);
        if (k > 0) {
            *at = i;
            *n = k;
        }
        i += k > 0 ? k : 1;
    }
    return *n > 0;
}

/*  The answer of a reference: the marked answer, else the whole trimmed text. */
static bool s_math_reference(const char *s, size_t *at, size_t *n) {
    size_t len = strlen(s);
    int m = s_math_marked(s, len, at, n);
    if (m != 0)
        return m == 1;
    size_t start = 0, end = len;
    s_trim(s, &start, &end);
    *at = start;
    *n = end - start;
    return end > start;
}

/*  Drops w from the front of the NUL-terminated t[0, *n) when it is there. */
static bool s_drop_front(char *t, size_t *n, const char *w) {
    size_t k = strlen(w);
    if (*n < k || memcmp(t, w, k) != 0)
        return false;
    memmove(t, t + k, *n - k + 1);
    *n -= k;
    return true;
}

/*  Drops w from the end of the NUL-terminated t[0, *n) when it is there. */
static bool s_drop_back(char *t, size_t *n, const char *w) {
    size_t k = strlen(w);
    if (*n < k || memcmp(t + *n - k, w, k) != 0)
        return false;
    *n -= k;
    t[*n] = '\0';
    return true;
}

/*  The normal form of an answer s[0, n) into out[S_MATH_MAX]: white space removed (a run between
    two digits becomes one space), \left, \right, \! and \, removed, then leading "$" and "\$" and
    trailing "$", "\$" and "." stripped.  False when it is empty or does not fit. */
static bool s_math_normalize(const char *s, size_t n, char out[S_MATH_MAX]) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (isspace((unsigned char)s[i])) {
            size_t j = i;
            while (j < n && isspace((unsigned char)s[j]))
                j++;
            if (k > 0 && isdigit((unsigned char)out[k - 1]) && j < n &&
                isdigit((unsigned char)s[j])) {
                if (k + 1 >= S_MATH_MAX)
                    return false;
                out[k++] = ' ';
            }
            i = j;
            continue;
        }
        size_t skip = 0;
        if (s_starts(s, i, n, "\\!") || s_starts(s, i, n, "\\,"))
            skip = 2;
        else if (s_starts(s, i, n, "\\left") && !(i + 5 < n && isalpha((unsigned char)s[i + 5])))
            skip = 5;
        else if (s_starts(s, i, n, "\\right") && !(i + 6 < n && isalpha((unsigned char)s[i + 6])))
            skip = 6;
        if (skip > 0) {
            i += skip;
            continue;
        }
        if (k + 1 >= S_MATH_MAX)
            return false;
        out[k++] = s[i++];
    }
    out[k] = '\0';
    while (s_drop_front(out, &k, "$") || s_drop_front(out, &k, "\\$"))
        ;
    while (s_drop_back(out, &k, "\\$") || s_drop_back(out, &k, "$") || s_drop_back(out, &k, "."))
        ;
    return k > 0;
}

/*  The value of a normal form that is one math number, with an optional trailing "%" or "\%"
    (50% reads as 50); false for anything else, a zero denominator or an infinite value. */
static bool s_math_value(const char *t, double *x) {
    size_t n = strlen(t);
    if (n >= 2 && !memcmp(t + n - 2, "\\%", 2))
        n -= 2;
    else if (n >= 1 && t[n - 1] == '%')
        n -= 1;
    if (n == 0 || s_math_number_at(t, 0, n) != n)
        return false;
    double sign = 1.0;
    size_t p = 0;
    if (t[0] == '-' || t[0] == '+') {
        sign = t[0] == '-' ? -1.0 : 1.0;
        p = 1;
    }
    double num, den = 1.0;
    if (s_frac_at(t, p, n) > 0) { /* [+-]? \frac{A}{B} */
        size_t a0 = p + (t[p + 1] == 'f' ? 6 : 7), a = s_number_at(t, a0, n);
        size_t b0 = a0 + a + 2;
        if (!s_number_value(t + a0, a, &num) || !s_number_value(t + b0, n - 1 - b0, &den))
            return false;
    } else { /* A or A/B, A with its own sign */
        sign = 1.0;
        size_t a = s_number_at(t, 0, n);
        if (!s_number_value(t, a, &num) || (a < n && !s_number_value(t + a + 1, n - a - 1, &den)))
            return false;
    }
    *x = sign * num / den;
    return den != 0.0 && isfinite(*x);
}

/*  Whether two normal forms are the same answer: both numbers within relative 1e-9, or else
    the same string. */
static bool s_math_same(const char *a, const char *b) {
    double x, y;
    if (s_math_value(a, &x) && s_math_value(b, &y))
        return fabs(x - y) <= 1e-9 * fmax(fabs(x), fabs(y));
    return strcmp(a, b) == 0;
}

bool bt_source_math_answer(const char *completion, size_t len, char *out, size_t cap) {
    size_t at, n;
    bool marked;
    if (!s_math_find(completion, len, &at, &n, &marked))
        return false;
    return s_put(out, cap, completion + at, n) == n && n > 0;
}

bool bt_source_math_equal(const char *a, const char *b) {
    char na[S_MATH_MAX], nb[S_MATH_MAX];
    return s_math_normalize(a, strlen(a), na) && s_math_normalize(b, strlen(b), nb) &&
           s_math_same(na, nb);
}

static void s_verify_math(const char *answer, const char *c, size_t len, bt_reward_detail *d) {
    size_t at = 0, n = 0, r_at, r_n;
    bool marked = false;
    bool found = s_math_find(c, len, &at, &n, &marked);
    char got[S_MATH_MAX], want[S_MATH_MAX];
    d->extracted_start = found ? at : 0;
    d->extracted_len = found ? n : 0;
    d->correct = found && s_math_reference(answer, &r_at, &r_n) &&
                 s_math_normalize(c + at, n, got) && s_math_normalize(answer + r_at, r_n, want) &&
                 s_math_same(got, want);
    d->well_formed = found && marked;
}

/*  Runs the completion's code with the harness's tests in the sandbox. */
static void s_verify_code(const bt_source_t *self, const char *harness, const char *c, size_t len,
                          bt_reward_detail *d) {
    bt_sandbox_result r;
    bt_code_extract(c, len, &d->extracted_start, &d->extracted_len);
    bt_status st = bt_code_run(&self->sandbox, harness, c, len, &r);
    if (st != BT_OK)
        bt_log(BT_LOG_WARN, "code verifier: %s; the completion scores 0", bt_last_error());
    d->correct = st == BT_OK && r.verdict == BT_SANDBOX_PASS;
    d->well_formed = st == BT_OK && (r.verdict == BT_SANDBOX_PASS || r.verdict == BT_SANDBOX_EXIT);
}

double bt_source_reward(const bt_source_t *self, const char *answer, const char *completion,
                        size_t len, bt_reward_detail *detail) {
    bt_reward_detail local;
    bt_reward_detail *d = detail ? detail : &local;
    if (self->kind == S_ARITH)
        s_verify_arith(answer, completion, len, d);
    else if (self->verifier == BT_SOURCE_VERIFY_EXACT)
        s_verify_exact(answer, completion, len, d);
    else if (self->verifier == BT_SOURCE_VERIFY_MATH)
        s_verify_math(answer, completion, len, d);
    else if (self->verifier == BT_SOURCE_VERIFY_CODE)
        s_verify_code(self, answer, completion, len, d);
    else
        s_verify_numeric(answer, completion, len, d);
    double format = self->kind == S_ARITH ? self->format_reward : 0.0;
    return (d->correct ? 1.0 : 0.0) + (d->well_formed ? format : 0.0);
}

void bt_source_set_reward_fn(bt_source_t *self, bt_reward_fn *fn, void *user) {
    self->reward_fn = fn;
    self->reward_user = user;
}

double bt_source_score(const bt_source_t *self, const char *prompt, const char *answer,
                       const char *completion, size_t len, bt_reward_detail *detail) {
    if (!self->reward_fn)
        return bt_source_reward(self, answer, completion, len, detail);
    double r = self->reward_fn(prompt, completion, len, answer, self->reward_user);
    if (detail)
        *detail = (bt_reward_detail){
            .correct = r >= 1.0, .well_formed = true, .extracted_start = 0, .extracted_len = len};
    return r;
}

/* ---- robustness and majority voting ---------------------------------------------------------- */
static const char *const s_perturbation_names[BT_PERTURB_COUNT] = {"spacing", "order",
                                                                   "distractor"};

/*  Sentences with one number and nothing to do with any problem. */
static const char *const s_distractors[] = {
    "I have %d cats.",
    "There are %d books on the shelf.",
    "The bus leaves in %d minutes.",
    "My aunt planted %d trees.",
    "The room has %d windows.",
    "We saw %d birds this morning.",
};

const char *bt_source_perturbation_name(bt_source_perturbation p) {
    return (unsigned)p < BT_PERTURB_COUNT ? s_perturbation_names[p] : "unknown";
}

/*  Copies text[0, n) and a NUL into buf; returns n, or 0 (buf untouched) when it does not fit. */
static size_t s_put(char *buf, size_t len, const char *text, size_t n) {
    if (n >= len)
        return 0;
    memcpy(buf, text, n);
    buf[n] = '\0';
    return n;
}

/*  The distractor sentence of held-out example i; returns its length. */
static size_t s_distractor(size_t i, char out[64]) {
    uint64_t state = bt_rng_key(S_TAG_ASIDE, i);
    size_t pick = (size_t)(bt_rng_next(&state) % (sizeof s_distractors / sizeof *s_distractors));
    int number = 2 + (int)(bt_rng_next(&state) % 19); /* 2..20 */
    return (size_t)snprintf(out, 64, s_distractors[pick], number);
}

static size_t s_arith_perturb(const bt_source_t *self, size_t i, bt_source_perturbation p,
                              char *buf, size_t len) {
    int op;
    int64_t a, b;
    s_decode(self->heldout_codes[i], &op, &a, &b);
    char text[128], sentence[64];
    int n = 0;
    if (p == BT_PERTURB_SPACING)
        n = snprintf(text, sizeof text, "%" PRId64 " %c %" PRId64 " =", a, s_ops[op], b);
    else if (p == BT_PERTURB_ORDER && s_ops[op] != '-') /* + and * commute */
        n = snprintf(text, sizeof text, "%" PRId64 "%c%" PRId64 "=", b, s_ops[op], a);
    else if (p == BT_PERTURB_DISTRACTOR) {
        s_distractor(i, sentence);
        n = snprintf(text, sizeof text, "%s %" PRId64 "%c%" PRId64 "=", sentence, a, s_ops[op], b);
    }
    return n > 0 ? s_put(buf, len, text, (size_t)n) : 0;
}

/*  The perturbation of a held-out prompt (see bt_source_perturb) into buf. */
static size_t s_prompt_perturb(const char *prompt, size_t i, bt_source_perturbation p, char *buf,
                               size_t len) {
    size_t plen = strlen(prompt), n = 0;
    if (p == BT_PERTURB_SPACING) {
        n = 1 + plen;
        for (const char *c = prompt; *c; c++)
            n += *c == ' ';
        if (n >= len)
            return 0;
        char *out = buf;
        *out++ = ' ';
        for (const char *c = prompt; *c; c++) {
            if (*c == ' ')
                *out++ = ' ';
            *out++ = *c;
        }
        *out = '\0';
    } else if (p == BT_PERTURB_DISTRACTOR) {
        char sentence[64];
        size_t slen = s_distractor(i, sentence);
        n = slen + 1 + plen;
        if (n >= len)
            return 0;
        memcpy(buf, sentence, slen);
        buf[slen] = ' ';
        memcpy(buf + slen + 1, prompt, plen + 1);
    }
    return n;
}

static size_t s_jsonl_perturb(const bt_source_t *self, size_t i, bt_source_perturbation p,
                              char *buf, size_t len) {
    if (p != BT_PERTURB_SPACING && p != BT_PERTURB_DISTRACTOR)
        return 0;
    bt_source_example ex;
    bt_source_example_init(&ex);
    size_t n = bt_source_heldout_example(self, i, &ex) == BT_OK
                   ? s_prompt_perturb(ex.prompt, i, p, buf, len)
                   : 0;
    bt_source_example_release(&ex);
    return n;
}

size_t bt_source_perturb(const bt_source_t *self, size_t i, bt_source_perturbation p, char *buf,
                         size_t len) {
    BT_ASSERT(i < bt_source_heldout_count(self));
    return self->kind == S_ARITH ? s_arith_perturb(self, i, p, buf, len)
                                 : s_jsonl_perturb(self, i, p, buf, len);
}

size_t bt_source_canonical_answer(const bt_source_t *self, const char *completion, size_t len,
                                  char *buf, size_t buflen) {
    bt_reward_detail d; /* the verifier's own extraction; the empty answer is never matched */
    if (self->kind == S_JSONL && self->verifier == BT_SOURCE_VERIFY_CODE)
        return 0;
    bt_source_reward(self, "", completion, len, &d);
    const char *text = completion + d.extracted_start;
    if (d.extracted_len == 0)
        return 0;
    if (self->kind == S_ARITH || self->verifier == BT_SOURCE_VERIFY_EXACT)
        return s_put(buf, buflen, text, d.extracted_len);
    double x;
    char form[S_MATH_MAX];
    if (self->verifier == BT_SOURCE_VERIFY_MATH) {
        if (!s_math_normalize(text, d.extracted_len, form))
            return 0;
        if (!s_math_value(form, &x))
            return s_put(buf, buflen, form, strlen(form));
        s_format_number(x + 0.0, form); /* + 0.0 turns -0 into 0 */
        return s_put(buf, buflen, form, strlen(form));
    }
    char number[32];
    if (!s_number_value(text, d.extracted_len, &x))
        return 0;
    s_format_number(x + 0.0, number); /* + 0.0 turns -0 into 0 */
    return s_put(buf, buflen, number, strlen(number));
}
