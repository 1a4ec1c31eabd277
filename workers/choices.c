/*  choices.c — multiple choice by log-likelihood; see choices.h. */
#define _POSIX_C_SOURCE 200809L
#include "baton/choices.h"

#include "baton/evaluator.h"
#include "baton/fileio.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_item {
    char *context;
    char *choices[BT_CHOICES_MAX];
    int n, answer;
} s_item;

struct bt_choice_set {
    s_item *items;
    size_t n;
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
    free(self);
    *self_p = NULL;
}

size_t bt_choices_count(const bt_choice_set *self) {
    return self->n;
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

bt_status bt_choices_loglik(const bt_choice_set *self, size_t i, bt_model *model,
                            const bt_tokenizer_t *tok, const char *delimiter, double *ll, int *n,
                            int *answer, int64_t *scored) {
    const s_item *it = &self->items[i];
    bt_nll_item items[BT_CHOICES_MAX];
    char *cont[BT_CHOICES_MAX] = {0};
    bt_status st = BT_OK;
    for (int j = 0; j < it->n && st == BT_OK; j++) {
        size_t a = strlen(delimiter), b = strlen(it->choices[j]);
        cont[j] = malloc(a + b + 1);
        if (!cont[j]) {
            st = bt_fail(BT_ENOMEM, "choices: out of memory");
            break;
        }
        memcpy(cont[j], delimiter, a);
        memcpy(cont[j] + a, it->choices[j], b + 1);
        items[j] = (bt_nll_item){.context = it->context, .continuation = cont[j]};
    }
    double nll[BT_CHOICES_MAX] = {0};
    int64_t tokens[BT_CHOICES_MAX] = {0};
    if (st == BT_OK)
        st = bt_evaluator_nll(model, tok, items, it->n, nll, tokens);
    for (int j = 0; j < it->n; j++) {
        ll[j] = -nll[j];
        if (scored && st == BT_OK)
            *scored += tokens[j];
        free(cont[j]);
    }
    *n = it->n;
    *answer = it->answer;
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

bt_status bt_choices_run(const bt_choice_set *self, bt_model *model, const bt_tokenizer_t *tok,
                         const char *delimiter, size_t start, size_t count,
                         bt_evaluator_sums *out) {
    if (start > self->n || count > self->n - start)
        return bt_fail(BT_EINVAL, "choices: items [%zu, %zu) exceed the %zu of the set", start,
                       start + count, self->n);
    double t0 = bt_now();
    for (size_t i = start; i < start + count; i++) {
        double ll[BT_CHOICES_MAX], norm[BT_CHOICES_MAX], p[BT_CHOICES_MAX], sum = 0;
        int n = 0, answer = 0;
        BT_TRY(bt_choices_loglik(self, i, model, tok, delimiter, ll, &n, &answer,
                                 &out->nll_tokens)); /* scored tokens: tokens_per_s */
        for (int j = 0; j < n; j++)
            norm[j] = ll[j] / (double)s_chars(self->items[i].choices[j]);
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
    }
    out->compute_s += bt_now() - t0;
    out->peak_rss_mb = bt_evaluator_peak_rss_mb();
    return BT_OK;
}
