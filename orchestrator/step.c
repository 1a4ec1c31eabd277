/*  step.c — the record of a policy's GRPO step: the train line of metrics.jsonl (per source when
    data.sources are set), the curriculum's streaks, the tuner's decisions, the evaluations the
    step's triggers fire; see rooms.h. */
#include "rooms.h"

/*  Per source: what the tuner's mixture rule and the train line see; the curriculum's streaks. */
static void s_source_stats(bt_policy *self, bt_tuner_step_stats *tss, int64_t *prompts) {
    const bt_rollout_batch *b = &self->sampled;
    tss->n_sources = self->n_sources;
    for (int64_t g = 0; g < b->n_prompts; g++) {
        int k = BT_PROMPT_SOURCE(b->indices[g]), right = 0;
        prompts[k]++;
        for (int64_t j = 0; j < b->group_size; j++) {
            int64_t i = g * b->group_size + j;
            right += b->correct[i];
            tss->sources[k].n += 1;
            tss->sources[k].correct += b->correct[i];
            tss->sources[k].reward += b->rewards[i];
            tss->sources[k].reward_sq += b->rewards[i] * b->rewards[i];
        }
        bt_mixture_observe(self->mix, self->sources, b->indices[g], right, b->group_size);
    }
}

/*  The per-source fields of the train line. */
static void s_source_fields(const bt_policy *self, const bt_tuner_step_stats *tss,
                            const int64_t *prompts, bt_jsonl *line) {
    const bt_config *c = self->cfg;
    for (int k = 0; k < self->n_sources && c->data.n_sources > 0; k++) {
        char key[96];
        const char *name = bt_config_source_name(c, k);
        double m = tss->sources[k].n;
        snprintf(key, sizeof key, "prompts.%s", name);
        bt_jsonl_int(line, key, prompts[k]);
        snprintf(key, sizeof key, "reward_mean.%s", name);
        bt_jsonl_num(line, key, m > 0 ? tss->sources[k].reward / m : NAN);
        snprintf(key, sizeof key, "accuracy.%s", name);
        bt_jsonl_num(line, key, m > 0 ? tss->sources[k].correct / m : NAN);
        snprintf(key, sizeof key, "weight.%s", name);
        bt_jsonl_num(line, key, self->step_weights[k]);
    }
}

/* ---- resource figures (docs/architecture.md, "Resource figures") ------------------------------
 */

void bt_policy_resources_mark(bt_policy *self) {
    self->res_t = bt_now();
    for (int r = 0; r < BT_ROLE_COUNT; r++)
        bt_registry_usage_of(self->ctl->reg, (bt_role)r, &self->res_at[r]);
    self->wait_slowest_s = 0;
}

/*  Per role over the interval: busy worker-seconds over live worker-seconds (NaN: no worker of it
    was live), CPU seconds, peak memory; WEIGHTS time over every worker's live time. */
void bt_policy_resources(bt_policy *self, bt_jsonl *line) {
    static const char *const busy_key[BT_ROLE_COUNT] = {"busy_rollout", "busy_train", "busy_eval"};
    bt_registry_usage now[BT_ROLE_COUNT];
    double t = bt_now(), weights = 0, live = 0, cuda_allocated = NAN, cuda_reserved = NAN;
    for (int r = 0; r < BT_ROLE_COUNT; r++) {
        bt_registry_usage_of(self->ctl->reg, (bt_role)r, &now[r]);
        weights += now[r].weights_s - self->res_at[r].weights_s;
        live += (double)(now[r].live_ms - self->res_at[r].live_ms) / 1000.0;
        cuda_allocated = fmax(cuda_allocated, now[r].cuda_allocated_mb); /* fmax skips a NaN */
        cuda_reserved = fmax(cuda_reserved, now[r].cuda_reserved_mb);
    }
    bt_jsonl_num(line, "step_s", t - self->res_t);
    for (int r = 0; r < BT_ROLE_COUNT; r++) {
        int64_t dl = now[r].live_ms - self->res_at[r].live_ms; /* exact: whole milliseconds */
        int64_t db = now[r].busy_ms - self->res_at[r].busy_ms;
        bt_jsonl_num(line, busy_key[r], dl > 0 ? (double)db / (double)dl : NAN);
    }
    bt_jsonl_num(line, "busy_weights", live > 0 ? weights / live : NAN);
    bt_jsonl_num(line, "wait_slowest_s", self->wait_slowest_s);
    for (int r = 0; r < BT_ROLE_COUNT; r++) {
        char key[48];
        snprintf(key, sizeof key, "cpu_s_%s", bt_role_name((bt_role)r));
        bt_jsonl_num(line, key, now[r].cpu_s - self->res_at[r].cpu_s);
        snprintf(key, sizeof key, "peak_rss_mb_%s", bt_role_name((bt_role)r));
        bt_jsonl_num(line, key, now[r].peak_rss_mb);
    }
    if (isfinite(cuda_allocated)) /* CUDA: the largest a worker's allocator held */
        bt_jsonl_num(line, "cuda_allocated_mb", cuda_allocated);
    if (isfinite(cuda_reserved))
        bt_jsonl_num(line, "cuda_reserved_mb", cuda_reserved);
    self->res_t = t;
    memcpy(self->res_at, now, sizeof now);
    self->wait_slowest_s = 0;
}

