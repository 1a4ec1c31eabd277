/*  policy.c — one variant's GRPO schedule: SFT warm start, rollouts, training, the step. */
#include "rooms.h"

/*  Epochs completed so far of the epoch source's stream (data.epoch_source). */
int64_t bt_policy_epoch(const bt_controller_t *self) {
    int k = bt_config_epoch_source(self->cfg);
    return self->epoch_size ? (int64_t)(bt_policy_train_position(self).drawn[k] / self->epoch_size) : 0;
}

static bt_status s_sft(bt_controller_t *self) {
    const bt_run_config *c = self->cfg;
    bt_lr_schedule sched;
    bt_config_lr(c, BT_CONFIG_PHASE_SFT, &sched);
    for (int64_t s = 0; s < c->sft.steps; s++) {
        bool last = s + 1 == c->sft.steps;
        bool eval = last || (c->sft.eval_every > 0 && (s + 1) % c->sft.eval_every == 0);
        double lr = bt_lr_at(&sched, s);
        /* demonstrations: the next examples of the first source's stream */
        bt_mixture_position pos = bt_mixture_get_position(self->mix);
        bt_job job = {.kind = "sft",
                     .role = BT_ROLE_TRAINER,
                     .start = (int64_t)pos.drawn[0],
                     .count = c->sft.batch_size,
                     .lr = lr,
                     .publish = eval};
        pos.drawn[0] += (uint64_t)c->sft.batch_size;
        bt_mixture_set_position(self->mix, &pos);
        bt_status st = bt_group_run_trainer(self, &job);
        double loss = NAN;
        if (st == BT_OK)
            st = bt_msg_get_double(job.result, "stats.loss", -1e300, 1e300, &loss);
        bt_jobs_release(&job, 1);
        BT_TRY(st);
        bt_jsonl line;
        bt_jsonl_init(&line);
        bt_jsonl_str(&line, "kind", "sft");
        bt_jsonl_int(&line, "step", s + 1);
        bt_jsonl_str(&line, "variant", self->variant_name);
        bt_jsonl_num(&line, "time", bt_now() - self->t0);
        bt_jsonl_num(&line, "loss", loss);
        bt_jsonl_num(&line, "lr", lr);
        BT_TRY(bt_runlog_metric(self->log, &line));
        int ds = bt_evals_first_generate(c);
        if (eval && !last && ds >= 0 && c->workers.eval > 0) { /* blocking: it decides the stop */
            bt_evaluation *ev = NULL;
            BT_TRY(bt_evals_start(self, ds, "sft", "sft", s + 1, &ev));
            BT_TRY(bt_evals_wait(self, ev));
            if (self->last_accuracy >= c->sft.stop_accuracy)
                break;
        }
        bt_ctl_report(self, "sft", s + 1, c->sft.steps, NAN);
    }
    return BT_OK;
}

/*  The SFT warm start, the step-0 evaluations and the first snapshot (the first point a rollback
    or a restore returns to).  A trainer that loses its state before that snapshot exists is
    reset to the state every trainer starts from, and the warm start runs again from its first
    step (metrics.jsonl cut back), so the run writes what it would have written. */
