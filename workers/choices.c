/*  choices.c — multiple choice by log-likelihood; see choices.h. */
#define _POSIX_C_SOURCE 200809L
#include "baton/choices.h"

#include "baton/buf.h"
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/rng.h"
#include "baton/source.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_TAG_SHUFFLE 0x73687566666c65ULL /* "shuffle": the order of an item's choices */

typedef struct s_item {
    char *context;
    char *choices[BT_CHOICES_MAX];
    int n, answer;
    int subject; /* index into the set's subjects; -1: none */
} s_item;

struct bt_choice_set {
    s_item *items;
    size_t n;
    char subjects[BT_CHOICES_SUBJECTS][BT_CHOICES_SUBJECT_LEN + 1]; /* by first appearance */
    int n_subjects;
    char *chat_template, *system_prompt; /* bt_choices_set_chat; NULL: contexts as written */
    int64_t fewshot_k;                   /* bt_choices_set_fewshot; 0: none */
    char *fewshot_separator;
    const bt_choice_set *fewshot_pool; /* the exemplars' set: this one or a fewshot_source */
    uint64_t fewshot_seed;
};

void bt_choices_free(bt_choice_set **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_choice_set *self = *self_p;
    for (size_t i = 0; i < self->n; i++) {
        free(self->items[i].context);
        for (int j = 0; j < self->items[i].n; j++)
            free(self->items[i].choices[j]);
    }
    free(self->items);
    free(self->chat_template);
    free(self->system_prompt);
    free(self->fewshot_separator);
    free(self);
    *self_p = NULL;
}

size_t bt_choices_count(const bt_choice_set *self) {
    return self->n;
}

int bt_choices_subjects(const bt_choice_set *self) {
    return self->n_subjects;
}

const char *bt_choices_subject_name(const bt_choice_set *self, int s) {
    BT_ASSERT(s >= 0 && s < self->n_subjects);
    return self->subjects[s];
}

/*  The answer member: an index below n, or a letter "A".. naming one. */
static bool s_answer(const cJSON *a, int n, int *out) {
    if (cJSON_IsNumber(a) && a->valuedouble == floor(a->valuedouble) && a->valuedouble >= 0 &&
        a->valuedouble < n) {
        *out = (int)a->valuedouble;
        return true;
    }
    const char *s = cJSON_GetStringValue(a);
    if (s && strlen(s) == 1 && s[0] >= 'A' && s[0] < 'A' + n) {
        *out = s[0] - 'A';
        return true;
    }
    return false;
}

/*  One line into *it; NULL, or what the line lacks. */
static const char *s_parse(const cJSON *root, s_item *it) {
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "context");
    ctx = ctx ? ctx : cJSON_GetObjectItemCaseSensitive(root, "question");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "choices");
    if (!cJSON_IsString(ctx))
        return "expected a string \"context\" (or \"question\")";
    int n = cJSON_GetArraySize(list);
    if (!cJSON_IsArray(list) || n < 2 || n > BT_CHOICES_MAX)
        return "expected \"choices\": an array of 2 to 26 non-empty strings";
    if (!s_answer(cJSON_GetObjectItemCaseSensitive(root, "answer"), n, &it->answer))
        return "expected \"answer\": the index of a choice, or its letter (\"A\" for the first)";
    it->subject = -1;
    if (!(it->context = strdup(ctx->valuestring)))
        return "out of memory";
    for (const cJSON *c = list->child; c; c = c->next) {
        const char *text = cJSON_GetStringValue(c);
        if (!text || !text[0])
            return "expected \"choices\": an array of 2 to 26 non-empty strings";
        if (!(it->choices[it->n++] = strdup(text)))
            return "out of memory";
    }
    return NULL;
}

/*  True when name can be part of a metric name: 1 to BT_CHOICES_SUBJECT_LEN letters, digits, '_'
    and '-' (no '.', which separates the parts, nor bytes a JSON key or chart would escape). */
static bool s_subject_ok(const char *name) {
    size_t len = strlen(name);
    if (len == 0 || len > BT_CHOICES_SUBJECT_LEN)
        return false;
    for (size_t k = 0; k < len; k++)
        if (!isalnum((unsigned char)name[k]) && name[k] != '_' && name[k] != '-')
            return false;
    return true;
}

