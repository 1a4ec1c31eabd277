/*  recovery.c — snapshots, canary checks, divergence, rollback, recovery of a lost trainer,
    checkpoints, resume; each wait is a state the policy polls (see rooms.h). */
#include "rooms.h"

double bt_recovery_train_seconds(const bt_policy *self) {
    return bt_train_clock_seconds(&self->clock, bt_now());
}

/*  The controller's state now, for a snapshot.  Evaluations pinned to older versions must have
    finished (their lines are then before metrics_size); those of the current version are listed
    to be run again by a resume. */
static void s_state_capture(bt_policy *self, double canary, bt_runstate *out) {
    *out = (bt_runstate){.step = self->step,
                         .version = self->version,
                         .cursor = bt_rollouts_train_position(self).draws,
                         .train_seconds = bt_recovery_train_seconds(self),
                         .last_reward = self->last_reward,
                         .last_accuracy = self->last_accuracy,
                         .metrics_size = bt_runlog_metrics_size(self->ctl->log),
                         .events_size = bt_runlog_events_size(self->ctl->log),
                         .global_step = self->global_step,
                         .canary_loss = canary,
                         .nan_injected = self->nan_injected,
                         .loss_ema = self->loss_ema,
                         .loss_n = self->loss_n,
                         .tokens = self->tokens,
                         .clip_high = self->clip_high,
                         .n_triggers = self->cfg->eval.n_datasets};
    memcpy(out->triggers, self->triggers, sizeof out->triggers);
    out->has_tuner = true;
    out->tuner = self->tuner;
    for (int i = 0; i < S_MAX_EVALS && out->n_pending < BT_RUNSTATE_MAX_PENDING; i++) {
        const bt_evaluation *ev = &self->evals[i];
        if (!ev->active || strcmp(ev->phase, "rl") != 0)
            continue;
        bt_runstate_eval *p = &out->pending[out->n_pending++];
        *p = (bt_runstate_eval){.dataset = ev->ds, .step = ev->step};
        snprintf(p->trigger, sizeof p->trigger, "%s", ev->trigger);
    }
}

/*  Puts the controller back to a captured state; the cursor only with restore_cursor (a rollback
    keeps it, so the batches since the snapshot, the offending one included, are skipped). */
void bt_recovery_apply(bt_policy *self, const bt_runstate *st, bool restore_cursor) {
    self->step = st->step;
    if (isfinite(st->clip_high))
        self->clip_high = st->clip_high;
    if (restore_cursor) { /* a state.json without data.json (one source): its cursor */
        bt_mixture_position pos = {.draws = st->cursor};
        pos.drawn[0] = st->cursor;
        bt_mixture_set_position(self->mix, &pos);
        /* metrics.jsonl is cut back to the state too (a rollback keeps the lines it skipped, and
           counts on); a state.json from before global_step: its GRPO steps */
        self->global_step = st->global_step >= 0 ? st->global_step : st->step;
    }
    self->last_reward = st->last_reward;
    self->last_accuracy = st->last_accuracy;
    self->nan_injected |= st->nan_injected;
    self->loss_ema = st->loss_ema;
    self->loss_n = st->loss_n;
    self->tokens = st->tokens;
    for (int i = 0; i < st->n_triggers && i < self->cfg->eval.n_datasets; i++) {
        bt_trigger_config cfg = self->triggers[i].cfg; /* the config's, not the file's */
        self->triggers[i] = st->triggers[i];
        self->triggers[i].cfg = cfg;
    }
    if (st->has_tuner) { /* the tuner's values and counters; its rules are the config's */
        bt_tuner_config cfg = self->tuner.cfg;
        self->tuner = st->tuner;
        self->tuner.cfg = cfg;
        double total = 0;
        for (int k = 0; k < cfg.n_sources; k++)
            total += self->tuner.weights[k];
        for (int k = 0; k < cfg.n_sources && !(total > 0); k++) /* saved before the mixture */
            self->tuner.weights[k] = cfg.start_weights[k];
    }
}

