/*  runstate.c — state.json; see runstate.h.  cJSON stays in this file. */
#include "baton/runstate.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { S_I64, S_U64, S_F64, S_BOOL, S_I32 } s_kind;

/*  What a field can hold: integers and doubles within [lo, hi]; a double may be null (NaN: nothing
    known yet) only when nullable. */
typedef struct s_field {
    const char *name;
    s_kind kind;
    size_t offset;
    double lo, hi;
    bool nullable;
    bool optional; /* absent in a state.json from before it: left 0 */
} s_field;

#define S_WIRE 9007199254740992.0 /* 2^53: integers a double holds exactly */
#define S_ANY INFINITY            /* any finite double */
#define S_F(type, f, k, l, h, n)                                                                   \
    { #f, k, offsetof(type, f), l, h, n, false }
#define S_OPTIONAL(type, f, k, l, h)                                                               \
    { #f, k, offsetof(type, f), l, h, false, true }
/*  Counts and steps are >= 0; the tuner's values lie where the workers accept them (kl_coef in
    [0, 1e6], lr in [0, 1e3], temperature in [1e-3, 1e3]: the config's ranges). */
static const s_field s_state[] = {
    S_F(bt_runstate, step, S_I64, 0, S_WIRE, false),
    S_F(bt_runstate, version, S_I64, 0, S_WIRE, false),
    S_F(bt_runstate, cursor, S_U64, 0, S_WIRE, false),
    S_F(bt_runstate, train_seconds, S_F64, 0, S_ANY, false),
    S_F(bt_runstate, last_reward, S_F64, -S_ANY, S_ANY, true),
    S_F(bt_runstate, last_accuracy, S_F64, -S_ANY, S_ANY, true),
    S_F(bt_runstate, metrics_size, S_I64, 0, S_WIRE, false),
    S_F(bt_runstate, canary_loss, S_F64, 0, S_ANY, false),
    S_F(bt_runstate, nan_injected, S_BOOL, 0, 0, false),
    S_F(bt_runstate, loss_ema, S_F64, 0, S_ANY, true),
    S_F(bt_runstate, loss_n, S_I64, 0, S_WIRE, false),
    S_F(bt_runstate, tokens, S_F64, 0, S_ANY, false),
};
static const s_field s_trigger[] = {
    S_F(bt_trigger, interval, S_I64, 0, S_WIRE, false),
    S_F(bt_trigger, last_step, S_I64, 0, S_WIRE, false),
    S_F(bt_trigger, last_epoch, S_I64, 0, S_WIRE, false),
    S_F(bt_trigger, last_seconds, S_F64, 0, S_ANY, false),
    S_F(bt_trigger, pending, S_BOOL, 0, 0, false),
    S_F(bt_trigger, pending_reasons, S_I32, 0,
        BT_TRIGGER_STEPS | BT_TRIGGER_EPOCHS | BT_TRIGGER_SECONDS | BT_TRIGGER_TOKENS, false),
    S_F(bt_trigger, has_value, S_BOOL, 0, 0, false),
    S_F(bt_trigger, has_rate, S_BOOL, 0, 0, false),
    S_F(bt_trigger, last_value, S_F64, -S_ANY, S_ANY, true),
    S_F(bt_trigger, last_value_step, S_I64, 0, S_WIRE, false),
    S_F(bt_trigger, rate_ema, S_F64, -S_ANY, S_ANY, true),
    S_F(bt_trigger, fired, S_I64, 0, S_WIRE, false),
    S_F(bt_trigger, deferred, S_I64, 0, S_WIRE, false),
    S_OPTIONAL(bt_trigger, last_tokens, S_F64, 0, S_ANY),
};
static const s_field s_tuner[] = {
    S_F(bt_tuner, kl_coef, S_F64, 0, BT_CONFIG_KL_MAX, false),
    S_F(bt_tuner, lr, S_F64, 0, BT_CONFIG_LR_MAX, false),
    S_F(bt_tuner, temperature, S_F64, BT_CONFIG_TEMPERATURE_MIN, BT_CONFIG_TEMPERATURE_MAX, false),
    S_F(bt_tuner, has_best, S_BOOL, 0, 0, false),
    S_F(bt_tuner, best, S_F64, -S_ANY, S_ANY, true),
    S_F(bt_tuner, best_step, S_I64, 0, S_WIRE, false),
    S_F(bt_tuner, last_eval_step, S_I64, 0, S_WIRE, false),
    S_F(bt_tuner, bad_evals, S_I64, 0, S_WIRE, false),
    S_F(bt_tuner, decisions, S_I64, 0, S_WIRE, false),
};
static const s_field s_pending[] = {
    S_F(bt_runstate_eval, dataset, S_I32, 0, BT_EVAL_MAX_DATASETS - 1, false),
    S_F(bt_runstate_eval, step, S_I64, 0, S_WIRE, false),
};
#define S_N(a) (int)(sizeof a / sizeof a[0])

/*  Numbers as exact text: integers as such, doubles with enough digits to read back the same. */
static cJSON *s_number(const s_field *f, const void *base) {
    const char *p = (const char *)base + f->offset;
    char buf[40];
    switch (f->kind) {
    case S_BOOL: return cJSON_CreateBool(*(const bool *)p);
    case S_I32: snprintf(buf, sizeof buf, "%d", *(const int32_t *)p); break;
    case S_I64: snprintf(buf, sizeof buf, "%lld", (long long)*(const int64_t *)p); break;
    case S_U64: snprintf(buf, sizeof buf, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case S_F64:
        if (!isfinite(*(const double *)p))
            return cJSON_CreateNull(); /* NaN: nothing known yet */
        snprintf(buf, sizeof buf, "%.17g", *(const double *)p);
        break;
    }
    return cJSON_CreateRaw(buf);
}

static bool s_put_fields(cJSON *obj, const s_field *fields, int n, const void *base) {
    bool ok = obj != NULL;
    for (int i = 0; ok && i < n; i++) {
        cJSON *v = s_number(&fields[i], base);
        ok = v && cJSON_AddItemToObject(obj, fields[i].name, v);
        if (!ok)
            cJSON_Delete(v);
    }
    return ok;
}

/*  The mixture rule's weights and window: "mixture": [[weight, n, correct, reward, reward_sq],
    ...] per source, and "mixture_steps". */
static bool s_put_mixture(cJSON *t, const bt_tuner *tu) {
    cJSON *rows = cJSON_AddArrayToObject(t, "mixture");
    bool ok = rows != NULL;
    for (int k = 0; ok && k < BT_TUNER_MAX_SOURCES; k++) {
        const double v[5] = {tu->weights[k], tu->window[k].n, tu->window[k].correct,
                             tu->window[k].reward, tu->window[k].reward_sq};
        char row[256];
        snprintf(row, sizeof row, "[%.17g,%.17g,%.17g,%.17g,%.17g]", v[0], v[1], v[2], v[3], v[4]);
        ok = cJSON_AddItemToArray(rows, cJSON_CreateRaw(row));
    }
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)tu->window_steps);
    return ok && cJSON_AddItemToObject(t, "mixture_steps", cJSON_CreateRaw(num));
}

/*  Reads s_put_mixture's fields; absent (a state.json from before the mixture rule) leaves them. */
static bt_status s_get_mixture(const cJSON *t, bt_tuner *tu, const char *where) {
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(t, "mixture");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(t, "mixture_steps");
    if (!rows && !steps)
        return BT_OK;
    if (!cJSON_IsArray(rows) || cJSON_GetArraySize(rows) != BT_TUNER_MAX_SOURCES ||
        !cJSON_IsNumber(steps))
        return bt_fail(BT_EFORMAT, "%s.mixture: expected %d rows and mixture_steps", where,
                       BT_TUNER_MAX_SOURCES);
    int k = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        double v[5];
        for (int i = 0; i < 5; i++) {
            const cJSON *x = cJSON_GetArrayItem(row, i);
            if (!cJSON_IsNumber(x) || cJSON_GetArraySize(row) != 5)
                return bt_fail(BT_EFORMAT, "%s.mixture[%d]: expected 5 numbers", where, k);
            v[i] = x->valuedouble;
            /* a weight (0: saved before the mixture rule), counts and sums of squares are >= 0 */
            if (!isfinite(v[i]) || (i != 3 && v[i] < 0) || (i == 0 && v[i] > 1e6))
                return bt_fail(BT_EFORMAT,
                               "%s.mixture[%d][%d]: expected a finite number%s, got %.17g", where,
                               k, i,
                               i == 0   ? " in [0, 1e6]"
                               : i != 3 ? " >= 0"
                                        : "",
                               v[i]);
        }
        tu->weights[k] = v[0];
        tu->window[k].n = v[1];
        tu->window[k].correct = v[2];
        tu->window[k].reward = v[3];
        tu->window[k].reward_sq = v[4];
        k++;
    }
    if (!(steps->valuedouble >= 0 && steps->valuedouble <= S_WIRE) ||
        steps->valuedouble != floor(steps->valuedouble))
        return bt_fail(BT_EFORMAT, "%s.mixture_steps: expected an integer >= 0, got %.17g", where,
                       steps->valuedouble);
    tu->window_steps = (int64_t)steps->valuedouble;
    return BT_OK;
}

