/*  spec.c — TASK and RESULT of each job kind, with their field rules; see spec.h. */
#include "baton/spec.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_INT_MAX BT_WIRE_INT_MAX

/* ---- field helpers -------------------------------------------------------------------------- */

/*  The setters' range checks: a field the sender writes out of its range is a programmer's or a
    config's error, refused before it travels. */
static bt_status s_put_int(bt_msg_t *m, const char *key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        return bt_fail(BT_EINVAL, "TASK: field '%s': %lld is outside [%lld, %lld]", key,
                       (long long)v, (long long)lo, (long long)hi);
    return bt_msg_set_int(m, key, v);
}

static bt_status s_put_num(bt_msg_t *m, const char *key, double v, double lo, double hi) {
    if (!(v >= lo && v <= hi))
        return bt_fail(BT_EINVAL, "TASK: field '%s': %.17g is outside [%.17g, %.17g]", key, v, lo,
                       hi);
    return bt_msg_set_double(m, key, v);
}

/*  An optional version: absent reads as -1. */
static bt_status s_get_expect(const bt_msg_t *m, int64_t *out) {
    *out = -1;
    return bt_msg_has(m, "expect_version") ? bt_msg_get_int(m, "expect_version", 0, S_INT_MAX, out)
                                           : BT_OK;
}

static bt_status s_put_expect(bt_msg_t *m, int64_t expect) {
    return expect >= 0 ? s_put_int(m, "expect_version", expect, 0, S_INT_MAX) : BT_OK;
}

/* ---- the hyperparameters -------------------------------------------------------------------- */

static bt_status s_hyper_put(const bt_hyper *h, bt_msg_t *m) {
    BT_TRY(s_put_num(m, "hyper.lr", h->lr, 0, BT_CONFIG_LR_MAX));
    BT_TRY(s_put_num(m, "hyper.kl_coef", h->kl_coef, 0, BT_CONFIG_KL_MAX));
    BT_TRY(s_put_num(m, "hyper.temperature", h->temperature, 0, BT_CONFIG_TEMPERATURE_MAX));
    return s_put_num(m, "hyper.clip_high", h->clip_high, 0, BT_CONFIG_CLIP_MAX);
}

static bt_status s_hyper_get(const bt_msg_t *m, bt_hyper *h) {
    BT_TRY(bt_msg_get_double(m, "hyper.lr", 0, BT_CONFIG_LR_MAX, &h->lr));
    BT_TRY(bt_msg_get_double(m, "hyper.kl_coef", 0, BT_CONFIG_KL_MAX, &h->kl_coef));
    BT_TRY(
        bt_msg_get_double(m, "hyper.temperature", 0, BT_CONFIG_TEMPERATURE_MAX, &h->temperature));
    return bt_msg_get_double(m, "hyper.clip_high", 0, BT_CONFIG_CLIP_MAX, &h->clip_high);
}

/* ---- TASK: each kind's fields --------------------------------------------------------------- */

static bt_status s_rollout_put(const bt_spec_rollout *r, bt_msg_t *m) {
    int64_t shape[1] = {r->n_prompts};
    BT_TRY(s_put_int(m, "seed", r->seed, 0, S_INT_MAX));
    return bt_msg_add_tensor(m, "prompts", BT_I64, 1, shape, r->prompts);
}

static bt_status s_rollout_get(const bt_msg_t *m, bt_spec_rollout *r) {
    bt_msg_tensor prompts;
    BT_TRY(bt_msg_get_int(m, "seed", 0, S_INT_MAX, &r->seed));
    BT_TRY(bt_msg_get_tensor(m, "prompts", BT_I64, 1, &prompts));
    uint64_t *ids = malloc(prompts.nbytes + sizeof *ids); /* the frame is not aligned: copied */
    if (!ids)
        return bt_fail(BT_ENOMEM, "TASK: out of memory");
    memcpy(ids, prompts.data, prompts.nbytes);
    r->prompts = ids;
    r->n_prompts = prompts.shape[0];
    return BT_OK;
}