/*  The train line of the step just done (self->step already counts it). */
static bt_status s_train_line(bt_policy *self, double length, double turns, int64_t n,
                              const bt_tuner_step_stats *tss, const int64_t *prompts) {
    const bt_config *c = self->cfg;
    const bt_trainer_stats *ts = &self->ts;
    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "train");
    bt_jsonl_int(&line, "step", self->step);
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_int(&line, "global_step", ++self->global_step);
    bt_jsonl_num(&line, "time", bt_now() - self->ctl->t0);
    bt_jsonl_num(&line, "reward_mean", self->last_reward);
    bt_jsonl_num(&line, "loss", ts->loss);
    bt_jsonl_num(&line, "kl", ts->kl);
    bt_jsonl_num(&line, "clip_frac", ts->clip_frac);
    bt_jsonl_num(&line, "mismatch_kl", ts->mismatch_kl);
    bt_jsonl_num(&line, "ratio_std", ts->ratio_std);
    bt_jsonl_num(&line, "ratio_min", ts->ratio_min);
    bt_jsonl_num(&line, "ratio_max", ts->ratio_max);
    bt_jsonl_num(&line, "entropy", ts->entropy);
    bt_jsonl_num(&line, "grad_norm", ts->grad_norm);
    bt_jsonl_num(&line, "lr", self->updated ? ts->lr : self->step_lr); /* the one AdamW applied */
    bt_jsonl_num(&line, "response_len_mean", n ? length / (double)n : NAN);
    if (self->episodes) /* model turns per episode */
        bt_jsonl_num(&line, "turns_mean", n ? turns / (double)n : NAN);
    bt_jsonl_num(&line, "tokens_per_s", self->step_tps);
    bt_jsonl_num(&line, "padding", self->updated ? self->padding : NAN);
    self->tokens += length;
    bt_jsonl_num(&line, "tokens", self->tokens);
    bt_jsonl_int(&line, "version", self->version);
    if (c->grpo.max_staleness > 0) /* policy versions between the oldest sampler and the update */
        bt_jsonl_int(&line, "staleness", self->step_version - self->step_oldest);
    if (self->epoch_size)
        bt_jsonl_int(&line, "epoch", bt_policy_epoch(self));
    if (c->data.curriculum.window > 0) {
        bt_jsonl_int(&line, "dropped", self->dropped_step);
        bt_jsonl_int(&line, "dropped_total", bt_mixture_dropped(self->mix));
    }
    s_source_fields(self, tss, prompts, &line);
    int explored = c->pbt.enabled ? c->pbt.explore_mask : 0; /* what PBT may change, as used */
    if (explored & (1 << BT_PBT_KL_COEF))
        bt_jsonl_num(&line, "kl_coef", self->step_kl_coef);
    if (explored & (1 << BT_PBT_TEMPERATURE))
        bt_jsonl_num(&line, "temperature", self->step_temperature);
    if (explored & (1 << BT_PBT_CLIP_HIGH))
        bt_jsonl_num(&line, "clip_high", self->step_clip_high);
    bt_policy_resources(self, &line);
    return bt_runlog_metric(self->ctl->log, &line);
}

bt_status bt_policy_record(bt_policy *self) {
    const bt_config *c = self->cfg;
    const bt_rollout_batch *b = &self->sampled;
    double reward = 0, length = 0, turns = 0;
    for (int64_t i = 0; i < b->n; i++) {
        reward += b->rewards[i];
        length += (double)b->lengths[i];
        turns += (double)b->n_turns[i];
    }
    int64_t n = b->n;
    bt_tuner_step_stats tss = {
        .kl = self->ts.kl, .entropy = self->ts.entropy, .n_samples = self->ts.sequences};
    int64_t prompts[BT_CONFIG_MAX_SOURCES] = {0};
    s_source_stats(self, &tss, prompts);
    bt_rollout_batch_release(&self->sampled);
    self->step++;
    double dt = bt_now() - self->step_t0;
    self->step_tps = length / dt;
    self->last_reward = n ? reward / (double)n : NAN;
    BT_TRY(s_train_line(self, length, turns, n, &tss, prompts));
    if (self->updated) { /* the tuner sees the step; its decisions apply from the next one */
        bt_tuner_decision dec[BT_TUNER_MAX_DECISIONS];
        int nd = bt_tuner_after_step(&self->tuner, self->step, &tss, dec, BT_TUNER_MAX_DECISIONS);
        BT_TRY(bt_ctl_tuner_events(self, dec, nd));
    }
    bt_evals_after_step(self, self->step == c->grpo.steps);
    self->state = BT_POLICY_EVALS;
    return BT_OK;
}
