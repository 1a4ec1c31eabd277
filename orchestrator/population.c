/*  population.c — the policies together: the step gate (variants advance in lockstep, each step
    overlapping the others'), population-based training, scaling-law early stopping, and the
    scaling-law fit each policy's held-out losses feed; see rooms.h. */
#include "rooms.h"

#include "baton/rng.h"

/*  A held-out loss of scaling.dataset at step: it settles the predictions made for this step
    (a `scaling_error` event each), then joins the points the law is fitted to, and with enough of
    them the loss at the last GRPO step is predicted under the planned schedule (the configured
    one, scaled by the tuner's current learning-rate factor): a `scaling_prediction` event. */
bt_status bt_population_scaling_observe(bt_policy *self, int64_t step, double loss) {
    const bt_config *c = self->cfg;
    int64_t last = c->grpo.steps;
    if (bt_scaling_record_measure(&self->sc_record, step, loss) > 0)
        for (int i = 0; i < self->sc_record.n; i++) {
            const bt_scaling_prediction *p = &self->sc_record.entries[i];
            if (p->target != step || !p->measured)
                continue;
            bt_jsonl line;
            bt_ctl_event_line(self->ctl, &line, "scaling_error");
            bt_jsonl_str(&line, "variant", self->variant_name);
            bt_jsonl_int(&line, "made_at", p->made_at);
            bt_jsonl_int(&line, "step", p->target);
            bt_jsonl_num(&line, "predicted", p->predicted);
            bt_jsonl_num(&line, "measured", p->loss);
            bt_jsonl_num(&line, "error", p->error);
            BT_TRY(bt_runlog_event(self->ctl->log, &line));
        }
    if (step < 1 || step >= last || self->sc_n >= S_MAX_POINTS || !(loss > 0))
        return BT_OK;
    self->sc_steps[self->sc_n] = step;
    self->sc_loss[self->sc_n++] = loss;
    if (self->sc_n < c->scaling.min_points)
        return BT_OK;
    bt_lr_schedule sched;
    bt_config_lr(c, BT_CONFIG_PHASE_GRPO, &sched);
    double *lr = malloc(sizeof *lr * (size_t)last * 3);
    if (!lr)
        return bt_fail(BT_ENOMEM, "controller: out of memory");
    double *s1 = lr + last, *s2 = s1 + last, scale = bt_tuner_lr_scale(&self->tuner);
    for (int64_t s = 0; s < last; s++)
        lr[s] = bt_lr_at(&sched, s) * scale;
    bt_scaling_areas(lr, last, sched.warmup_steps < last ? sched.warmup_steps : last, s1, s2);
    bt_scaling_fit_config fc;
    bt_scaling_fit_config_init(&fc);
    bt_scaling_fit fit;
    bt_status st =
        bt_scaling_fit_curve(s1, s2, last, self->sc_steps, self->sc_loss, self->sc_n, &fc, &fit);
    double predicted = st == BT_OK ? bt_scaling_predict(&fit.p, s1, s2, last) : NAN;
    free(lr);
    if (st != BT_OK) { /* a curve the law cannot take is no reason to stop the run */
        bt_ctl_event(self->ctl, "scaling_failed", "error", bt_last_error());
        return BT_OK;
    }
    if (isfinite(predicted) && self->sc_record.n < BT_SCALING_RECORD_MAX)
        BT_TRY(bt_scaling_record_add(&self->sc_record, step, last, predicted));
    bt_jsonl line;
    bt_ctl_event_line(self->ctl, &line, "scaling_prediction");
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_int(&line, "step", step);
    bt_jsonl_int(&line, "target", last);
    bt_jsonl_num(&line, "predicted", predicted);
    bt_jsonl_int(&line, "points", self->sc_n);
    bt_jsonl_num(&line, "L0", fit.p.L0);
    bt_jsonl_num(&line, "A", fit.p.A);
    bt_jsonl_num(&line, "alpha", fit.p.alpha);
    bt_jsonl_num(&line, "C", fit.p.C);
    bt_jsonl_num(&line, "rms", fit.rms);
    bt_jsonl_bool(&line, "converged", fit.converged);
    bt_jsonl_bool(&line, "c_identified", fit.c_identified);
    return bt_runlog_event(self->ctl->log, &line);
}