/*  BT_PENDING while the checkpoint writer has a save in flight (a save of a large model can take
    longer than the workers wait for a word from the controller: the loop serves them meanwhile). */
bt_status bt_recovery_writer_idle(bt_controller_t *self) {
    return self->writer && bt_ckpt_writer_is_busy(self->writer) ? BT_PENDING : BT_OK;
}

/*  The trainer's whole state (weights, AdamW moments, canary loss), kept with the policy's state
    as the point a rollback returns to and a checkpoint writes.  Evaluations pinned to older
    versions finish first (their lines then come before metrics_size); a save in flight may
    still read the old snapshot's tensors, so the new one is installed once the writer is idle. */
bt_status bt_recovery_snapshot(bt_policy *self) {
    bt_status st = BT_OK;
    switch (self->snap_state) {
    case BT_SNAP_IDLE:
        self->snap_state = BT_SNAP_EVALS;
        /* fall through */
    case BT_SNAP_EVALS:
        for (int i = 0; i < S_MAX_EVALS; i++)
            if (self->evals[i].active && self->evals[i].version < self->version)
                BT_TRY(bt_evals_wait(self, &self->evals[i]));
        bt_group_begin(self, &(bt_job){.kind = BT_JOB_SNAPSHOT, .role = BT_ROLE_TRAINER});
        self->snap_state = BT_SNAP_JOB;
        /* fall through */
    case BT_SNAP_JOB:
        st = bt_group_poll(self);
        if (st == BT_OK)
            st =
                bt_msg_get_double(self->tr.job.result, "canary_loss", 0, 1e300, &self->snap_canary);
        if (st == BT_PENDING)
            return st;
        if (st == BT_OK) {
            self->snap_new = self->tr.job.result;
            self->tr.job.result = NULL;
        }
        bt_group_release(self);
        if (st != BT_OK) {
            self->snap_state = BT_SNAP_IDLE;
            return st;
        }
        self->snap_state = BT_SNAP_WRITER;
        /* fall through */
    case BT_SNAP_WRITER: BT_TRY(bt_recovery_writer_idle(self->ctl)); break;
    }
    bt_msg_destroy(&self->snap);
    self->snap = self->snap_new;
    self->snap_new = NULL;
    self->snap_state = BT_SNAP_IDLE;
    self->saved.canary_loss = self->snap_canary;
    self->rollbacks = 0;
    return bt_recovery_capture(self);
}

bt_status bt_recovery_capture(bt_policy *self) {
    s_state_capture(self, self->saved.canary_loss, &self->saved);
    bt_mixture_position pos = bt_rollouts_train_position(self);
    free(self->saved_data);
    self->saved_data = bt_mixture_to_json(self->mix, &pos);
    return self->saved_data ? BT_OK : bt_fail(BT_ENOMEM, "controller: out of memory");
}

/*  Loads a trainer state (the in-memory snapshot, one read from a checkpoint, or with NULL the
    state every trainer starts from) as version, and checks the canary loss the trainer computes
    against the one recorded with it.  The first call queues the restore; BT_PENDING until done. */
bt_status bt_recovery_restore(bt_policy *self, const bt_msg_t *state, int64_t version,
                              double canary) {
    if (self->tr.state == BT_TRAINER_IDLE)
        bt_group_begin(self, &(bt_job){.kind = BT_JOB_RESTORE,
                                       .role = BT_ROLE_TRAINER,
                                       .publish = true,
                                       .state = state,
                                       .restore_version = version});
    BT_TRY(bt_group_poll(self));
    double got = NAN;
    bt_status st = bt_msg_get_double(self->tr.job.result, "canary_loss", 0, 1e300, &got);
    bt_group_release(self);
    BT_TRY(st);
    if (state && !(fabs(got - canary) <= 1e-9 * fmax(1.0, fabs(canary))))
        return bt_fail(BT_EINVAL,
                       "controller: the restored trainer's canary loss is %.17g, the checkpoint "
                       "recorded %.17g",
                       got, canary);
    return BT_OK;
}