/*  The line's "subject" (absent or null: none) into it->subject, numbering a new name next. */
static bt_status s_subject(bt_choice_set *self, const cJSON *root, s_item *it, const char *path,
                           size_t line_no) {
    const cJSON *subject = cJSON_GetObjectItemCaseSensitive(root, "subject");
    if (!subject || cJSON_IsNull(subject))
        return BT_OK;
    const char *name = cJSON_GetStringValue(subject);
    if (!name || !s_subject_ok(name)) {
        char shown[BT_CHOICES_SUBJECT_LEN + 8] = "not a string";
        if (name) { /* printable, for the message */
            size_t k = 0;
            for (; name[k] && k < sizeof shown - 1; k++)
                shown[k] = isprint((unsigned char)name[k]) ? name[k] : '?';
            shown[k] = '\0';
        }
        return bt_fail(BT_EFORMAT,
                       "%s:%zu: \"subject\": expected 1 to %d letters, digits, '_' or '-' (it "
                       "names the metrics subject.NAME.acc), got %s%s%s",
                       path, line_no, BT_CHOICES_SUBJECT_LEN, name ? "\"" : "", shown,
                       name ? "\"" : "");
    }
    for (int s = 0; s < self->n_subjects; s++)
        if (!strcmp(self->subjects[s], name)) {
            it->subject = s;
            return BT_OK;
        }
    if (self->n_subjects == BT_CHOICES_SUBJECTS)
        return bt_fail(BT_EFORMAT,
                       "%s:%zu: \"subject\": \"%s\" is one subject too many: a choices file may "
                       "name at most %d (the per-subject breakdown's sums are of fixed size)",
                       path, line_no, name, BT_CHOICES_SUBJECTS);
    snprintf(self->subjects[self->n_subjects], sizeof self->subjects[0], "%s", name);
    it->subject = self->n_subjects++;
    return BT_OK;
}

bt_status bt_choices_load(const char *path, bt_choice_set **out) {
    *out = NULL;
    char *data = NULL;
    BT_TRY(bt_file_read(path, (size_t)1 << 30, &data, NULL));
    bt_choice_set *self = calloc(1, sizeof *self);
    size_t cap = 0, line_no = 0;
    bt_status st = self ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", path);
    for (char *line = data; st == BT_OK && line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        line_no++;
        if (line[strspn(line, " \t\r")] != '\0') {
            if (self->n == cap) {
                cap = cap ? 2 * cap : 64;
                s_item *grown = realloc(self->items, cap * sizeof *grown);
                st = grown ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", path);
                self->items = grown ? grown : self->items;
            }
            cJSON *root = st == BT_OK ? cJSON_Parse(line) : NULL;
            s_item *it = st == BT_OK ? &self->items[self->n++] : NULL;
            if (it)
                memset(it, 0, sizeof *it);
            const char *why = !it                    ? NULL
                              : cJSON_IsObject(root) ? s_parse(root, it)
                                                     : "not a JSON object";
            if (why)
                st = bt_fail(BT_EFORMAT, "%s:%zu: %s", path, line_no, why);
            else if (it)
                st = s_subject(self, root, it, path, line_no);
            cJSON_Delete(root);
        }
        line = next;
    }
    free(data);
    if (st == BT_OK && self->n == 0)
        st = bt_fail(BT_EFORMAT, "%s: no items", path);
    if (st != BT_OK)
        bt_choices_free(&self);
    *out = self;
    return st;
}

void bt_choices_order(uint64_t seed, size_t i, int n, int *order) {
    uint64_t state = bt_rng_key(bt_rng_key(seed, S_TAG_SHUFFLE), i);
    for (int k = 0; k < n; k++)
        order[k] = k;
    for (int k = n - 1; k > 0; k--) { /* Fisher-Yates */
        int r = (int)(bt_rng_next(&state) % (uint64_t)(k + 1)), t = order[k];
        order[k] = order[r];
        order[r] = t;
    }
}

bt_status bt_choices_set_chat(bt_choice_set *self, const char *tmpl, const char *system) {
    free(self->chat_template);
    free(self->system_prompt);
    self->chat_template = self->system_prompt = NULL;
    if (!tmpl || !tmpl[0])
        return BT_OK;
    self->chat_template = strdup(tmpl);
    self->system_prompt = strdup(system ? system : "");
    if (!self->chat_template || !self->system_prompt)
        return bt_fail(BT_ENOMEM, "choices: out of memory");
    return BT_OK;
}

