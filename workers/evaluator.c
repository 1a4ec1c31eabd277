/*  evaluator.c — held-out evaluation in batches, as sums. */
#include "baton/evaluator.h"
#include "baton/sample.h"

#include <stdlib.h>
#include <string.h>

void bt_evaluator_config_init(bt_evaluator_config *cfg) {
    cfg->start = 0;
    cfg->count = 200;
    cfg->samples = 1;
    cfg->temperature = 0.0;
    cfg->top_k = 0;
    cfg->top_p = 1.0;
    cfg->max_new_tokens = 8;
    cfg->batch = 256;
}

void bt_evaluator_sums_init(bt_evaluator_sums *s, int64_t samples) {
    memset(s, 0, sizeof *s);
    s->samples = samples;
}

bt_status bt_evaluator_sums_add(bt_evaluator_sums *total, const bt_evaluator_sums *part) {
    if (total->samples != part->samples)
        return bt_fail(BT_EINVAL, "evaluator: cannot add sums of %lld and %lld samples",
                       (long long)total->samples, (long long)part->samples);
    total->examples += part->examples;
    total->completions += part->completions;
    total->correct += part->correct;
    total->reward_sum += part->reward_sum;
    total->length_sum += part->length_sum;
    total->truncated += part->truncated;
    for (int c = 0; c <= BT_EVALUATOR_MAX_SAMPLES; c++)
        total->correct_hist[c] += part->correct_hist[c];
    return BT_OK;
}

static bt_status s_check_config(const bt_evaluator_config *cfg, const bt_task_t *task) {
    size_t held = bt_task_heldout_count(task);
    if (cfg->start > held || cfg->count > held - cfg->start)
        return bt_fail(BT_EINVAL, "evaluator: examples [%zu, %zu) exceed the %zu held-out ones",
                       cfg->start, cfg->start + cfg->count, held);
    if (cfg->samples < 1 || cfg->samples > BT_EVALUATOR_MAX_SAMPLES)
        return bt_fail(BT_EINVAL, "evaluator: samples must be in [1, %d], got %lld",
                       BT_EVALUATOR_MAX_SAMPLES, (long long)cfg->samples);
    if (cfg->samples > 1 && !(cfg->temperature > 0))
        return bt_fail(BT_EINVAL, "evaluator: %lld samples need a temperature > 0",
                       (long long)cfg->samples);
    if (cfg->batch < cfg->samples || cfg->max_new_tokens < 1)
        return bt_fail(BT_EINVAL, "evaluator: need batch >= samples (%lld) and max_new_tokens >= 1, "
                                  "got %lld and %lld",
                       (long long)cfg->samples, (long long)cfg->batch,
                       (long long)cfg->max_new_tokens);
    return BT_OK;
}

/*  Scratch for one chunk of examples. */
typedef struct s_chunk {
    int64_t cap;      /* examples */
    int32_t **ids;    /* (cap) encoded prompts, one buffer each */
    int64_t *lens;    /* (cap) */
    char **answers;   /* (cap) */
    char **prompts;   /* (cap) prompt texts, for a host's reward function */
    const int32_t **rows; /* (cap * samples) prompt of each sequence */
    int64_t *row_lens;    /* (cap * samples) */
    char *text;           /* decoded completion */
} s_chunk;

