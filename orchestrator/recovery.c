/*  recovery.c — snapshots, canary checks, divergence, rollback, recovery of a lost trainer,
    checkpoints, resume; each wait is a state the policy polls (see rooms.h). */
#include "rooms.h"

double bt_recovery_train_seconds(const bt_policy *self) {
    return bt_train_clock_seconds(&self->clock, bt_now());
}

/*  The controller's state now, for a snapshot.  Evaluations pinned to older versions must have
    finished (their lines are then before metrics_size); those of the current version are listed
    to be run again by a resume. */
static void s_state_capture(bt_policy *self, double canary, bt_run_state *out) {
    *out = (bt_run_state){.step = self->step,
                          .version = self->version,
                          .cursor = bt_rollouts_train_position(self).draws,
                          .train_seconds = bt_recovery_train_seconds(self),
                          .last_reward = self->last_reward,
                          .last_accuracy = self->last_accuracy,
                          .metrics_size = bt_runlog_metrics_size(self->ctl->log),
                          .events_size = bt_runlog_events_size(self->ctl->log),
                          .canary_loss = canary,
                          .nan_injected = self->nan_injected,
                          .loss_ema = self->loss_ema,
                          .loss_n = self->loss_n,
                          .tokens = self->tokens,
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
static void s_state_apply(bt_policy *self, const bt_run_state *st, bool restore_cursor) {
    self->step = st->step;
    if (restore_cursor) { /* a state.json without data.json (one source): its cursor */
        bt_mixture_position pos = {.draws = st->cursor};
        pos.drawn[0] = st->cursor;
        bt_mixture_set_position(self->mix, &pos);
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
            st = bt_msg_get_double(self->tr.job.result, "canary_loss", 0, 1e300,
                                   &self->snap_canary);
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
    case BT_SNAP_WRITER:
        BT_TRY(bt_recovery_writer_idle(self->ctl));
        break;
    }
    bt_msg_destroy(&self->snap);
    self->snap = self->snap_new;
    self->snap_new = NULL;
    self->snap_state = BT_SNAP_IDLE;
    s_state_capture(self, self->snap_canary, &self->saved);
    bt_mixture_position pos = bt_rollouts_train_position(self);
    free(self->saved_data);
    self->saved_data = bt_mixture_to_json(self->mix, &pos);
    self->rollbacks = 0;
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
static bt_status s_pending_evals(bt_policy *self, const bt_run_state *run) {
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
    s_state_apply(self, &self->saved, false);
    bt_rollouts_cancel(self); /* sampled by discarded versions: skipped too */
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
    s_state_apply(self, &self->saved, true);
    bt_mixture_position pos;
    BT_TRY(bt_mixture_from_json(self->mix, self->saved_data, "the snapshot", &pos));
    BT_TRY(bt_runlog_truncate_metrics(self->ctl->log, self->saved.metrics_size));
    self->launched = self->step;
    self->epoch_seen = bt_policy_epoch(self);
    self->full_owed = false;
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
    return s_pending_evals(self, &self->saved);
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

static void s_ckpt_reject(const char *folder, const char *reason, void *user) {
    bt_policy *self = user;
    bt_jsonl line;
    bt_ctl_event_line(self->ctl, &line, "checkpoint_rejected");
    bt_jsonl_str(&line, "folder", folder);
    bt_jsonl_str(&line, "reason", reason);
    bt_runlog_event(self->ctl->log, &line);
}

/*  Writes the writer's finished saves as events. */
void bt_recovery_ckpt_poll(bt_controller_t *self) {
    bt_ckpt_result r;
    while (self->writer && bt_ckpt_writer_poll(self->writer, &r)) {
        bt_jsonl line;
        bt_ctl_event_line(self, &line,
                          r.status == BT_OK ? "checkpoint_saved" : "checkpoint_failed");
        bt_jsonl_int(&line, "step", r.step);
        bt_jsonl_str(&line, "kind", r.full ? "full" : "light");
        bt_jsonl_str(&line, r.status == BT_OK ? "folder" : "reason",
                     r.status == BT_OK ? r.path : r.error);
        bt_jsonl_num(&line, "seconds", r.seconds);
        bt_runlog_event(self->log, &line);
    }
}

/*  The model files of a checkpoint: config.json and model.safetensors (Hugging Face names) from
    tensors named prefix + NAME of msg. */
static bt_status s_ckpt_add_model(bt_ckpt_snapshot_t *snap, const bt_run_config *c,
                                  const bt_msg_t *msg, const char *prefix, bool borrow) {
    char *config = bt_model_config_to_json(&c->model);
    bt_status st = config ? bt_ckpt_snapshot_add_text(snap, "config.json", config) : BT_ENOMEM;
    free(config);
    int n = bt_msg_tensor_count(msg), k = 0;
    bt_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    if (!t)
        return BT_ENOMEM;
    size_t plen = strlen(prefix);
    for (int i = 0; i < n && st == BT_OK; i++) {
        bt_msg_tensor m = bt_msg_tensor_at(msg, i);
        if (strncmp(m.name, prefix, plen) != 0)
            continue;
        t[k] =
            (bt_st_tensor){.name = m.name + plen, .dtype = m.dtype, .ndim = m.ndim, .data = m.data};
        memcpy(t[k++].shape, m.shape, sizeof m.shape);
    }
    if (st == BT_OK)
        st = borrow ? bt_ckpt_snapshot_add_tensors_borrowed(snap, "model.safetensors", t, k)
                    : bt_ckpt_snapshot_add_tensors(snap, "model.safetensors", t, k);
    free(t);
    return st;
}

/*  A full checkpoint of the snapshot just taken: model (a Hugging Face folder), optimizer
    (moments and step count), state.json.  Handed to the background writer. */
static bt_status s_ckpt_full(bt_policy *self) {
    bt_ckpt_snapshot_t *snap = bt_ckpt_snapshot_new(self->saved.step, true);
    if (!snap)
        return BT_ENOMEM;
    /* the tensors stay in self->snap, which bt_recovery_snapshot keeps until this save has finished */
    bt_status st = s_ckpt_add_model(snap, self->cfg, self->snap, "param.", true);
    int n = bt_msg_tensor_count(self->snap), k = 0;
    bt_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    int64_t steps = 0;
    if (!t)
        st = BT_ENOMEM;
    if (st == BT_OK)
        st = bt_msg_get_int(self->snap, "adam_steps", 0, BT_WIRE_INT_MAX, &steps);
    for (int i = 0; i < n && st == BT_OK; i++) {
        bt_msg_tensor m = bt_msg_tensor_at(self->snap, i);
        if (strncmp(m.name, "exp_avg", 7) != 0)
            continue;
        t[k] = (bt_st_tensor){.name = m.name, .dtype = m.dtype, .ndim = m.ndim, .data = m.data};
        memcpy(t[k++].shape, m.shape, sizeof m.shape);
    }
    self->snap_adam_steps = steps; /* borrowed too: lives as long as self->snap */
    t[k++] = (bt_st_tensor){
        .name = "adam_steps", .dtype = BT_I64, .ndim = 0, .data = &self->snap_adam_steps};
    if (st == BT_OK)
        st = bt_ckpt_snapshot_add_tensors_borrowed(snap, "optimizer.safetensors", t, k);
    k = 0; /* the KL reference, when the trainer keeps one */
    for (int i = 0; i < n && st == BT_OK; i++) {
        bt_msg_tensor m = bt_msg_tensor_at(self->snap, i);
        if (strncmp(m.name, "ref.", 4) != 0)
            continue;
        t[k] = (bt_st_tensor){.name = m.name, .dtype = m.dtype, .ndim = m.ndim, .data = m.data};
        memcpy(t[k++].shape, m.shape, sizeof m.shape);
    }
    if (st == BT_OK && k > 0)
        st = bt_ckpt_snapshot_add_tensors_borrowed(snap, "reference.safetensors", t, k);
    free(t);
    char *state = st == BT_OK ? bt_run_state_to_json(&self->saved) : NULL;
    if (st == BT_OK)
        st = state ? bt_ckpt_snapshot_add_text(snap, "state.json", state) : BT_ENOMEM;
    free(state);
    if (st == BT_OK) /* the data position and the curriculum at the same point */
        st = bt_ckpt_snapshot_add_text(snap, "data.json", self->saved_data);
    if (st == BT_OK)
        st = bt_ckpt_writer_submit(self->ctl->writer, &snap);
    bt_ckpt_snapshot_destroy(&snap); /* still ours when the writer was busy */
    return st;
}

/*  Light checkpoint: the latest published weights as a model folder. */
/*  A light checkpoint of this step's policy (a model folder; the tensors copied now).  When the
    writer is busy it is kept and submitted once the writer is free (a `checkpoint_deferred`
    event); one kept already is replaced by the newer (a `checkpoint_skipped` event). */
static bt_status s_ckpt_light(bt_policy *self) {
    if (!self->weights)
        return BT_OK;
    bt_ckpt_snapshot_t *snap = bt_ckpt_snapshot_new(self->step, false);
    bt_status st =
        snap ? s_ckpt_add_model(snap, self->cfg, self->weights->msg, "", false) : BT_ENOMEM;
    if (st == BT_OK && !bt_ckpt_writer_is_busy(self->ctl->writer)) {
        st = bt_ckpt_writer_submit(self->ctl->writer, &snap);
        bt_ckpt_snapshot_destroy(&snap);
        return st;
    }
    bt_jsonl line;
    if (st == BT_OK && self->light_pending) {
        bt_ctl_event_line(self->ctl, &line, "checkpoint_skipped");
        bt_jsonl_str(&line, "kind", "light");
        bt_jsonl_int(&line, "step", bt_ckpt_snapshot_step(self->light_pending));
        bt_jsonl_int(&line, "superseded_by", self->step);
        st = bt_runlog_event(self->ctl->log, &line);
    }
    if (st == BT_OK) {
        bt_ctl_event_line(self->ctl, &line, "checkpoint_deferred");
        bt_jsonl_str(&line, "kind", "light");
        bt_jsonl_int(&line, "step", self->step);
        st = bt_runlog_event(self->ctl->log, &line);
    }
    bt_ckpt_snapshot_destroy(&self->light_pending);
    self->light_pending = snap;
    return st;
}

/*  Stage 0 of the state after a step: the epoch boundaries of the epoch source (an event each),
    and which checkpoints are due. */
static bt_status s_save_plan(bt_policy *self) {
    const bt_run_config *c = self->cfg;
    double secs = bt_recovery_train_seconds(self);
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
    bool epoch_due = every > 0 && epoch / every > before / every;
    self->save_full =
        self->ctl->writer &&
        (epoch_due ||
         (c->checkpoint.full_every_steps > 0 && self->step % c->checkpoint.full_every_steps == 0) ||
         (c->checkpoint.full_every_secs > 0 &&
          secs - self->last_full_s >= c->checkpoint.full_every_secs) ||
         self->full_owed);
    self->save_light = self->ctl->writer && c->checkpoint.light_every_steps > 0 &&
                       self->step % c->checkpoint.light_every_steps == 0;
    self->save_secs = secs;
    return BT_OK;
}

/*  After a step (BT_POLICY_SAVE): the in-memory snapshot every S_ROLLBACK_EVERY steps, and the
    checkpoints due.  At most one save is in flight: a full checkpoint due while the writer is
    busy is owed to a later step, except at the last step, which waits for the writer so a
    finished run's last state is saved. */
bt_status bt_recovery_after_step(bt_policy *self, bool last) {
    bt_controller_t *ctl = self->ctl;
    switch (self->save_stage) {
    case 0:
        BT_TRY(s_save_plan(self));
        self->save_stage = 1;
        /* fall through */
    case 1:
        if (self->save_full && last)
            BT_TRY(bt_recovery_writer_idle(ctl));
        if (self->save_full && bt_ckpt_writer_is_busy(ctl->writer)) {
            self->full_owed = true;
            self->save_full = false;
        }
        self->save_stage = 2;
        /* fall through */
    case 2:
        if (self->save_full || self->step % S_ROLLBACK_EVERY == 0)
            BT_TRY(bt_recovery_snapshot(self));
        if (self->save_full) {
            BT_TRY(s_ckpt_full(self));
            self->full_owed = false;
            self->last_full_s = self->save_secs;
        } else if (self->save_light) { /* a full checkpoint holds the policy too */
            BT_TRY(s_ckpt_light(self));
        }
        self->save_stage = 3;
        /* fall through */
    default:
        if (self->light_pending && last)
            BT_TRY(bt_recovery_writer_idle(ctl));
        if (self->light_pending && !bt_ckpt_writer_is_busy(ctl->writer))
            BT_TRY(bt_ckpt_writer_submit(ctl->writer, &self->light_pending));
        bt_recovery_ckpt_poll(ctl);
        self->save_stage = 0;
        return BT_OK;
    }
}

/*  The trainer state a checkpoint folder holds, as a restore message, and its run state. */
static bt_status s_ckpt_read(const char *folder, bt_msg_t **state_out, bt_run_state *run) {
    char path[BT_CONFIG_PATH_MAX + 128], *text = NULL;
    snprintf(path, sizeof path, "%s/state.json", folder);
    BT_TRY(bt_file_read(path, 64 << 20, &text, NULL));
    bt_status st = bt_run_state_from_json(text, path, run);
    free(text);
    bt_msg_t *m = bt_msg_new(BT_MSG_TASK);
    bt_safetensors_t *files[3] = {NULL, NULL, NULL};
    const char *names[3] = {"model.safetensors", "optimizer.safetensors", "reference.safetensors"};
    for (int f = 0; f < 3 && st == BT_OK; f++) {
        snprintf(path, sizeof path, "%s/%s", folder, names[f]);
        if (f == 2 && access(path, F_OK) != 0)
            break; /* only with a KL reference */
        st = bt_safetensors_open(path, &files[f]);
    }
    for (int f = 0; f < 3 && files[f] && st == BT_OK; f++)
        for (int i = 0; i < bt_safetensors_count(files[f]) && st == BT_OK; i++) {
            const bt_st_entry *e = bt_safetensors_entry(files[f], i);
            char name[BT_WIRE_NAME_MAX];
            if (f == 1 && !strcmp(e->name, "adam_steps")) {
                int64_t steps;
                memcpy(&steps, e->data, sizeof steps);
                st = bt_msg_set_int(m, "adam_steps", steps);
                continue;
            }
            snprintf(name, sizeof name, "%s%s", f == 0 ? "param." : "", e->name);
            st = bt_msg_add_tensor(m, name, e->dtype, e->ndim, e->shape, e->data);
        }
    for (int f = 0; f < 3; f++)
        bt_safetensors_destroy(&files[f]);
    if (st == BT_OK && !m)
        st = BT_ENOMEM;
    if (st != BT_OK)
        bt_msg_destroy(&m);
    *state_out = m;
    return st;
}

/*  --resume: the newest verified checkpoint (or the one named), read into resume_state and
    resume_run; bt_recovery_resume_poll loads it into the trainer and the policy. */
bt_status bt_recovery_resume_read(bt_policy *self) {
    char *folder = self->resume_folder;
    if (self->ctl->resume[0]) {
        snprintf(folder, BT_CONFIG_PATH_MAX, "%s", self->ctl->resume);
        BT_TRY(bt_ckpt_verify(folder));
    } else {
        BT_TRY(bt_ckpt_find_latest(bt_runlog_dir(self->ctl->log), s_ckpt_reject, self, folder,
                                   BT_CONFIG_PATH_MAX));
    }
    return s_ckpt_read(folder, &self->resume_state, &self->resume_run);
}

/*  The data position and the curriculum of the checkpoint (data.json; absent in a checkpoint from
    before data.sources: the state's cursor holds). */
static bt_status s_resume_data(bt_policy *self) {
    char path[BT_CONFIG_PATH_MAX + 16], *data = NULL;
    snprintf(path, sizeof path, "%s/data.json", self->resume_folder);
    if (access(path, F_OK) == 0) {
        bt_mixture_position pos;
        bt_status st = bt_file_read(path, SIZE_MAX, &data, NULL);
        if (st == BT_OK)
            st = bt_mixture_from_json(self->mix, data, path, &pos);
        free(data);
        BT_TRY(st);
    }
    free(self->saved_data);
    bt_mixture_position now = bt_mixture_get_position(self->mix);
    self->saved_data = bt_mixture_to_json(self->mix, &now);
    return self->saved_data ? BT_OK : bt_fail(BT_ENOMEM, "controller: out of memory");
}

/*  The checkpoint's state in the trainer and the policy; metrics.jsonl cut back to it; its
    pending evaluations started again. */
bt_status bt_recovery_resume_poll(bt_policy *self) {
    bt_run_state *run = &self->resume_run;
    BT_TRY(bt_recovery_restore(self, self->resume_state, run->version, run->canary_loss));
    BT_TRY(bt_runlog_truncate_metrics(self->ctl->log, run->metrics_size));
    if (run->events_size >= 0) /* the events of the steps after the checkpoint are written again */
        BT_TRY(bt_runlog_truncate_events(self->ctl->log, run->events_size));
    bt_msg_destroy(&self->snap);
    self->snap = self->resume_state;
    self->resume_state = NULL;
    self->saved = *run;
    s_state_apply(self, run, true);
    BT_TRY(s_resume_data(self));
    self->epoch_seen = bt_policy_epoch(self); /* its epoch_end events were written before */
    bt_train_clock_init(&self->clock, run->train_seconds);
    bt_train_clock_start(&self->clock, bt_now());
    self->last_full_s = run->train_seconds;
    bt_jsonl resumed;
    bt_ctl_event_line(self->ctl, &resumed, "resumed");
    bt_jsonl_str(&resumed, "folder", self->resume_folder);
    bt_jsonl_int(&resumed, "step", run->step);
    bt_runlog_event(self->ctl->log, &resumed);
    return s_pending_evals(self, run);
}