bt_status bt_policy_warm_start(bt_controller_t *self) {
    const bt_run_config *c = self->cfg;
    bt_mixture_position pos0 = bt_mixture_get_position(self->mix);
    int64_t metrics0 = bt_runlog_metrics_size(self->log);
    for (;;) {
        bt_status st = s_sft(self);
        for (int i = 0; i < c->eval.n_datasets && c->workers.eval > 0 && st == BT_OK; i++) {
            bt_trigger_mark(&self->triggers[i], 0, bt_policy_epoch(self), 0);
            st = bt_evals_start(self, i, "rl", "start", 0, NULL);
        }
        if (st == BT_OK)
            st = bt_recovery_snapshot(self);
        if (st != BT_ESTATE)
            return st;
        char reason[512];
        snprintf(reason, sizeof reason, "%s", bt_last_error());
        if (++self->recoveries > S_MAX_RECOVERIES)
            return bt_fail(BT_ESTATE, "%s, after %d restores of the trainer in this run", reason,
                           S_MAX_RECOVERIES);
        bt_evals_cancel(self);
        BT_TRY(bt_recovery_restore_trainer(self, NULL, 0, NAN));
        bt_mixture_set_position(self->mix, &pos0);
        BT_TRY(bt_runlog_truncate_metrics(self->log, metrics0));
        self->last_accuracy = NAN;
        self->stats.restores++;
        bt_jsonl line;
        bt_ctl_event_line(self, &line, "trainer_restored");
        bt_jsonl_str(&line, "from", "initial");
        bt_jsonl_int(&line, "step", 0);
        bt_jsonl_str(&line, "reason", reason);
        BT_TRY(bt_runlog_event(self->log, &line));
        bt_log(BT_LOG_WARN, "controller: %s: the warm start runs again from its first step",
               reason);
    }
}

/*  Queues the rollouts of step `step` (its prompts are the next P of the training stream),
    sharded over the configured rollout workers; they run while the controller does other work. */
/*  A rollout job's seed: (run.seed, step) above the low BT_TASK_SEED_JOB_BITS, which number the
    job; computed unsigned and kept within a wire integer's 53 bits (a large run.seed overflowed).
 */
static int64_t s_rollout_seed(const bt_run_config *c, int64_t step, int job) {
    uint64_t x = ((uint64_t)c->run.seed * 1000003u + (uint64_t)step) * 64u + (uint64_t)job;
    return (int64_t)(x & ((UINT64_C(1) << 53) - 1));
}

static bt_status s_rollout_launch(bt_controller_t *self, int64_t step) {
    const bt_run_config *c = self->cfg;
    bt_rollouts *r = &self->ahead[step % S_AHEAD];
    BT_ASSERT(!r->active);
    int64_t P = c->grpo.prompts_per_step;
    int shards = (int)(c->workers.rollout < 1 ? 1 : c->workers.rollout);
    if (shards > P)
        shards = (int)P;
    if (shards > 64)
        shards = 64;
    r->idx = malloc(sizeof *r->idx * (size_t)P);
    uint64_t dropped[S_MAX_DROPPED_LOGGED];
    int64_t n_dropped = 0;
    if (!r->idx)
        return bt_fail(BT_ENOMEM, "controller: out of memory");
    r->step = step;
    r->before = bt_mixture_get_position(self->mix);
    memcpy(r->weights, self->tuner.weights, sizeof r->weights);
    bt_status st = BT_OK;
    for (int64_t i = 0; i < P && st == BT_OK; i++)
        st = bt_mixture_next(self->mix, self->sources, self->tuner.weights, 1000 * P, &r->idx[i],
                             dropped, S_MAX_DROPPED_LOGGED, &n_dropped);
    if (st != BT_OK) {
        free(r->idx);
        r->idx = NULL;
        return st;
    }
    r->dropped = n_dropped;
    if (n_dropped && c->debug.log_prompts) {
        bt_jsonl line;
        bt_ctl_event_line(self, &line, "dropped");
        bt_jsonl_int(&line, "step", step + 1);
        bt_jsonl_uints(
            &line, "prompts", dropped,
            (size_t)(n_dropped < S_MAX_DROPPED_LOGGED ? n_dropped : S_MAX_DROPPED_LOGGED));
        BT_TRY(bt_runlog_event(self->log, &line));
    }
    /* a job holds one source's prompts: group them by source (stable), then shard each group */
    for (int64_t i = 1; i < P; i++)
        for (int64_t j = i; j > 0 && BT_PROMPT_SOURCE(r->idx[j]) < BT_PROMPT_SOURCE(r->idx[j - 1]);
             j--) {
            uint64_t t = r->idx[j];
            r->idx[j] = r->idx[j - 1];
            r->idx[j - 1] = t;
        }
    int64_t per = (P + shards - 1) / shards;
    r->n_jobs = 0;
    for (int64_t s = 0; s < P; r->n_jobs++) {
        int64_t e = s;
        while (e < P && e - s < per && BT_PROMPT_SOURCE(r->idx[e]) == BT_PROMPT_SOURCE(r->idx[s]))
            e++;
        BT_ASSERT(r->n_jobs < 64);
        r->jobs[r->n_jobs] = (bt_job){.kind = "rollout",
                                     .role = BT_ROLE_ROLLOUT,
                                     .start = s,
                                     .count = e - s,
                                     .prompts = r->idx + s,
                                     .seed = s_rollout_seed(c, step, r->n_jobs)};
        s = e;
    }
    r->active = true;
    return bt_jobs_add(self, r->jobs, r->n_jobs, &r->first_task);
}