char *bt_runstate_to_json(const bt_runstate *s) {
    cJSON *root = cJSON_CreateObject();
    bool ok =
        s_put_fields(root, s_state, S_N(s_state), s) &&
        (s->events_size < 0 ||
         cJSON_AddNumberToObject(root, "events_size", (double)s->events_size)) &&
        (s->global_step < 0 ||
         cJSON_AddNumberToObject(root, "global_step", (double)s->global_step)) &&
        (!isfinite(s->clip_high) || cJSON_AddNumberToObject(root, "clip_high", s->clip_high)) &&
        cJSON_AddNumberToObject(root, "format", 1) != NULL;
    cJSON *triggers = ok ? cJSON_AddArrayToObject(root, "triggers") : NULL;
    cJSON *pending = ok ? cJSON_AddArrayToObject(root, "pending_evals") : NULL;
    ok = ok && triggers && pending;
    for (int i = 0; ok && i < s->n_triggers; i++) {
        cJSON *t = cJSON_CreateObject();
        ok = cJSON_AddItemToArray(triggers, t) &&
             s_put_fields(t, s_trigger, S_N(s_trigger), &s->triggers[i]);
    }
    for (int i = 0; ok && i < s->n_pending; i++) {
        cJSON *e = cJSON_CreateObject();
        ok = cJSON_AddItemToArray(pending, e) &&
             s_put_fields(e, s_pending, S_N(s_pending), &s->pending[i]) &&
             cJSON_AddStringToObject(e, "trigger", s->pending[i].trigger) != NULL;
    }
    if (ok && s->has_tuner) {
        cJSON *t = cJSON_CreateObject();
        ok = cJSON_AddItemToObject(root, "tuner", t) &&
             s_put_fields(t, s_tuner, S_N(s_tuner), &s->tuner) && s_put_mixture(t, &s->tuner);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/*  "an integer in [0, 9007199254740992]", "a finite number >= 0 or null", ... */
static void s_expected(const s_field *f, char *buf, size_t len) {
    const char *noun = f->kind == S_F64 ? "a number" : "an integer";
    const char *null = f->nullable ? " or null" : "";
    if (isfinite(f->lo) && isfinite(f->hi))
        snprintf(buf, len, "%s in [%.17g, %.17g]%s", noun, f->lo, f->hi, null);
    else if (isfinite(f->lo))
        snprintf(buf, len, "a finite %s >= %.17g%s", noun + 2, f->lo, null);
    else
        snprintf(buf, len, "a finite %s%s", noun + 2, null);
}

/*  Reads fields into base, each checked against what it can hold; errors name where.field, what
    was expected and what was found. */
static bt_status s_get_fields(const cJSON *obj, const s_field *fields, int n, void *base,
                              const char *where) {
    for (int i = 0; i < n; i++) {
        const s_field *f = &fields[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, f->name);
        char *p = (char *)base + f->offset;
        if (!v && f->optional)
            continue;
        bool ok = f->kind == S_BOOL  ? cJSON_IsBool(v)
                  : f->kind == S_F64 ? cJSON_IsNumber(v) || cJSON_IsNull(v)
                                     : cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
        if (!ok)
            return bt_fail(BT_EFORMAT, "%s.%s: missing or of the wrong type", where, f->name);
        if (f->kind != S_BOOL && !(cJSON_IsNull(v) && f->nullable)) {
            double x = cJSON_IsNull(v) ? NAN : v->valuedouble;
            if (!(x >= f->lo && x <= f->hi && isfinite(x))) {
                char what[96], got[40] = "null";
                s_expected(f, what, sizeof what);
                if (!cJSON_IsNull(v))
                    snprintf(got, sizeof got, "%.17g", x);
                return bt_fail(BT_EFORMAT, "%s.%s: expected %s, got %s", where, f->name, what, got);
            }
        }
        switch (f->kind) {
        case S_BOOL: *(bool *)p = cJSON_IsTrue(v); break;
        case S_I32: *(int32_t *)p = (int32_t)v->valuedouble; break;
        case S_I64: *(int64_t *)p = (int64_t)v->valuedouble; break;
        case S_U64: *(uint64_t *)p = (uint64_t)v->valuedouble; break;
        case S_F64: *(double *)p = cJSON_IsNull(v) ? NAN : v->valuedouble; break;
        }
    }
    return BT_OK;
}

/*  text parsed into *root, which must be a JSON object (the caller deletes it). */
static bt_status s_object(const char *text, const char *source, cJSON **root) {
    *root = cJSON_Parse(text);
    if (cJSON_IsObject(*root))
        return BT_OK;
    cJSON_Delete(*root);
    *root = NULL;
    return bt_fail(BT_EFORMAT, "%s: not a JSON object", source);
}

bt_status bt_runstate_from_json(const char *text, const char *source, bt_runstate *out) {
    memset(out, 0, sizeof *out);
    cJSON *root = NULL;
    BT_TRY(s_object(text, source, &root));
    bt_status st = s_get_fields(root, s_state, S_N(s_state), out, source);
    const cJSON *triggers = cJSON_GetObjectItemCaseSensitive(root, "triggers");
    const cJSON *pending = cJSON_GetObjectItemCaseSensitive(root, "pending_evals");
    if (st == BT_OK && (!cJSON_IsArray(triggers) || !cJSON_IsArray(pending) ||
                        cJSON_GetArraySize(triggers) > BT_EVAL_MAX_DATASETS ||
                        cJSON_GetArraySize(pending) > BT_RUNSTATE_MAX_PENDING))
        st = bt_fail(BT_EFORMAT, "%s: triggers or pending_evals: missing or too long", source);
    char where[256];
    for (const cJSON *t = st == BT_OK ? triggers->child : NULL; t && st == BT_OK; t = t->next) {
        snprintf(where, sizeof where, "%s: triggers[%d]", source, out->n_triggers);
        st = s_get_fields(t, s_trigger, S_N(s_trigger), &out->triggers[out->n_triggers++], where);
    }
    for (const cJSON *e = st == BT_OK ? pending->child : NULL; e && st == BT_OK; e = e->next) {
        bt_runstate_eval *p = &out->pending[out->n_pending];
        snprintf(where, sizeof where, "%s: pending_evals[%d]", source, out->n_pending++);
        st = s_get_fields(e, s_pending, S_N(s_pending), p, where);
        const char *trigger = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "trigger"));
        if (st == BT_OK && (!trigger || strlen(trigger) >= sizeof p->trigger))
            st = bt_fail(BT_EFORMAT, "%s.trigger: missing or too long", where);
        if (st == BT_OK)
            snprintf(p->trigger, sizeof p->trigger, "%s", trigger);
    }
    for (int i = 0; i < out->n_pending && st == BT_OK; i++)
        if (out->pending[i].step > out->step)
            st = bt_fail(BT_EFORMAT,
                         "%s: pending_evals[%d].step: expected an integer <= step (%lld), got %lld",
                         source, i, (long long)out->step, (long long)out->pending[i].step);
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "events_size"); /* absent before */
    out->events_size = -1;
    if (st == BT_OK && events) {
        double x = cJSON_IsNumber(events) ? events->valuedouble : -1;
        if (!(x >= 0 && x <= S_WIRE && x == floor(x)))
            st = bt_fail(BT_EFORMAT, "%s.events_size: expected an integer in [0, %.0f]", source,
                         S_WIRE);
        out->events_size = (int64_t)x;
    }
    const cJSON *global = cJSON_GetObjectItemCaseSensitive(root, "global_step"); /* ditto */
    out->global_step = -1;
    if (st == BT_OK && global) {
        double x = cJSON_IsNumber(global) ? global->valuedouble : NAN;
        char got[40] = "a value that is not a number";
        if (cJSON_IsNumber(global))
            snprintf(got, sizeof got, "%.17g", x);
        if (!(x >= 0 && x <= S_WIRE && x == floor(x)))
            st = bt_fail(BT_EFORMAT, "%s.global_step: expected an integer in [0, %.0f], got %s",
                         source, S_WIRE, got);
        else
            out->global_step = (int64_t)x;
    }
    const cJSON *clip = cJSON_GetObjectItemCaseSensitive(root, "clip_high"); /* absent before */
    out->clip_high = NAN;
    if (st == BT_OK && clip) {
        double x = cJSON_IsNumber(clip) ? clip->valuedouble : -1;
        if (!(x >= 0 && x <= BT_CONFIG_CLIP_MAX))
            st = bt_fail(BT_EFORMAT, "%s.clip_high: expected a number in [0, %g]", source,
                         (double)BT_CONFIG_CLIP_MAX);
        out->clip_high = x;
    }
    const cJSON *tuner = cJSON_GetObjectItemCaseSensitive(root, "tuner"); /* absent before it */
    out->has_tuner = st == BT_OK && tuner != NULL;
    if (out->has_tuner) {
        snprintf(where, sizeof where, "%s: tuner", source);
        st = s_get_fields(tuner, s_tuner, S_N(s_tuner), &out->tuner, where);
        if (st == BT_OK)
            st = s_get_mixture(tuner, &out->tuner, where);
    }
    cJSON_Delete(root);
    return st;
}

