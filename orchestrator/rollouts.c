/*  rollouts.c — the asynchronous ring of a policy's rollouts: each step's prompts drawn from the
    mixture, sharded over the rollout workers, launched up to grpo.max_staleness steps ahead;
    see rooms.h. */
#include "rooms.h"

/*  A rollout job's seed: (run.seed, step) above the low BT_JOB_SEED_BITS, which number the
    job; computed unsigned and kept within a wire integer's 53 bits (a large run.seed overflowed).
 */
static int64_t s_rollout_seed(const bt_config *c, int64_t step, int job) {
    uint64_t x = ((uint64_t)c->run.seed * 1000003u + (uint64_t)step) * 64u + (uint64_t)job;
    return (int64_t)(x & ((UINT64_C(1) << 53) - 1));
}

/*  Queues the rollouts of step `step` (its prompts are the next P of the training stream),
    sharded over the configured rollout workers; they run while the policy does other work. */
static bt_status s_rollout_launch(bt_policy *self, int64_t step) {
    const bt_config *c = self->cfg;
    bt_rollouts *r = &self->ahead[step % S_AHEAD];
    BT_ASSERT(!r->active);
    int64_t P = c->grpo.prompts_per_step;
    int shards = (int)(c->workers.rollout < 1 ? 1 : c->workers.rollout);
    if (shards > P)
        shards = (int)P;
    if (shards > S_MAX_ROLLOUT_JOBS)
        shards = S_MAX_ROLLOUT_JOBS;
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
        bt_ctl_event_line(self->ctl, &line, "dropped");
        bt_jsonl_int(&line, "step", step + 1);
        bt_jsonl_uints(
            &line, "prompts", dropped,
            (size_t)(n_dropped < S_MAX_DROPPED_LOGGED ? n_dropped : S_MAX_DROPPED_LOGGED));
        BT_TRY(bt_runlog_event(self->ctl->log, &line));
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
        BT_ASSERT(r->n_jobs < S_MAX_ROLLOUT_JOBS);
        r->jobs[r->n_jobs] = (bt_job){.kind = BT_JOB_ROLLOUT,
                                      .role = BT_ROLE_ROLLOUT,
                                      .start = s,
                                      .count = e - s,
                                      .prompts = r->idx + s,
                                      .seed = s_rollout_seed(c, step, r->n_jobs)};
        s = e;
    }
    r->active = true;
    return bt_jobs_submit(self, &r->set, r->jobs, r->n_jobs);
}

void bt_rollouts_release(bt_rollouts *r) {
    bt_jobs_release(r->jobs, r->n_jobs);
    free(r->idx);
    r->idx = NULL;
    r->active = false;
}

/*  Drops every rollout in flight (a rollback): their tasks are cancelled, their prompts skipped. */
void bt_rollouts_cancel(bt_policy *self) {
    for (int i = 0; i < S_AHEAD; i++) {
        bt_rollouts *r = &self->ahead[i];
        if (!r->active)
            continue;
        bt_jobs_cancel(self->ctl, r->n_jobs, r->set.first);
        bt_rollouts_release(r);
    }
    self->launched = self->step;
}

/*  The data position of the first prompt not yet trained: the oldest rollouts in flight hold the
    prompts after it. */
bt_mixture_position bt_rollouts_train_position(const bt_policy *self) {
    const bt_rollouts *r = &self->ahead[self->step % S_AHEAD];
    return r->active && r->step == self->step ? r->before : bt_mixture_get_position(self->mix);
}

bt_status bt_rollouts_launch_ahead(bt_policy *self) {
    const bt_config *c = self->cfg;
    if (self->launched < self->step)
        self->launched = self->step;
    while (self->launched <= self->step + c->grpo.max_staleness && self->launched < c->grpo.steps)
        BT_TRY(s_rollout_launch(self, self->launched++));
    return BT_OK;
}

/*  The current step's groups, once its rollouts are done (BT_PENDING before): *batch filled,
 *oldest the oldest policy version that sampled any of it. */
bt_status bt_rollouts_collect(bt_policy *self, bt_rollout_batch *batch, int64_t *oldest) {
    bt_rollouts *r = &self->ahead[self->step % S_AHEAD];
    BT_ASSERT(r->active && r->step == self->step);
    bt_status st = bt_jobs_poll(self, &r->set);
    if (st == BT_PENDING)
        return st;
    bt_rollout_batch parts[S_MAX_ROLLOUT_JOBS];
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
    bt_rollouts_release(r);
    return st;
}