bt_status bt_choices_set_fewshot(bt_choice_set *self, const bt_choices_fewshot *f) {
    const bt_choice_set *pool = f->pool ? f->pool : self;
    BT_TRY(bt_source_fewshot_check(f->k, pool->n, pool == self));
    char *separator = strdup(f->separator ? f->separator : "\n\n");
    if (!separator)
        return bt_fail(BT_ENOMEM, "choices: out of memory");
    free(self->fewshot_separator);
    self->fewshot_separator = separator;
    self->fewshot_k = f->k;
    self->fewshot_pool = pool;
    self->fewshot_seed = f->seed;
    return BT_OK;
}

int64_t bt_choices_exemplars(const bt_choice_set *self, size_t i, size_t *picked) {
    const bt_choice_set *pool = self->fewshot_pool;
    if (self->fewshot_k > 0)
        bt_source_fewshot_pick(self->fewshot_seed, i, pool->n, pool == self, self->fewshot_k,
                               picked);
    return self->fewshot_k;
}

/*  Item it's own context into b: as written, and with letters its choices (in order; NULL: as
    written) as "A. text" lines and "Answer:", lm-evaluation-harness's MMLU doc_to_text. */
static bool s_context(const s_item *it, bool letters, const int *order, bt_buf *b) {
    bool ok = bt_buf_puts(b, it->context);
    for (int k = 0; letters && k < it->n; k++)
        ok = ok && bt_buf_printf(b, "\n%c. %s", 'A' + k, it->choices[order ? order[k] : k]);
    return ok && (!letters || bt_buf_puts(b, "\nAnswer:"));
}

/*  The context item i is scored after, into ctx: its exemplars (each context, delimiter, right
    choice or its letter, separator), its own context, the whole in the chat template when the set
    has one. */
static bt_status s_prompt(const bt_choice_set *self, size_t i, const bt_choices_options *o,
                          const int *order, bt_buf *ctx) {
    size_t picked[BT_SOURCE_FEWSHOT_MAX];
    int64_t k = bt_choices_exemplars(self, i, picked);
    bt_buf b = {0};
    bool ok = true;
    for (int64_t q = 0; q < k && ok; q++) {
        const s_item *ex = &self->fewshot_pool->items[picked[q]];
        ok = s_context(ex, o->letters, NULL, &b) && bt_buf_puts(&b, o->delimiter) &&
             (o->letters ? bt_buf_printf(&b, "%c", 'A' + ex->answer)
                         : bt_buf_puts(&b, ex->choices[ex->answer])) &&
             bt_buf_puts(&b, self->fewshot_separator);
    }
    ok = ok && s_context(&self->items[i], o->letters, order, &b);
    bt_status st = ok ? BT_OK : bt_fail(BT_ENOMEM, "choices: out of memory");
    if (st != BT_OK || !self->chat_template) {
        *ctx = b;
        return st;
    }
    char *text = NULL;
    st = bt_chat_apply(self->chat_template, self->system_prompt, b.data ? b.data : "", &text);
    bt_buf_release(&b);
    if (st == BT_OK && !bt_buf_puts(ctx, text))
        st = bt_fail(BT_ENOMEM, "choices: out of memory");
    free(text);
    return st;
}