bt_status bt_runstate_check(const bt_runstate *s, const bt_config *cfg, int64_t metrics_bytes,
                            int64_t events_bytes, const char *source) {
    if (s->step > cfg->grpo.steps)
        return bt_fail(BT_EINVAL,
                       "%s: step: the checkpoint is at step %lld, beyond grpo.steps (%lld): resume "
                       "with --set grpo.steps=%lld or more",
                       source, (long long)s->step, (long long)cfg->grpo.steps, (long long)s->step);
    if (s->n_triggers != cfg->eval.n_datasets)
        return bt_fail(BT_EINVAL,
                       "%s: triggers: %d, one per evaluation dataset, but the config has %d "
                       "eval.datasets: the checkpoint is not of this config's run",
                       source, s->n_triggers, cfg->eval.n_datasets);
    for (int i = 0; i < s->n_pending; i++)
        if (s->pending[i].dataset >= cfg->eval.n_datasets)
            return bt_fail(BT_EINVAL,
                           "%s: pending_evals[%d].dataset: %d, but the config has %d "
                           "eval.datasets: the checkpoint is not of this config's run",
                           source, i, s->pending[i].dataset, cfg->eval.n_datasets);
    const struct {
        const char *field, *file;
        int64_t recorded, held;
    } logs[] = {{"metrics_size", "metrics.jsonl", s->metrics_size, metrics_bytes},
                {"events_size", "events.jsonl", s->events_size, events_bytes}};
    for (size_t i = 0; i < sizeof logs / sizeof logs[0]; i++)
        if (logs[i].recorded > logs[i].held)
            return bt_fail(BT_EINVAL,
                           "%s: %s: the checkpoint was taken when %s held %lld bytes, and it "
                           "holds %lld: its tail was lost, or the checkpoint is another run's; "
                           "resume from an older checkpoint (--resume RUN_DIR/ckpt/step-N) or "
                           "start again with --overwrite",
                           source, logs[i].field, logs[i].file, (long long)logs[i].recorded,
                           (long long)logs[i].held);
    return BT_OK;
}