/*  Advantages per completion (n), or per turn (n, BT_MAX_TURNS) of a batch with turn rewards. */
static int s_adv_dims(const bt_rollout_batch *b) {
    return b->has_turn_rewards ? 2 : 1;
}

static bt_status s_train_put(const bt_spec_train *t, bt_msg_t *m) {
    int64_t shape[2] = {t->batch->n, BT_MAX_TURNS};
    BT_TRY(bt_msg_set_bool(m, "publish", t->publish));
    BT_TRY(s_put_expect(m, t->expect_version));
    BT_TRY(bt_batch_to_msg(t->batch, m));
    BT_TRY(bt_msg_add_tensor(m, "adv", BT_F64, s_adv_dims(t->batch), shape, t->adv));
    BT_TRY(bt_msg_set_bool(m, "freeze_reference", t->freeze_reference));
    return bt_msg_set_bool(m, "inject_nan", t->inject_nan);
}

static bt_status s_train_get(const bt_msg_t *m, bt_spec_train *t) {
    bt_msg_tensor adv;
    BT_TRY(bt_msg_get_bool(m, "publish", &t->publish));
    BT_TRY(s_get_expect(m, &t->expect_version));
    BT_TRY(bt_msg_get_bool(m, "freeze_reference", &t->freeze_reference));
    BT_TRY(bt_msg_get_bool(m, "inject_nan", &t->inject_nan));
    bt_rollout_batch *b = malloc(sizeof *b);
    if (!b)
        return bt_fail(BT_ENOMEM, "TASK: out of memory");
    bt_rollout_batch_init(b);
    t->batch = b;
    BT_TRY(bt_batch_from_msg(m, b));
    BT_TRY(bt_msg_get_tensor(m, "adv", BT_F64, s_adv_dims(b), &adv));
    if (adv.shape[0] != b->n || (adv.ndim == 2 && adv.shape[1] != BT_MAX_TURNS))
        return bt_fail(BT_EFORMAT,
                       "TASK: tensor 'adv': %lld rows for %lld completions (and %d columns per "
                       "turn with turn rewards)",
                       (long long)adv.shape[0], (long long)b->n, BT_MAX_TURNS);
    double *a = malloc(adv.nbytes + sizeof *a);
    if (!a)
        return bt_fail(BT_ENOMEM, "TASK: out of memory");
    memcpy(a, adv.data, adv.nbytes);
    t->adv = a;
    return BT_OK;
}

static bt_status s_sft_put(const bt_spec_sft *s, bt_msg_t *m) {
    BT_TRY(bt_msg_set_bool(m, "publish", s->publish));
    BT_TRY(s_put_expect(m, s->expect_version));
    BT_TRY(s_put_int(m, "start", s->start, 0, S_INT_MAX));
    return s_put_int(m, "count", s->count, 1, BT_CONFIG_TOKENS_MAX);
}

static bt_status s_sft_get(const bt_msg_t *m, bt_spec_sft *s) {
    BT_TRY(bt_msg_get_bool(m, "publish", &s->publish));
    BT_TRY(s_get_expect(m, &s->expect_version));
    BT_TRY(bt_msg_get_int(m, "start", 0, S_INT_MAX, &s->start));
    return bt_msg_get_int(m, "count", 1, BT_CONFIG_TOKENS_MAX, &s->count);
}

static bt_status s_eval_put(const bt_spec_eval *e, bt_msg_t *m) {
    BT_TRY(s_put_int(m, "dataset", e->dataset, 0, BT_EVAL_MAX_DATASETS - 1));
    BT_TRY(s_put_int(m, "start", e->start, 0, S_INT_MAX));
    BT_TRY(s_put_int(m, "count", e->count, 0, S_INT_MAX));
    BT_TRY(s_put_int(m, "seed", e->seed, 0, S_INT_MAX));
    return bt_msg_set_bool(m, "robustness", e->robustness);
}