/*  The evaluations a snapshot or checkpoint listed as in flight, started again (every slot is
    free: the policy's evaluations were cancelled or none had started). */
bt_status bt_recovery_pending_evals(bt_policy *self, const bt_runstate *run) {
    for (int i = 0; i < run->n_pending; i++)
        if (run->pending[i].dataset >= 0 && run->pending[i].dataset < self->cfg->eval.n_datasets)
            BT_TRY(bt_evals_start(self, run->pending[i].dataset, "rl", run->pending[i].trigger,
                                  run->pending[i].step, NULL));
    return BT_OK;
}

/*  BT_POLICY_ROLLBACK, once restored: back at the last snapshot (at most S_ROLLBACK_EVERY steps
    ago), skipping the batches since, the offending one included. */
static bt_status s_rolled_back(bt_policy *self) {
    uint64_t skipped_from = self->saved.cursor,
             skipped_to = bt_mixture_get_position(self->mix).draws;
    bt_recovery_apply(self, &self->saved, false);
    bt_rollouts_cancel(self); /* sampled by discarded versions: skipped too */
    bt_saves_rewind(self->ctl, self->step);
    bt_jsonl line;
    bt_ctl_event_line(self->ctl, &line, "rollback");
    bt_jsonl_int(&line, "from_step", self->lost_from);
    bt_jsonl_int(&line, "to_step", self->step);
    bt_jsonl_str(&line, "reason", self->reason);
    bt_jsonl_int(&line, "skipped_from", (int64_t)skipped_from);
    bt_jsonl_int(&line, "skipped_to", (int64_t)skipped_to);
    return bt_runlog_event(self->ctl->log, &line);
}

/*  BT_POLICY_RECOVER, once restored: the trainer lost the training state (its process died, or a
    trainer that never held it took over) and was restored from the in-memory snapshot (at most
    S_ROLLBACK_EVERY steps back); the steps since run again from there, with the same prompts and
    seeds, so the run writes exactly the metrics it would have written (metrics.jsonl is cut
    back to the snapshot, as on resume).  A `trainer_restored` event says from where and why. */
static bt_status s_recovered(bt_policy *self) {
    bt_recovery_apply(self, &self->saved, true);
    bt_mixture_position pos;
    BT_TRY(bt_mixture_from_json(self->mix, self->saved_data, "the snapshot", &pos));
    BT_TRY(bt_runlog_drop_metrics(self->ctl->log, self->saved.metrics_size, self->variant_name));
    bt_saves_rewind(self->ctl, self->step);
    self->launched = self->step;
    self->epoch_seen = bt_policy_epoch(self);
    self->epoch_due = false;
    while (self->sc_n > 0 && self->sc_steps[self->sc_n - 1] > self->step)
        self->sc_n--;
    while (self->sc_record.n > 0 &&
           self->sc_record.entries[self->sc_record.n - 1].made_at > self->step)
        self->sc_record.n--;
    self->ctl->stats.restores++;
    bt_jsonl line;
    bt_ctl_event_line(self->ctl, &line, "trainer_restored");
    bt_jsonl_str(&line, "from", "snapshot");
    bt_jsonl_int(&line, "step", self->step);
    bt_jsonl_int(&line, "lost_steps", self->lost_from - self->step);
    bt_jsonl_str(&line, "reason", self->reason);
    const bt_worker_info *t = bt_registry_worker(self->ctl->reg, self->ctl->trainer);
    if (t && !self->store)
        bt_jsonl_str(&line, "trainer", t->name);
    BT_TRY(bt_runlog_event(self->ctl->log, &line));
    bt_log(BT_LOG_WARN, "controller: %s: the trainer was restored from the snapshot of step %lld",
           self->reason, (long long)self->step);
    return bt_recovery_pending_evals(self, &self->saved);
}