void bt_policy_rollouts_release(bt_rollouts *r) {
    bt_jobs_release(r->jobs, r->n_jobs);
    free(r->idx);
    r->idx = NULL;
    r->active = false;
}

/*  Drops every rollout in flight (a rollback): their tasks are cancelled, their prompts skipped. */
void bt_policy_rollouts_cancel(bt_controller_t *self) {
    for (int i = 0; i < S_AHEAD; i++) {
        bt_rollouts *r = &self->ahead[i];
        for (int j = 0; r->active && j < r->n_jobs; j++)
            bt_registry_cancel(self->reg, r->first_task + j);
        if (r->active)
            bt_policy_rollouts_release(r);
    }
    self->launched = self->step;
}

/*  The data position of the first prompt not yet trained: the oldest rollouts in flight hold the
    prompts after it. */
bt_mixture_position bt_policy_train_position(const bt_controller_t *self) {
    const bt_rollouts *r = &self->ahead[self->step % S_AHEAD];
    return r->active && r->step == self->step ? r->before : bt_mixture_get_position(self->mix);
}

/*  The current step's groups: launches the rollouts of the steps up to grpo.max_staleness ahead
    that are not in flight yet, then waits for the current step's; fills *batch.  *oldest gets
    the oldest policy version that sampled any of it. */
bt_status bt_policy_rollout(bt_controller_t *self, bt_rollout_batch *batch, int64_t *oldest) {
    const bt_run_config *c = self->cfg;
    if (self->launched < self->step)
        self->launched = self->step;
    while (self->launched <= self->step + c->grpo.max_staleness && self->launched < c->grpo.steps)
        BT_TRY(s_rollout_launch(self, self->launched++));
    bt_rollouts *r = &self->ahead[self->step % S_AHEAD];
    BT_ASSERT(r->active && r->step == self->step);
    bt_status st = bt_jobs_wait(self, r->jobs, r->n_jobs, r->first_task);
    bt_rollout_batch parts[64];
    *oldest = INT64_MAX;
    for (int i = 0; i < r->n_jobs; i++)
        bt_rollout_batch_init(&parts[i]);
    for (int i = 0; i < r->n_jobs && st == BT_OK; i++) {
        st = bt_batch_from_msg(r->jobs[i].result, &parts[i]);
        *oldest = parts[i].version < *oldest ? parts[i].version : *oldest;
    }
    if (st == BT_OK)
        st = bt_batch_concat(parts, r->n_jobs, batch);
    for (int i = 0; i < r->n_jobs; i++)
        bt_rollout_batch_release(&parts[i]);
    self->dropped_step = r->dropped; /* with grpo.max_staleness, later steps were drawn since */
    memcpy(self->step_weights, r->weights, sizeof self->step_weights);
    bt_policy_rollouts_release(r);
    return st;
}

/*  With grpo.dynamic_sampling, the groups whose rewards all agree (zero advantage, no gradient)
    are dropped (DAPO, Yu et al. 2025); *out is what trains.  Returns the groups kept. */