static bt_status s_eval_get(const bt_msg_t *m, int n_datasets, bt_spec_eval *e) {
    BT_TRY(bt_msg_get_int(m, "dataset", 0, n_datasets - 1, &e->dataset));
    BT_TRY(bt_msg_get_int(m, "start", 0, S_INT_MAX, &e->start));
    BT_TRY(bt_msg_get_int(m, "count", 0, S_INT_MAX, &e->count));
    BT_TRY(bt_msg_get_int(m, "seed", 0, S_INT_MAX, &e->seed));
    return bt_msg_get_bool(m, "robustness", &e->robustness);
}

static bt_status s_restore_put(const bt_spec_restore *r, bt_msg_t *m) {
    if (r->initial)
        return bt_msg_set_bool(m, "initial", true);
    BT_TRY(s_put_int(m, "adam_steps", r->adam_steps, 0, S_INT_MAX));
    BT_TRY(s_put_int(m, "restore_version", r->restore_version, 0, S_INT_MAX));
    for (int i = 0; r->state && i < bt_msg_tensor_count(r->state); i++)
        BT_TRY(bt_msg_add_tensor_shared(m, r->state, i));
    return BT_OK;
}

static bt_status s_restore_get(const bt_msg_t *m, bt_spec_restore *r) {
    r->initial = false;
    r->state = NULL;
    if (bt_msg_has(m, "initial"))
        BT_TRY(bt_msg_get_bool(m, "initial", &r->initial));
    if (r->initial)
        return BT_OK;
    BT_TRY(bt_msg_get_int(m, "restore_version", 0, S_INT_MAX, &r->restore_version));
    return bt_msg_get_int(m, "adam_steps", 0, S_INT_MAX, &r->adam_steps);
}

static bt_status s_group_put(const bt_spec_group *g, bt_msg_t *m) {
    BT_TRY(s_put_int(m, "world", g->world, 1, 1 << 16));
    BT_TRY(s_put_int(m, "rank", g->rank, 0, g->world - 1));
    BT_TRY(s_put_int(m, "store_port", g->store_port, 1, 65535));
    return bt_msg_set_str(m, "prefix", g->prefix);
}

static bt_status s_group_get(const bt_msg_t *m, bt_spec_group *g) {
    const char *prefix;
    BT_TRY(bt_msg_get_int(m, "world", 1, 1 << 16, &g->world));
    BT_TRY(bt_msg_get_int(m, "rank", 0, g->world - 1, &g->rank));
    BT_TRY(bt_msg_get_int(m, "store_port", 1, 65535, &g->store_port));
    BT_TRY(bt_msg_get_str(m, "prefix", sizeof g->prefix - 1, &prefix));
    snprintf(g->prefix, sizeof g->prefix, "%s", prefix);
    return BT_OK;
}

/* ---- TASK ------------------------------------------------------------------------------------ */

bt_status bt_spec_task_to_msg(const bt_spec_task *t, bt_msg_t *m) {
    BT_TRY(s_put_int(m, "task", t->task, 0, S_INT_MAX));
    BT_TRY(s_put_int(m, "variant", t->variant, 0, BT_CONFIG_MAX_VARIANTS - 1));
    BT_TRY(bt_msg_set_str(m, "kind", bt_job_kind_name(t->kind)));
    BT_TRY(s_put_int(m, "version", t->version, 0, S_INT_MAX));
    BT_TRY(s_hyper_put(&t->hyper, m));
    switch (t->kind) {
    case BT_JOB_ROLLOUT: return s_rollout_put(&t->u.rollout, m);
    case BT_JOB_TRAIN: return s_train_put(&t->u.train, m);
    case BT_JOB_SFT: return s_sft_put(&t->u.sft, m);
    case BT_JOB_EVAL: return s_eval_put(&t->u.eval, m);
    case BT_JOB_RESTORE: return s_restore_put(&t->u.restore, m);
    case BT_JOB_SNAPSHOT: return s_put_expect(m, t->u.snapshot.expect_version);
    case BT_JOB_GROUP: return s_group_put(&t->u.group, m);
    case BT_JOB_KIND_COUNT: break;
    }
    return bt_fail(BT_EINVAL, "TASK: kind %d is not a job kind", (int)t->kind);
}