/*  Generates and scores examples [first, first + n) of the held-out set into out. */
static bt_status s_run_chunk(bt_model *model, const bt_tokenizer_t *tok, const bt_task_t *task,
                             const bt_evaluator_config *cfg, bt_gen *gen, size_t first, int64_t n,
                             s_chunk *c, bt_evaluator_sums *out) {
    const int64_t k = cfg->samples, M = cfg->max_new_tokens;
    bt_status st = BT_OK;
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        bt_task_example ex;
        bt_task_heldout_example(task, first + (size_t)i, &ex);
        size_t len = strlen(ex.prompt), n_ids = 0;
        free(c->ids[i]);
        free(c->answers[i]);
        free(c->prompts[i]);
        c->ids[i] = malloc((len + 1) * sizeof *c->ids[i]);
        c->answers[i] = malloc(strlen(ex.answer) + 1);
        c->prompts[i] = malloc(len + 1);
        if (!c->ids[i] || !c->answers[i] || !c->prompts[i])
            return bt_fail(BT_ENOMEM, "evaluator: out of memory");
        strcpy(c->answers[i], ex.answer);
        strcpy(c->prompts[i], ex.prompt);
        st = bt_tokenizer_encode(tok, ex.prompt, len, true, c->ids[i], len + 1, &n_ids);
        c->lens[i] = (int64_t)n_ids;
        for (int64_t j = 0; j < k; j++) {
            c->rows[i * k + j] = c->ids[i];
            c->row_lens[i * k + j] = c->lens[i];
        }
    }
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = M;
    sc.temperature = cfg->temperature;
    sc.top_k = cfg->top_k;
    sc.top_p = cfg->top_p;
    bt_generation g;
    bt_generation_init(&g);
    if (st == BT_OK)
        st = bt_generate(model, (const int32_t *const *)c->rows, c->row_lens, n * k, &sc, gen, &g);
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        int64_t n_correct = 0;
        for (int64_t j = 0; j < k && st == BT_OK; j++) {
            int64_t r = i * k + j;
            size_t len = 0;
            st = bt_tokenizer_decode(tok, g.tokens + r * M, (size_t)g.lengths[r], c->text,
                                     (size_t)M + 1, &len);
            if (st != BT_OK)
                break;
            bt_reward_detail d;
            out->reward_sum += bt_task_score(task, c->prompts[i], c->answers[i], c->text, len, &d);
            out->length_sum += (double)g.lengths[r];
            out->truncated += g.finish[r] == BT_FINISH_LENGTH;
            n_correct += d.correct;
            if (j == 0)
                out->correct += d.correct;
        }
        out->correct_hist[n_correct]++;
        out->examples++;
        out->completions += k;
    }
    bt_generation_release(&g);
    return st;
}

bt_status bt_evaluator_run(bt_model *model, const bt_tokenizer_t *tok, const bt_task_t *task,
                           const bt_evaluator_config *cfg, bt_gen *gen, bt_evaluator_sums *out) {
    BT_ASSERT(model && tok && task && cfg && out);
    bt_evaluator_sums_init(out, cfg->samples);
    bt_status st = s_check_config(cfg, task);
    if (st != BT_OK || cfg->count == 0)
        return st;
    const int64_t k = cfg->samples;
    int64_t per_chunk = cfg->batch / k; /* examples per bt_generate call */
    if (per_chunk > (int64_t)cfg->count)
        per_chunk = (int64_t)cfg->count;
    s_chunk c = {.cap = per_chunk};
    c.ids = calloc((size_t)per_chunk, sizeof *c.ids);
    c.lens = calloc((size_t)per_chunk, sizeof *c.lens);
    c.answers = calloc((size_t)per_chunk, sizeof *c.answers);
    c.prompts = calloc((size_t)per_chunk, sizeof *c.prompts);
    c.rows = calloc((size_t)(per_chunk * k), sizeof *c.rows);
    c.row_lens = calloc((size_t)(per_chunk * k), sizeof *c.row_lens);
    c.text = malloc((size_t)cfg->max_new_tokens + 1);
    if (!c.ids || !c.lens || !c.answers || !c.prompts || !c.rows || !c.row_lens || !c.text)
        st = bt_fail(BT_ENOMEM, "evaluator: out of memory");
    for (size_t first = cfg->start; first < cfg->start + cfg->count && st == BT_OK;
         first += (size_t)per_chunk) {
        size_t left = cfg->start + cfg->count - first;
        int64_t n = left < (size_t)per_chunk ? (int64_t)left : per_chunk;
        st = s_run_chunk(model, tok, task, cfg, gen, first, n, &c, out);
    }
    for (int64_t i = 0; i < per_chunk; i++) {
        if (c.ids)
            free(c.ids[i]);
        if (c.answers)
            free(c.answers[i]);
        if (c.prompts)
            free(c.prompts[i]);
    }
    free(c.ids);
    free(c.lens);
    free(c.answers);
    free(c.prompts);
    free(c.rows);
    free(c.row_lens);
    free(c.text);
    if (st != BT_OK)
        bt_evaluator_sums_init(out, cfg->samples);
    return st;
}