/* ---- population-based training ----------------------------------------------------------------
 */

/*  A uniform draw in [0, 1) from PBT's splitmix64 stream, reproducible from run.seed. */
static double s_draw(uint64_t *state) {
    return bt_rng_unit(bt_rng_next(state));
}

/*  BT_POLICY_EXPLOIT (Jaderberg et al. 2017): the policy's trainer takes the top one's whole state
    (weights, AdamW moments, KL reference; checked by the canary loss) and its KL coefficient and
    temperature, then trains at peak learning rate exploit_lr; a `pbt` event records it with both
    policies' accuracies and rates.  Stages: the top one's snapshot, the restore, the new
    snapshot a rollback returns to. */
/*  One `pbt_explore` event per key other than the learning rate (the `pbt` event has its) that
    pbt.explore lists: the value before, the top policy's, the new one, and how it was drawn. */
static bt_status s_explore_events(bt_policy *self, const bt_policy *top, const double *before) {
    const double from[BT_PBT_KEY_COUNT] = {top->tuner.lr, top->tuner.kl_coef,
                                           top->tuner.temperature, top->clip_high};
    for (int k = BT_PBT_LR + 1; k < BT_PBT_KEY_COUNT; k++) {
        if (!(self->cfg->pbt.explore_mask & (1 << k)))
            continue;
        bt_jsonl line;
        bt_ctl_event_line(self->ctl, &line, "pbt_explore");
        bt_jsonl_int(&line, "step", self->step);
        bt_jsonl_str(&line, "variant", self->variant_name);
        bt_jsonl_str(&line, "from", top->variant_name);
        bt_jsonl_str(&line, "param", bt_pbt_key_name((bt_pbt_key)k));
        bt_jsonl_num(&line, "before", before[k]);
        bt_jsonl_num(&line, "from_value", from[k]);
        bt_jsonl_num(&line, "after", self->exploit_value[k]);
        bt_jsonl_str(&line, "explore", self->exploit_hows[k]);
        BT_TRY(bt_runlog_event(self->ctl->log, &line));
    }
    return BT_OK;
}

bt_status bt_population_exploit_poll(bt_policy *self) {
    bt_policy *top = self->exploit_from;
    if (self->exploit_stage == 0) {
        BT_TRY(bt_recovery_snapshot(top)); /* top's whole trainer state, now */
        self->exploit_stage = 1;
    }
    if (self->exploit_stage == 1) {
        BT_TRY(bt_recovery_restore(self, top->snap, self->version + 1, top->saved.canary_loss));
        double accuracy = self->last_accuracy, reward = self->last_reward, lr = self->tuner.lr;
        double before[BT_PBT_KEY_COUNT] = {self->tuner.lr, self->tuner.kl_coef,
                                           self->tuner.temperature, self->clip_high};
        /* top's tuned values, then the explored ones (pbt.explore; the others are top's) */
        self->tuner.lr = self->exploit_value[BT_PBT_LR];
        self->tuner.kl_coef = self->exploit_value[BT_PBT_KL_COEF];
        self->tuner.temperature = self->exploit_value[BT_PBT_TEMPERATURE];
        self->clip_high = self->exploit_value[BT_PBT_CLIP_HIGH];
        BT_TRY(s_explore_events(self, top, before));
        self->last_accuracy = top->last_accuracy;
        self->last_reward = top->last_reward;
        bt_jsonl *line = &self->exploit_line;
        bt_ctl_event_line(self->ctl, line, "pbt");
        bt_jsonl_int(line, "step", self->step);
        bt_jsonl_str(line, "variant", self->variant_name);
        bt_jsonl_str(line, "from", top->variant_name);
        bt_jsonl_num(line, "accuracy", accuracy);
        bt_jsonl_num(line, "from_accuracy", top->last_accuracy);
        bt_jsonl_num(line, "reward", reward);
        bt_jsonl_num(line, "from_reward", top->last_reward);
        bt_jsonl_num(line, "lr_before", lr);
        bt_jsonl_num(line, "from_lr", top->tuner.lr);
        bt_jsonl_num(line, "lr_after", self->exploit_lr);
        bt_jsonl_str(line, "explore", self->exploit_how);
        self->exploit_stage = 2;
    }
    BT_TRY(bt_recovery_snapshot(self)); /* a rollback now returns to the copy */
    self->exploit_stage = 0;
    return bt_runlog_event(self->ctl->log, &self->exploit_line);
}