bt_status bt_choices_loglik(const bt_choice_set *self, size_t i, bt_model *model,
                            const bt_tokenizer_t *tok, const bt_choices_options *o,
                            const int *order, double *ll, int *n, int *answer, int64_t *scored) {
    const s_item *it = &self->items[i];
    bt_buf ctx = {0}, cont[BT_CHOICES_MAX] = {{0}};
    bt_nll_item items[BT_CHOICES_MAX];
    /* under a chat template the generation prompt ends the context: no delimiter (the harness) */
    const char *delimiter = self->chat_template ? "" : o->delimiter;
    bt_status st = s_prompt(self, i, o, order, &ctx);
    for (int k = 0; k < it->n && st == BT_OK; k++) {
        const char *text =
            o->letters ? (char[2]){(char)('A' + k), 0} : it->choices[order ? order[k] : k];
        if (!bt_buf_puts(&cont[k], delimiter) || !bt_buf_puts(&cont[k], text))
            st = bt_fail(BT_ENOMEM, "choices: out of memory");
    }
    for (int k = 0; k < it->n; k++)
        items[k] = (bt_nll_item){.context = ctx.data ? ctx.data : "", .continuation = cont[k].data};
    double nll[BT_CHOICES_MAX] = {0};
    int64_t tokens[BT_CHOICES_MAX] = {0};
    if (st == BT_OK)
        st = bt_evaluator_nll(model, tok, items, it->n, nll, tokens);
    *answer = it->answer;
    for (int k = 0; k < it->n; k++) {
        ll[k] = -nll[k];
        if (scored && st == BT_OK)
            *scored += tokens[k];
        if (order && order[k] == it->answer)
            *answer = k;
        bt_buf_release(&cont[k]);
    }
    bt_buf_release(&ctx);
    *n = it->n;
    return st;
}

/*  Characters (UTF-8 code points) of s: lm-evaluation-harness's len() of the choice string. */
static size_t s_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/*  Index of the largest of x[0, n) (the first of equals). */
static int s_argmax(const double *x, int n) {
    int best = 0;
    for (int j = 1; j < n; j++)
        best = x[j] > x[best] ? j : best;
    return best;
}

/*  The length of the k-th continuation's choice in characters: the letter's under letters. */
static size_t s_choice_chars(const s_item *it, const bt_choices_options *o, int k) {
    return o->letters ? 1 : s_chars(it->choices[k]);
}

bt_status bt_choices_run(const bt_choice_set *self, bt_model *model, const bt_tokenizer_t *tok,
                         const bt_choices_options *o, size_t start, size_t count,
                         bt_evaluator_sums *out) {
    if (start > self->n || count > self->n - start)
        return bt_fail(BT_EINVAL, "choices: items [%zu, %zu) exceed the %zu of the set", start,
                       start + count, self->n);
    double t0 = bt_now();
    for (size_t i = start; i < start + count; i++) {
        const s_item *it = &self->items[i];
        double ll[BT_CHOICES_MAX], norm[BT_CHOICES_MAX], p[BT_CHOICES_MAX], sum = 0;
        int n = 0, answer = 0, order[BT_CHOICES_MAX];
        BT_TRY(bt_choices_loglik(self, i, model, tok, o, NULL, ll, &n, &answer, &out->nll_tokens));
        for (int j = 0; j < n; j++)
            norm[j] = ll[j] / (double)s_choice_chars(it, o, j);
        int pred = s_argmax(ll, n), pred_norm = s_argmax(norm, n);
        for (int j = 0; j < n; j++) /* the softmax over the choices' log-likelihoods */
            sum += p[j] = exp(ll[j] - ll[pred]);
        double right = p[answer] / sum, top = 1.0 / sum; /* p[pred] == 1 */
        int bin = top >= 1.0 ? BT_CHOICES_BINS - 1 : (int)(top * BT_CHOICES_BINS);
        out->mc_items++;
        out->mc_correct += pred == answer;
        out->mc_correct_norm += pred_norm == answer;
        out->mc_p_right_fx += (int64_t)llround(right * BT_CHOICES_FIXED);
        out->mc_bin_n[bin]++;
        out->mc_bin_conf_fx[bin] += (int64_t)llround(top * BT_CHOICES_FIXED);
        out->mc_bin_correct[bin] += pred == answer;
        if (it->subject >= 0) {
            out->mc_subject_n[it->subject]++;
            out->mc_subject_correct[it->subject] += pred == answer;
            out->mc_subject_correct_norm[it->subject] += pred_norm == answer;
        }
        if (!o->shuffle)
            continue;
        bt_choices_order(o->seed, i, n, order);
        BT_TRY(bt_choices_loglik(self, i, model, tok, o, order, ll, &n, &answer, &out->nll_tokens));
        out->mc_shuffled++;
        out->mc_shuffled_correct += s_argmax(ll, n) == answer;
    }
    out->compute_s += bt_now() - t0;
    out->peak_rss_mb = bt_evaluator_peak_rss_mb();
    return BT_OK;
}
