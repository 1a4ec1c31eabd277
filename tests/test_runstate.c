/*  test_runstate.c — state.json round-trips every field exactly (awkward doubles, NaN, integers
    near 2^53) and names what is wrong in a bad file. */
#include "baton/runstate.h"
#include "check.h"

#include <cjson/cJSON.h>

#include <stdlib.h>

int main(void) {
    bt_runstate a, b;
    memset(&a, 0, sizeof a);
    a.step = 123;
    a.version = 987;
    a.cursor = (UINT64_C(1) << 52) + 1;
    a.train_seconds = 0.1 + 0.2; /* 0.30000000000000004 */
    a.last_reward = 1e-300;
    a.last_accuracy = NAN; /* nothing evaluated yet */
    a.metrics_size = 4096;
    a.events_size = 777;
    a.canary_loss = 2.718281828459045;
    a.nan_injected = true;
    a.loss_ema = -0.0;
    a.loss_n = 7;
    a.n_triggers = 2;
    bt_trigger_config tc;
    bt_trigger_config_init(&tc);
    bt_trigger_init(&a.triggers[0], &tc);
    a.triggers[1] = a.triggers[0];
    a.triggers[1].interval = 5;
    a.triggers[1].last_seconds = 1.0 / 3.0;
    a.triggers[1].last_tokens = 12345.0;
    a.clip_high = 0.336;
    a.triggers[1].pending = true;
    a.triggers[1].pending_reasons = BT_TRIGGER_STEPS | BT_TRIGGER_SECONDS;
    a.triggers[1].has_value = a.triggers[1].has_rate = true;
    a.triggers[1].last_value = 0.61;
    a.triggers[1].rate_ema = -0.0125;
    a.n_pending = 1;
    a.pending[0] = (bt_runstate_eval){.dataset = 1, .step = 120, .trigger = "steps+seconds"};
    char *text = bt_runstate_to_json(&a);
    CHECK(text != NULL);
    CHECK_OK(bt_runstate_from_json(text, "state.json", &b));
    CHECK(b.step == a.step && b.version == a.version && b.cursor == a.cursor);
    CHECK(b.train_seconds == a.train_seconds && b.last_reward == a.last_reward);
    CHECK(isnan(b.last_accuracy) && b.metrics_size == a.metrics_size);
    CHECK(b.canary_loss == a.canary_loss && b.nan_injected && b.loss_ema == 0 && b.loss_n == 7);
    CHECK(b.n_triggers == 2 && b.n_pending == 1);
    for (int i = 0; i < 2; i++) {
        const bt_trigger *x = &a.triggers[i], *y = &b.triggers[i];
        CHECK(x->interval == y->interval && x->last_step == y->last_step);
        CHECK(x->last_epoch == y->last_epoch && x->last_seconds == y->last_seconds);
        CHECK(x->pending == y->pending && x->pending_reasons == y->pending_reasons);
        CHECK(x->has_value == y->has_value && x->has_rate == y->has_rate);
        CHECK(x->last_value == y->last_value && x->last_value_step == y->last_value_step);
        CHECK(x->rate_ema == y->rate_ema && x->fired == y->fired && x->deferred == y->deferred);
        CHECK(x->last_tokens == y->last_tokens);
    }
    CHECK(b.clip_high == a.clip_high);
    CHECK(b.pending[0].dataset == 1 && b.pending[0].step == 120);
    CHECK(strcmp(b.pending[0].trigger, "steps+seconds") == 0);
    CHECK(!b.has_tuner); /* a state without one (written before the tuner existed) */
    free(text);

    /* the tuner's state, every double exact */
    a.has_tuner = true;
    a.tuner.kl_coef = 0.1 / 3.0;
    a.tuner.lr = 7.5e-4 * 2.0 / 3.0;
    a.tuner.temperature = 1.05;
    a.tuner.has_best = true;
    a.tuner.best = 0.625;
    a.tuner.best_step = 40;
    a.tuner.last_eval_step = 60;
    a.tuner.bad_evals = 2;
    a.tuner.decisions = 9;
    text = bt_runstate_to_json(&a);
    CHECK_OK(bt_runstate_from_json(text, "state.json", &b));
    CHECK(b.has_tuner && b.tuner.kl_coef == a.tuner.kl_coef && b.tuner.lr == a.tuner.lr);
    CHECK(b.tuner.temperature == a.tuner.temperature && b.tuner.has_best && b.tuner.best == 0.625);
    CHECK(b.tuner.best_step == 40 && b.tuner.last_eval_step == 60 && b.tuner.bad_evals == 2);
    CHECK(b.tuner.decisions == 9);
    free(text);
    a.has_tuner = false;

    /* bad files name what is wrong */
    CHECK(bt_runstate_from_json("[1]", "s.json", &b) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "s.json: not a JSON object");
    CHECK(bt_runstate_from_json("{\"step\": 1.5}", "s.json", &b) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "s.json.step: missing or of the wrong type");
    text = bt_runstate_to_json(&a);
    char *cut = strstr(text, "\"rate_ema\"");
    CHECK(cut != NULL);
    if (cut)
        memcpy(cut, "\"rate_emX\"", 10);
    CHECK(bt_runstate_from_json(text, "s.json", &b) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "triggers[0].rate_ema");
    free(text);

    /* every field is checked against what a run can have written: each edit below makes one
       value impossible, and the error names the field, the range and the value */
    a.has_tuner = true;
    const struct {
        const char *from, *to, *error;
    } bad[] = {
        {"\"version\":\t987", "\"version\":\t-1",
         "s.json.version: expected an integer in [0, 9007199254740992], got -1"},
        {"\"metrics_size\":\t4096", "\"metrics_size\":\t-5",
         "s.json.metrics_size: expected an integer in [0, 9007199254740992], got -5"},
        {"\"step\":\t123", "\"step\":\t1e300",
         "s.json.step: expected an integer in [0, 9007199254740992], got 1.0000000000000001e+300"},
        {"\"cursor\":\t4503599627370497", "\"cursor\":\t-1", "s.json.cursor: expected an integer"},
        {"\"train_seconds\":\t0.30000000000000004", "\"train_seconds\":\tnull",
         "s.json.train_seconds: expected a finite number >= 0, got null"},
        {"\"canary_loss\":\t2.7182818284590451", "\"canary_loss\":\t-1",
         "s.json.canary_loss: expected a finite number >= 0, got -1"},
        {"\"loss_n\":\t7", "\"loss_n\":\t-7", "s.json.loss_n: expected an integer"},
        {"\"interval\":\t5", "\"interval\":\t-5", "triggers[1].interval: expected an integer"},
        {"\"pending_reasons\":\t5", "\"pending_reasons\":\t64",
         "triggers[1].pending_reasons: expected an integer in [0, 15], got 64"},
        {"\"dataset\":\t1", "\"dataset\":\t99",
         "pending_evals[0].dataset: expected an integer in [0, 7], got 99"},
        {"\"step\":\t120", "\"step\":\t124",
         "pending_evals[0].step: expected an integer <= step (123), got 124"},
        {"\"temperature\":\t1.05", "\"temperature\":\t0",
         "tuner.temperature: expected a number in [0.001, 1000], got 0"},
        {"\"lr\":\t0.00050000000000000001", "\"lr\":\t1e308",
         "tuner.lr: expected a number in [0, 1000], got 1e+308"},
        {"\"mixture_steps\":\t0", "\"mixture_steps\":\t-3",
         "tuner.mixture_steps: expected an integer >= 0, got -3"},
    };
    text = bt_runstate_to_json(&a);
    CHECK_OK(bt_runstate_from_json(text, "s.json", &b)); /* as written, it reads back */
    for (size_t i = 0; text && i < sizeof bad / sizeof bad[0]; i++) {
        char *at = strstr(text, bad[i].from), edited[1 << 14];
        CHECK(at != NULL);
        if (!at)
            continue;
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, bad[i].to,
                 at + strlen(bad[i].from));
        CHECK(bt_runstate_from_json(edited, "s.json", &b) == BT_EFORMAT);
        CHECK_STR_CONTAINS(bt_last_error(), bad[i].error);
    }
    free(text);

    /* against the run it resumes: the config's steps and datasets, the metrics.jsonl there */
    text = bt_runstate_to_json(&a);
    CHECK_OK(bt_runstate_from_json(text, "s.json", &b));
    free(text);
    bt_config cfg;
    CHECK_OK(bt_config_parse("{\"grpo\": {\"steps\": 200}, \"eval\": {\"datasets\": "
                             "[{\"name\": \"a\"}, {\"name\": \"b\"}]}}",
                             "c.json", NULL, 0, &cfg));
    CHECK_OK(bt_runstate_check(&b, &cfg, 4096, 777, "s.json"));
    CHECK(bt_runstate_check(&b, &cfg, 4095, 777, "s.json") == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "s.json: metrics_size: the checkpoint was taken when "
                                        "metrics.jsonl held 4096 bytes, and it holds 4095");
    CHECK_STR_CONTAINS(bt_last_error(), "--overwrite");
    CHECK(b.events_size == 777); /* read back, and checked against events.jsonl */
    { /* a state.json from before events_size: events.jsonl is left as it is (-1) */
        char *old = bt_runstate_to_json(&a), *at = old ? strstr(old, "\"events_size\"") : NULL;
        CHECK(at != NULL);
        if (at) {
            char *end = strchr(at, ',');
            memmove(at, end + 1, strlen(end + 1) + 1);
        }
        bt_runstate c;
        CHECK_OK(bt_runstate_from_json(old, "old.json", &c));
        CHECK(c.events_size == -1 && c.metrics_size == 4096);
        CHECK_OK(bt_runstate_check(&c, &cfg, 4096, 0, "old.json"));
        free(old);
    }
    { /* from before last_tokens and clip_high: the token trigger counts from 0, the clip is
         the config's (NaN) */
        char *text2 = bt_runstate_to_json(&a);
        cJSON *root = cJSON_Parse(text2), *t;
        cJSON_DeleteItemFromObject(root, "clip_high");
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(root, "triggers"))
            cJSON_DeleteItemFromObject(t, "last_tokens");
        char *old = cJSON_Print(root);
        CHECK(old && !strstr(old, "last_tokens") && !strstr(old, "clip_high"));
        bt_runstate c;
        CHECK_OK(bt_runstate_from_json(old, "old.json", &c));
        CHECK(c.triggers[1].last_tokens == 0 && isnan(c.clip_high));
        CHECK(c.triggers[1].last_seconds == a.triggers[1].last_seconds);
        cJSON_free(old);
        cJSON_Delete(root);
        free(text2);
    }
    CHECK(bt_runstate_check(&b, &cfg, 4096, 776, "s.json") == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "s.json: events_size: the checkpoint was taken when "
                                        "events.jsonl held 777 bytes, and it holds 776");
    cfg.grpo.steps = 100;
    CHECK(bt_runstate_check(&b, &cfg, 4096, 777, "s.json") == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "s.json: step: the checkpoint is at step 123, beyond "
                                        "grpo.steps (100): resume with --set grpo.steps=123");
    cfg.grpo.steps = 200;
    cfg.eval.n_datasets = 1;
    CHECK(bt_runstate_check(&b, &cfg, 4096, 777, "s.json") == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "triggers: 2, one per evaluation dataset");
    return check_exit();
}