/*  The ranking, once every policy's evaluations are written: by pbt.metric, the held-out accuracy
    of the latest evaluation or the last step's mean reward; best first, ties in the config's
    order. */
static void s_rank(bt_controller_t *self) {
    const bt_config *c = self->cfg;
    int n = self->n_pol;
    double *acc = self->pbt_score;
    int *order = self->pbt_order;
    for (int k = 0; k < n; k++) {
        double a = c->pbt.metric == 1 ? self->pol[k]->last_reward : self->pol[k]->last_accuracy;
        acc[k] = isfinite(a) ? a : -1.0;
        order[k] = k;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && acc[order[j]] > acc[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

/*  The next exploit of the round: each policy in the bottom quantile (at least one) copies one of
    the top quantile drawn uniformly, unless it is already as good, and explores: with
    pbt.resample_probability a learning rate drawn log-uniformly from [pbt.lr_min, pbt.lr_max],
    else the top one's times 0.8 or 1.2 (kept in range).  BT_OK when the round is over. */
/*  An explored value of key from the top policy's `from`: with pbt.resample_probability (u) a
    fresh draw (v) in the key's range, log-uniform for the learning rate and the KL coefficient,
    uniform for the temperature and the clip; else from x0.8 or x1.2 (v < 0.5 or not), kept in
    the range. */
static double s_explore(const bt_config *c, bt_pbt_key key, double from, double u, double v,
                        const char **how) {
    const struct {
        double lo, hi;
        bool log;
    } r[BT_PBT_KEY_COUNT] = {
        [BT_PBT_LR] = {c->pbt.lr_min, c->pbt.lr_max, true},
        [BT_PBT_KL_COEF] = {c->pbt.kl_coef_min, c->pbt.kl_coef_max, true},
        [BT_PBT_TEMPERATURE] = {c->pbt.temperature_min, c->pbt.temperature_max, false},
        [BT_PBT_CLIP_HIGH] = {c->pbt.clip_high_min, c->pbt.clip_high_max, false}};
    double lo = r[key].lo, hi = r[key].hi;
    if (u < c->pbt.resample_probability) {
        *how = "resample";
        return r[key].log ? exp(log(lo) + v * (log(hi) - log(lo))) : lo + v * (hi - lo);
    }
    *how = v < 0.5 ? "x0.8" : "x1.2";
    return fmin(fmax(from * (v < 0.5 ? 0.8 : 1.2), lo), hi);
}

/*  The next exploit of the round: each policy in the bottom quantile (at least one) copies one of
    the top quantile drawn uniformly, unless it is already as good, and explores each key of
    pbt.explore (s_explore).  The draws: the top one, then the learning rate's two (drawn whether
    it is explored or not, so a round of the default explores what it always did), then two for
    each other key explored, in bt_pbt_key order.  BT_OK when the round is over. */
static bt_status s_pbt_next(bt_controller_t *self) {
    const bt_config *c = self->cfg;
    int n = self->n_pol, q = (int)floor(n * c->pbt.quantile), mask = c->pbt.explore_mask;
    q = q < 1 ? 1 : q;
    while (self->pbt_next < n) {
        int b = self->pbt_next++;
        if (b < n - q)
            continue;
        int bottom = self->pbt_order[b], top = self->pbt_order[(int)(s_draw(&self->pbt_rng) * q)];
        const bt_policy *t = self->pol[top];
        double from[BT_PBT_KEY_COUNT] = {t->tuner.lr, t->tuner.kl_coef, t->tuner.temperature,
                                         t->clip_high};
        double u[BT_PBT_KEY_COUNT], v[BT_PBT_KEY_COUNT];
        for (int k = 0; k < BT_PBT_KEY_COUNT; k++)
            if (k == BT_PBT_LR || (mask & (1 << k))) {
                u[k] = s_draw(&self->pbt_rng);
                v[k] = s_draw(&self->pbt_rng);
            }
        if (self->pbt_score[bottom] >= self->pbt_score[top])
            continue;
        bt_policy *p = self->pol[bottom];
        for (int k = 0; k < BT_PBT_KEY_COUNT; k++) {
            p->exploit_value[k] = from[k]; /* a key not explored is copied */
            p->exploit_hows[k] = "copy";
            if (mask & (1 << k))
                p->exploit_value[k] =
                    s_explore(c, (bt_pbt_key)k, from[k], u[k], v[k], &p->exploit_hows[k]);
        }
        p->exploit_from = self->pol[top];
        p->exploit_lr = p->exploit_value[BT_PBT_LR];
        p->exploit_how = p->exploit_hows[BT_PBT_LR];
        p->exploit_stage = 0;
        p->state = BT_POLICY_EXPLOIT;
        return BT_PENDING;
    }
    return BT_OK;
}

/*  A PBT round in progress: every policy's evaluations finish, then one exploit after another. */
static bt_status s_pbt(bt_controller_t *self) {
    if (self->pop_state == BT_POPULATION_PBT_EVALS) {
        for (int k = 0; k < self->n_pol; k++)
            BT_TRY(bt_evals_wait(self->pol[k], NULL));
        s_rank(self);
        self->pbt_next = 0;
        self->pbt_rng = (uint64_t)self->cfg->run.seed * 1000003u + (uint64_t)self->pbt_step;
        self->pop_state = BT_POPULATION_PBT_COPY;
    }
    for (int k = 0; k < self->n_pol; k++)
        if (self->pol[k]->state == BT_POLICY_EXPLOIT)
            return BT_PENDING; /* the exploit under way */
    BT_TRY(s_pbt_next(self));
    self->pop_state = BT_POPULATION_RUNNING;
    return BT_OK;
}

/*  PBT is due when every policy (none done) stands at the gate at the same multiple of
    pbt.ready_steps, past the last round. */
static bool s_pbt_due(const bt_controller_t *self, int64_t step) {
    const bt_config *c = self->cfg;
    if (!c->pbt.enabled || self->n_pol < 2 || step <= self->pbt_step ||
        step % c->pbt.ready_steps != 0)
        return false;
    for (int k = 0; k < self->n_pol; k++)
        if (self->pol[k]->state != BT_POLICY_GATE || self->pol[k]->step != step)
            return false;
    return true;
}

/* ---- early stopping -------------------------------------------------------------------------- */

/*  Scaling-law early stopping (scaling.stop_margin > 0, ASHA-like): once every policy still
    training has a prediction of its final held-out loss, one predicted worse than the best by more
    than the margin (relative) stops (a `variant_stopped` event). */
static bt_status s_early_stop(bt_controller_t *self) {
    const bt_config *c = self->cfg;
    double margin = c->scaling.stop_margin, predicted[BT_CONFIG_MAX_VARIANTS];
    int n = self->n_pol, live = 0;
    if (!c->scaling.enabled || !(margin > 0) || n < 2)
        return BT_OK;
    for (int k = 0; k < n; k++) {
        const bt_policy *p = self->pol[k];
        const bt_scaling_record *r = &p->sc_record;
        bool done = p->state == BT_POLICY_DONE || p->state == BT_POLICY_FINAL;
        predicted[k] = done || r->n == 0 ? NAN : r->entries[r->n - 1].predicted;
        if (!done && !isfinite(predicted[k]))
            return BT_OK; /* not every one has a prediction yet */
        live += !done;
    }
    bool stop[BT_CONFIG_MAX_VARIANTS];
    if (live < 2 || bt_scaling_early_stop(predicted, n, margin, stop) == 0)
        return BT_OK;
    double best = INFINITY;
    for (int k = 0; k < n; k++)
        best = isfinite(predicted[k]) && predicted[k] < best ? predicted[k] : best;
    for (int k = 0; k < n; k++) {
        if (!stop[k])
            continue;
        bt_policy *p = self->pol[k];
        bt_jsonl line;
        bt_ctl_event_line(self, &line, "variant_stopped");
        bt_jsonl_str(&line, "variant", p->variant_name);
        bt_jsonl_int(&line, "step", p->step);
        bt_jsonl_num(&line, "predicted", predicted[k]);
        bt_jsonl_num(&line, "best_predicted", best);
        bt_jsonl_num(&line, "margin", margin);
        BT_TRY(bt_runlog_event(self->log, &line));
        p->stopped = true;
        p->state = BT_POLICY_DONE;
    }
    return BT_OK;
}

/* ---- the gate ----------------------------------------------------------------------------------
 */

/*  Whether every live policy stands at the gate (none is mid-step, evaluating its step, saving or
    copying), the least step among them into *least, and whether each is at its last step. */
static bool s_barrier(const bt_controller_t *self, int64_t *least, bool *last) {
    bool barrier = true;
    *least = INT64_MAX;
    *last = true;
    for (int k = 0; k < self->n_pol; k++) {
        const bt_policy *p = self->pol[k];
        bool done = p->state == BT_POLICY_DONE || p->state == BT_POLICY_FINAL;
        /* a policy past its step's record (evaluations, save) counts the step already, but has
           not finished it */
        barrier &= done || p->state == BT_POLICY_GATE;
        if (done)
            continue;
        *least = p->step < *least ? p->step : *least;
        *last &= p->step >= p->cfg->grpo.steps;
    }
    return barrier;
}

bt_status bt_population_advance(bt_controller_t *self) {
    if (self->pop_state != BT_POPULATION_RUNNING)
        BT_TRY(s_pbt(self));
    bool started = true;
    for (int k = 0; k < self->n_pol; k++)
        started &= self->pol[k]->state >= BT_POLICY_GATE;
    int64_t least;
    bool last;
    if (!started || !s_barrier(self, &least, &last)) /* every warm start (or resume) first */
        return BT_OK;
    self->all_started = true;
    if (least == INT64_MAX)
        return BT_OK;     /* every policy is done */
    bool together = true; /* the checkpoint of a step is cut with every live policy at it */
    for (int k = 0; k < self->n_pol; k++)
        together &= self->pol[k]->state != BT_POLICY_GATE || self->pol[k]->step == least;
    if (together)
        BT_TRY(bt_saves_cut(self, least, last));
    if (!s_barrier(self, &least, &last)) /* a policy lost its trainer while snapshotting */
        return BT_OK;
    for (int k = 0; k < self->n_pol; k++) { /* past its last step: its final state */
        bt_policy *p = self->pol[k];
        if (p->state == BT_POLICY_GATE && p->step == least && p->step >= p->cfg->grpo.steps)
            p->state = BT_POLICY_FINAL;
    }
    if (s_pbt_due(self, least)) {
        self->pbt_step = least;
        self->pop_state = BT_POPULATION_PBT_EVALS;
        return s_pbt(self);
    }
    if (self->steps_done != self->early_checked) { /* after each step, as the old loop did */
        self->early_checked = self->steps_done;
        BT_TRY(s_early_stop(self));
    }
    for (int k = 0; k < self->n_pol; k++) { /* lockstep: a step only once all made the last */
        bt_policy *p = self->pol[k];
        if (p->state == BT_POLICY_GATE && p->step == least && p->step < p->cfg->grpo.steps)
            bt_policy_open_gate(p);
    }
    return BT_OK;
}