static bt_status s_task_get(const bt_msg_t *m, const bt_spec_limits *lim, bt_spec_task *t) {
    const char *kind;
    BT_TRY(bt_msg_get_int(m, "task", 0, S_INT_MAX, &t->task));
    BT_TRY(bt_msg_get_str(m, "kind", 16, &kind));
    if (!bt_job_kind_parse(kind, &t->kind))
        return bt_fail(BT_EFORMAT, "TASK: field 'kind': '%s' is not a job kind", kind);
    t->variant = 0;
    if (bt_msg_has(m, "variant"))
        BT_TRY(bt_msg_get_int(m, "variant", 0, lim->n_variants - 1, &t->variant));
    BT_TRY(bt_msg_get_int(m, "version", 0, S_INT_MAX, &t->version));
    BT_TRY(s_hyper_get(m, &t->hyper));
    switch (t->kind) {
    case BT_JOB_ROLLOUT: return s_rollout_get(m, &t->u.rollout);
    case BT_JOB_TRAIN: return s_train_get(m, &t->u.train);
    case BT_JOB_SFT: return s_sft_get(m, &t->u.sft);
    case BT_JOB_EVAL: return s_eval_get(m, lim->n_datasets[t->variant], &t->u.eval);
    case BT_JOB_RESTORE: return s_restore_get(m, &t->u.restore);
    case BT_JOB_SNAPSHOT: return s_get_expect(m, &t->u.snapshot.expect_version);
    case BT_JOB_GROUP: return s_group_get(m, &t->u.group);
    case BT_JOB_KIND_COUNT: break;
    }
    return BT_OK;
}

bt_status bt_spec_task_from_msg(const bt_msg_t *m, const bt_spec_limits *lim, bt_spec_task *out) {
    BT_ASSERT(lim->n_variants >= 1 && lim->n_variants <= BT_CONFIG_MAX_VARIANTS);
    memset(out, 0, sizeof *out);
    out->kind = BT_JOB_KIND_COUNT; /* nothing to release until the kind is known */
    bt_status st = s_task_get(m, lim, out);
    if (st != BT_OK)
        bt_spec_task_release(out);
    return st;
}

void bt_spec_task_release(bt_spec_task *t) {
    if (!t)
        return;
    if (t->kind == BT_JOB_ROLLOUT)
        free((void *)t->u.rollout.prompts);
    if (t->kind == BT_JOB_TRAIN) {
        bt_rollout_batch *b = (bt_rollout_batch *)t->u.train.batch;
        bt_rollout_batch_release(b);
        free(b);
        free((void *)t->u.train.adv);
    }
    memset(t, 0, sizeof *t);
    t->kind = BT_JOB_KIND_COUNT; /* released: nothing left to free */
}

/* ---- RESULT ---------------------------------------------------------------------------------- */

/*  The usage.* fields: each a double of bt_usage. */
static const struct {
    const char *key;
    size_t offset;
} s_usage[] = {{"usage.cpu_s", offsetof(bt_usage, cpu_s)},
               {"usage.weights_s", offsetof(bt_usage, weights_s)},
               {"usage.peak_rss_mb", offsetof(bt_usage, peak_rss_mb)},
               {"usage.cuda_allocated_mb", offsetof(bt_usage, cuda_allocated_mb)},
               {"usage.cuda_reserved_mb", offsetof(bt_usage, cuda_reserved_mb)}};
#define S_USAGE_N (sizeof s_usage / sizeof s_usage[0])

static double *s_usage_at(bt_usage *u, size_t i) {
    return (double *)((char *)u + s_usage[i].offset);
}

void bt_usage_init(bt_usage *u) {
    for (size_t i = 0; i < S_USAGE_N; i++)
        *s_usage_at(u, i) = NAN;
}