bt_status bt_recovery_begin(bt_policy *self, bt_policy_state kind, const char *reason) {
    snprintf(self->reason, sizeof self->reason, "%s", reason);
    if (kind == BT_POLICY_ROLLBACK) {
        if (!self->snap)
            return bt_fail(BT_EIO, "controller: %s, and there is no snapshot to roll back to",
                           reason);
        if (++self->rollbacks > S_MAX_ROLLBACKS)
            return bt_fail(BT_EIO, "controller: %s, after %d rollbacks to step %lld", reason,
                           S_MAX_ROLLBACKS, (long long)self->saved.step);
        self->lost_from = self->step + 1;
    } else {
        if (!self->snap)
            return bt_fail(BT_ESTATE, "%s, and there is no snapshot to restore it from",
                           self->reason);
        if (++self->recoveries > S_MAX_RECOVERIES)
            return bt_fail(BT_ESTATE, "%s, after %d restores of the trainer in this run",
                           self->reason, S_MAX_RECOVERIES);
        self->lost_from = self->step;
        bt_rollouts_cancel(self);
        bt_evals_cancel(self);
    }
    if (self->tr.state != BT_TRAINER_IDLE)
        bt_group_abort(self);
    self->snap_state = BT_SNAP_IDLE;
    bt_msg_destroy(&self->snap_new);
    self->state = kind;
    return BT_OK;
}

/*  The restore of a rollback gives the weights a fresh version number (evaluations may still hold
    the discarded ones); a recovery returns to the snapshot's own version. */
bt_status bt_recovery_poll(bt_policy *self) {
    bool rollback = self->state == BT_POLICY_ROLLBACK;
    BT_TRY(bt_recovery_restore(self, self->snap, rollback ? self->version + 1 : self->saved.version,
                               self->saved.canary_loss));
    return rollback ? s_rolled_back(self) : s_recovered(self);
}

/*  Why the step's statistics call for a rollback, or NULL. */
const char *bt_recovery_diverged(bt_policy *self, const bt_trainer_stats *ts, char *buf,
                                 size_t len) {
    if (!isfinite(ts->loss) || !isfinite(ts->grad_norm)) {
        snprintf(buf, len, "non-finite %s at step %lld", isfinite(ts->loss) ? "gradient" : "loss",
                 (long long)self->step + 1);
        return buf;
    }
    double f = self->cfg->checkpoint.spike_factor, a = fabs(ts->loss);
    if (f > 0 && self->loss_n >= 5 && self->loss_ema > 0 && a > f * self->loss_ema) {
        /* a mean of 0 (every group's rewards equal so far) gives no scale to judge a spike by */
        snprintf(buf, len, "loss %.4g at step %lld is %.1f times its running mean", ts->loss,
                 (long long)self->step + 1, a / self->loss_ema);
        return buf;
    }
    self->loss_ema = self->loss_n ? 0.9 * self->loss_ema + 0.1 * a : a;
    self->loss_n++;
    return NULL;
}

/*  After a step (BT_POLICY_SAVE): the epoch boundaries of the epoch source (an event each, and
    a full checkpoint due when checkpoint.full_every_epochs says so: saves.c cuts it at the gate),
    and the in-memory snapshot every S_ROLLBACK_EVERY steps. */
bt_status bt_recovery_after_step(bt_policy *self) {
    const bt_config *c = self->cfg;
    if (self->save_stage == 0) {
        int64_t epoch = bt_policy_epoch(self), before = self->epoch_seen,
                every = c->checkpoint.full_every_epochs;
        self->epoch_seen = epoch;
        for (int64_t e = before + 1; e <= epoch && self->epoch_size; e++) {
            bt_jsonl line;
            bt_ctl_event_line(self->ctl, &line, "epoch_end");
            bt_jsonl_int(&line, "epoch", e);
            bt_jsonl_int(&line, "step", self->step);
            bt_jsonl_str(&line, "source", bt_config_source_name(c, bt_config_epoch_source(c)));
            BT_TRY(bt_runlog_event(self->ctl->log, &line));
        }
        self->epoch_due |= every > 0 && epoch / every > before / every;
        self->save_stage = 1;
    }
    if (self->step % S_ROLLBACK_EVERY == 0)
        BT_TRY(bt_recovery_snapshot(self));
    self->save_stage = 0;
    return BT_OK;
}
