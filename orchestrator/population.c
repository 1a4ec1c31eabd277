/*  population.c — variants: PBT's exploit, early stop, the scaling-law fit. */
#include "rooms.h"

/*  A held-out loss of scaling.dataset at step: it settles the predictions made for this step
    (a `scaling_error` event each), then joins the points the law is fitted to, and with enough of
    them the loss at the last GRPO step is predicted under the planned schedule (the configured
    one, scaled by the tuner's current learning-rate factor): a `scaling_prediction` event. */
bt_status bt_population_scaling_observe(bt_controller_t *self, int64_t step, double loss) {
    const bt_run_config *c = self->cfg;
    int64_t last = c->grpo.steps;
    if (bt_scaling_record_measure(&self->sc_record, step, loss) > 0)
        for (int i = 0; i < self->sc_record.n; i++) {
            const bt_scaling_prediction *p = &self->sc_record.entries[i];
            if (p->target != step || !p->measured)
                continue;
            bt_jsonl line;
            bt_ctl_event_line(self, &line, "scaling_error");
            bt_jsonl_str(&line, "variant", self->variant_name);
            bt_jsonl_int(&line, "made_at", p->made_at);
            bt_jsonl_int(&line, "step", p->target);
            bt_jsonl_num(&line, "predicted", p->predicted);
            bt_jsonl_num(&line, "measured", p->loss);
            bt_jsonl_num(&line, "error", p->error);
            BT_TRY(bt_runlog_event(self->log, &line));
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
        bt_ctl_event(self, "scaling_failed", "error", bt_last_error());
        return BT_OK;
    }
    if (isfinite(predicted) && self->sc_record.n < BT_SCALING_RECORD_MAX)
        BT_TRY(bt_scaling_record_add(&self->sc_record, step, last, predicted));
    bt_jsonl line;
    bt_ctl_event_line(self, &line, "scaling_prediction");
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
    return bt_runlog_event(self->log, &line);
}

double bt_controller_predicted_loss(const bt_controller_t *self) {
    const bt_scaling_record *r = &self->sc_record;
    return r->n > 0 ? r->entries[r->n - 1].predicted : NAN;
}

bt_status bt_controller_stop_variant(bt_controller_t *self, double predicted, double best,
                                     double margin) {
    bt_jsonl line;
    bt_ctl_event_line(self, &line, "variant_stopped");
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_int(&line, "step", self->step);
    bt_jsonl_num(&line, "predicted", predicted);
    bt_jsonl_num(&line, "best_predicted", best);
    bt_jsonl_num(&line, "margin", margin);
    return bt_runlog_event(self->log, &line);
}

double bt_controller_lr(const bt_controller_t *self) {
    return self->tuner.lr;
}

bt_status bt_controller_pbt_exploit(bt_controller_t *self, bt_controller_t *top, double lr,
                                    const char *how) {
    double accuracy = self->last_accuracy, reward = self->last_reward, lr_before = self->tuner.lr;
    BT_TRY(bt_recovery_snapshot(top)); /* top's whole trainer state, now */
    BT_TRY(bt_recovery_restore_trainer(self, top->snap, self->version + 1, top->saved.canary_loss));
    self->tuner.kl_coef = top->tuner.kl_coef; /* top's tuned values, then the new rate */
    self->tuner.temperature = top->tuner.temperature;
    self->tuner.lr = lr;
    self->last_accuracy = top->last_accuracy;
    self->last_reward = top->last_reward;
    BT_TRY(bt_recovery_snapshot(self)); /* a rollback now returns to the copy */
    bt_jsonl line;
    bt_ctl_event_line(self, &line, "pbt");
    bt_jsonl_int(&line, "step", self->step);
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_str(&line, "from", top->variant_name);
    bt_jsonl_num(&line, "accuracy", accuracy);
    bt_jsonl_num(&line, "from_accuracy", top->last_accuracy);
    bt_jsonl_num(&line, "reward", reward);
    bt_jsonl_num(&line, "from_reward", top->last_reward);
    bt_jsonl_num(&line, "lr_before", lr_before);
    bt_jsonl_num(&line, "from_lr", top->tuner.lr);
    bt_jsonl_num(&line, "lr_after", lr);
    bt_jsonl_str(&line, "explore", how);
    return bt_runlog_event(self->log, &line);
}