bt_status bt_usage_to_msg(const bt_usage *u, bt_msg_t *m) {
    bt_usage copy = *u;
    for (size_t i = 0; i < S_USAGE_N; i++)
        if (isfinite(*s_usage_at(&copy, i)))
            BT_TRY(bt_msg_set_double(m, s_usage[i].key, *s_usage_at(&copy, i)));
    return BT_OK;
}

bt_status bt_usage_from_msg(const bt_msg_t *m, bt_usage *out) {
    bt_usage_init(out);
    for (size_t i = 0; i < S_USAGE_N; i++)
        if (bt_msg_has(m, s_usage[i].key))
            BT_TRY(bt_msg_get_double(m, s_usage[i].key, 0, 1e12, s_usage_at(out, i)));
    return BT_OK;
}

static bool s_on_trainer(bt_job_kind kind) {
    return bt_job_kind_role(kind) == BT_ROLE_TRAINER;
}

void bt_spec_result_init(bt_spec_result *r, bt_job_kind kind) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->trainer_version = -1;
    bt_usage_init(&r->usage);
    bt_rollout_batch_init(&r->batch);
}

void bt_spec_result_release(bt_spec_result *r) {
    if (!r)
        return;
    bt_rollout_batch_release(&r->batch);
}

bt_status bt_spec_result_to_msg(const bt_spec_result *r, bt_msg_t *m) {
    switch (r->kind) {
    case BT_JOB_ROLLOUT: BT_TRY(bt_batch_to_msg(&r->batch, m)); break;
    case BT_JOB_TRAIN:
    case BT_JOB_SFT: BT_TRY(bt_trainer_stats_to_msg(&r->stats, m)); break;
    case BT_JOB_EVAL: BT_TRY(bt_sums_to_msg(&r->sums, m)); break;
    case BT_JOB_RESTORE:
    case BT_JOB_SNAPSHOT: BT_TRY(bt_msg_set_double(m, "canary_loss", r->canary_loss)); break;
    case BT_JOB_GROUP: break;
    case BT_JOB_KIND_COUNT: return bt_fail(BT_EINVAL, "RESULT: kind %d is not a job kind", r->kind);
    }
    if (s_on_trainer(r->kind) && r->trainer_version >= 0)
        BT_TRY(bt_msg_set_int(m, "trainer_version", r->trainer_version));
    BT_TRY(bt_msg_set_double(m, "compute_s", r->compute_s));
    BT_TRY(bt_usage_to_msg(&r->usage, m));
    return bt_msg_set_int(m, "task", r->task);
}

static bt_status s_result_get(const bt_msg_t *m, bt_spec_result *r) {
    BT_TRY(bt_msg_get_int(m, "task", 0, S_INT_MAX, &r->task));
    BT_TRY(bt_usage_from_msg(m, &r->usage));
    if (s_on_trainer(r->kind))
        BT_TRY(bt_msg_get_int(m, "trainer_version", 0, S_INT_MAX, &r->trainer_version));
    switch (r->kind) {
    case BT_JOB_ROLLOUT: return bt_batch_from_msg(m, &r->batch);
    case BT_JOB_TRAIN: return bt_trainer_stats_from_msg(m, &r->stats);
    case BT_JOB_SFT: return bt_msg_get_double(m, "stats.loss", -1e300, 1e300, &r->stats.loss);
    case BT_JOB_EVAL: return bt_sums_from_msg(m, &r->sums);
    case BT_JOB_RESTORE:
    case BT_JOB_SNAPSHOT: return bt_msg_get_double(m, "canary_loss", 0, 1e300, &r->canary_loss);
    case BT_JOB_GROUP: return BT_OK;
    case BT_JOB_KIND_COUNT: break;
    }
    return bt_fail(BT_EINVAL, "RESULT: kind %d is not a job kind", (int)r->kind);
}

bt_status bt_spec_result_from_msg(const bt_msg_t *m, bt_job_kind kind, bt_spec_result *out) {
    bt_spec_result_init(out, kind);
    bt_status st = s_result_get(m, out);
    if (st != BT_OK)
        bt_spec_result_release(out);
    return st;
}