int64_t bt_policy_select(const bt_run_config *c, const bt_rollout_batch *in, bt_rollout_batch *out,
                        bt_status *st) {
    bool *keep = malloc(sizeof *keep * (size_t)(in->n_prompts + 1));
    if (!keep) {
        *st = bt_fail(BT_ENOMEM, "controller: out of memory");
        return 0;
    }
    int64_t kept = 0;
    for (int64_t g = 0; g < in->n_prompts; g++) {
        keep[g] =
            !c->grpo.dynamic_sampling ||
            !bt_grpo_group_has_zero_variance(in->rewards + g * in->group_size, in->group_size);
        kept += keep[g];
    }
    *st = bt_batch_keep_groups(in, keep, out);
    free(keep);
    return kept;
}

/*  *updated: false when dynamic sampling left nothing to train on (no update was made). */
bt_status bt_policy_train(bt_controller_t *self, const bt_rollout_batch *sampled, double lr,
                         bt_trainer_stats *out, bool *updated) {
    const bt_run_config *c = self->cfg;
    bt_rollout_batch batch;
    bt_rollout_batch_init(&batch);
    bt_status st = BT_OK;
    if (bt_policy_select(c, sampled, &batch, &st) == 0 || st != BT_OK) {
        bt_rollout_batch_release(&batch);
        *out = (bt_trainer_stats){.loss = NAN,
                                  .kl = NAN,
                                  .clip_frac = NAN,
                                  .entropy = NAN,
                                  .grad_norm = NAN}; /* nothing to learn from: no update */
        *updated = false;
        return st;
    }
    *updated = true;
    double *adv = malloc(sizeof *adv * (size_t)(batch.n + 1));
    if (!adv) {
        bt_rollout_batch_release(&batch);
        return bt_fail(BT_ENOMEM, "controller: out of memory");
    }
    bt_grpo_config gc;
    bt_config_grpo(c, &gc);
    /* advantages in float64 at the controller (DESIGN.md, step 3) */
    st = bt_grpo_advantages(batch.rewards, batch.n_prompts, batch.group_size, gc.adv_norm, adv);
    /* debug.inject_nan_at_step: once, even when a rollback replays that step */
    bool inject = c->debug.inject_nan_at_step == self->step + 1 && !self->nan_injected;
    self->nan_injected |= inject;
    bt_job job = {.kind = "train",
                 .role = BT_ROLE_TRAINER,
                 .lr = lr,
                 .publish = true,
                 .batch = &batch,
                 .adv = adv,
                 .inject_nan = inject};
    if (st == BT_OK)
        st = bt_group_run_trainer(self, &job);
    if (st == BT_OK)
        st = bt_trainer_stats_from_msg(job.result, out);
    double real = 0; /* tokens of the trained rows: what the trainer's slots hold besides padding */
    for (int64_t i = 0; i < batch.n; i++)
        real += (double)(batch.prompt_lens[i] + batch.lengths[i]);
    self->padding = st == BT_OK && out->slots > 0 ? 1.0 - real / out->slots : NAN;
    if (st == BT_OK && c->debug.log_prompts) {
        bt_jsonl line;
        bt_jsonl_init(&line);
        bt_jsonl_str(&line, "event", "trained");
        bt_jsonl_int(&line, "step", self->step + 1);
        bt_jsonl_uints(&line, "prompts", batch.indices, (size_t)batch.n_prompts);
        uint64_t *right = calloc((size_t)batch.n_prompts + 1, sizeof *right);
        for (int64_t g = 0; right && g < batch.n_prompts; g++) /* correct samples per group */
            for (int64_t j = 0; j < batch.group_size; j++)
                right[g] += batch.correct[g * batch.group_size + j];
        if (right)
            bt_jsonl_uints(&line, "correct", right, (size_t)batch.n_prompts);
        free(right);
        st = bt_runlog_event(self->log, &line);
    }
    bt_jobs_release(&job, 1);
    bt_rollout_batch_release(&batch);
    free(adv);
    return st;
}