static const s_field s_population[] = {
    S_F(bt_runstate_population, step, S_I64, 0, S_WIRE, false),
    S_F(bt_runstate_population, pbt_step, S_I64, 0, S_WIRE, false),
};

char *bt_runstate_population_to_json(const bt_runstate_population *p) {
    cJSON *root = cJSON_CreateObject();
    bool ok = s_put_fields(root, s_population, S_N(s_population), p) &&
              cJSON_AddNumberToObject(root, "format", 1) != NULL;
    cJSON *list = ok ? cJSON_AddArrayToObject(root, "policies") : NULL;
    for (int i = 0; list && ok && i < p->n; i++) {
        cJSON *e = cJSON_CreateObject();
        ok = cJSON_AddItemToArray(list, e) &&
             cJSON_AddStringToObject(e, "name", p->policies[i].name) &&
             cJSON_AddBoolToObject(e, "stopped", p->policies[i].stopped) &&
             cJSON_AddNumberToObject(e, "step", (double)p->policies[i].step);
    }
    char *text = ok && list ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}

bt_status bt_runstate_population_from_json(const char *text, const char *source,
                                           bt_runstate_population *out) {
    memset(out, 0, sizeof *out);
    cJSON *root = NULL;
    BT_TRY(s_object(text, source, &root));
    bt_status st = s_get_fields(root, s_population, S_N(s_population), out, source);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "policies");
    if (st == BT_OK && (!cJSON_IsArray(list) || cJSON_GetArraySize(list) < 1 ||
                        cJSON_GetArraySize(list) > BT_CONFIG_MAX_VARIANTS))
        st = bt_fail(BT_EFORMAT, "%s: policies: expected an array of 1 to %d policies", source,
                     BT_CONFIG_MAX_VARIANTS);
    for (const cJSON *e = st == BT_OK ? list->child : NULL; e && st == BT_OK; e = e->next) {
        int i = out->n++;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        const cJSON *stopped = cJSON_GetObjectItemCaseSensitive(e, "stopped");
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(e, "step");
        double x = cJSON_IsNumber(step) ? step->valuedouble : -1;
        if (!name || strlen(name) >= sizeof out->policies[i].name || !cJSON_IsBool(stopped) ||
            !(x >= 0 && x <= S_WIRE && x == floor(x)))
            st = bt_fail(BT_EFORMAT,
                         "%s: policies[%d]: expected {\"name\": a name, \"stopped\": a boolean, "
                         "\"step\": an integer >= 0}",
                         source, i);
        if (st != BT_OK)
            break;
        snprintf(out->policies[i].name, sizeof out->policies[i].name, "%s", name);
        out->policies[i].stopped = cJSON_IsTrue(stopped);
        out->policies[i].step = (int64_t)x;
    }
    cJSON_Delete(root);
    return st;
}
