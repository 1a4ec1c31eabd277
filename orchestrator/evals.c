/*  evals.c — evaluations beside training: pinning, speed-sized shards, float64 sums. */
#include "rooms.h"

/*  What each dataset evaluates, and the training stream's epoch, from the task and the sources. */
bt_status bt_evals_setup(bt_controller_t *self) {
    const bt_run_config *c = self->cfg;
    bt_eval_suite suite;
    bt_status st = BT_OK;
    self->n_sources = bt_config_n_sources(c);
    int epoch_source = bt_config_epoch_source(c);
    for (int k = 0; k < self->n_sources && st == BT_OK; k++)
        st = bt_config_new_source_task(c, k, &self->sources[k],
                                       k == epoch_source ? &self->epoch_size : NULL);
    BT_TRY(st);
    bt_mixture_config mc = {.n_sources = self->n_sources,
                            .seed = (uint64_t)c->run.seed,
                            .window = c->data.curriculum.window,
                            .skip_solved = c->data.curriculum.skip_solved,
                            .skip_failed = c->data.curriculum.skip_failed};
    self->mix = bt_mixture_new(&mc);
    if (!self->mix)
        return BT_ENOMEM;
    st = bt_config_eval_suite(c, self->sources[0], &suite);
    for (int i = 0; i < c->eval.n_datasets && st == BT_OK; i++) {
        self->ds_size[i] = (int64_t)bt_eval_suite_size(&suite, i);
        bt_trigger_config tc;
        bt_config_trigger(c, i, &tc);
        bt_trigger_init(&self->triggers[i], &tc);
    }
    if (st == BT_OK)
        bt_eval_suite_release(&suite);
    for (int w = 0; w < S_TRACK; w++)
        self->worker_version[w] = -1;
    return st;
}

static int s_evals_active(const bt_controller_t *self) {
    int n = 0;
    for (int i = 0; i < S_MAX_EVALS; i++)
        n += self->evals[i].active;
    return n;
}

/*  Queues evaluation of dataset ds at the current policy version, in shards sized by the measured
    speed of each live eval worker.  Returns at once (after waiting for a free slot when
    S_MAX_EVALS are in flight); bt_evals_poll writes the result. */
bt_status bt_evals_start(bt_controller_t *self, int ds, const char *phase, const char *trigger,
                              int64_t step, bt_evaluation **out) {
    const bt_eval_dataset *d = &self->cfg->eval.datasets[ds];
    while (s_evals_active(self) == S_MAX_EVALS) /* all slots taken: wait for one */
        BT_TRY(bt_evals_wait(self, &self->evals[0]));
    bt_evaluation *ev = NULL;
    for (int i = 0; i < S_MAX_EVALS && !ev; i++)
        ev = self->evals[i].active ? NULL : &self->evals[i];
    *ev = (bt_evaluation){.active = true,
                         .ds = ds,
                         .phase = phase,
                         .step = step,
                         .weights = bt_loop_weights_ref(self->weights),
                         .version = self->version,
                         .t_start = bt_now()};
    snprintf(ev->trigger, sizeof ev->trigger, "%s", trigger);
    int32_t ids[S_MAX_SHARDS];
    double speeds[S_MAX_SHARDS];
    int n = 0;
    for (int32_t i = 0; i < bt_registry_worker_count(self->reg) && n < S_MAX_SHARDS; i++) {
        const bt_worker_info *w = bt_registry_worker(self->reg, i);
        if (w->role == BT_ROLE_EVAL && w->state != BT_WORKER_LOST && !w->quarantined) {
            ids[n] = w->id;
            speeds[n++] = w->id < S_TRACK ? self->speed[w->id][ds] : 0;
        }
    }
    int64_t total = self->ds_size[ds], counts[S_MAX_SHARDS];
    if (d->kind == BT_EVAL_PROBES || n == 0) { /* probes are never split */
        n = 1;
        ids[0] = -1;
        counts[0] = total;
    } else {
        int64_t align = d->kind == BT_EVAL_PERPLEXITY ? BT_EVALUATOR_NLL_CHUNK : 1;
        bt_shard_split(total, align, speeds, n, counts);
    }
    int64_t start = 0;
    ev->first_task = -1;
    for (int i = 0; i < n; i++) {
        if (counts[i] == 0 && !(i == n - 1 && ev->n_jobs == 0))
            continue;
        bt_job *j = &ev->jobs[ev->n_jobs++];
        *j = (bt_job){.kind = "eval",
                     .role = BT_ROLE_EVAL,
                     .start = start,
                     .count = counts[i],
                     .seed = (int64_t)bt_config_eval_seed(self->cfg, ds, step, i),
                     .ev = ev,
                     .worker = -1};
        start += counts[i];
        j->ctl = self;
        int64_t id = bt_registry_add_task_for(self->reg, BT_ROLE_EVAL, ids[i], j);
        if (id < 0)
            return BT_ENOMEM;
        ev->first_task = ev->first_task < 0 ? id : ev->first_task;
    }
    if (out)
        *out = ev;
    return BT_OK;
}

void bt_evals_trigger_event(bt_controller_t *self, const char *dataset, const bt_trigger_event *e) {
    char name[32];
    snprintf(name, sizeof name, "eval_%s", e->kind);
    bt_jsonl line;
    bt_ctl_event_line(self, &line, name);
    bt_jsonl_str(&line, "dataset", dataset);
    bt_jsonl_int(&line, "step", e->step);
    bt_jsonl_int(&line, "old", e->old_interval);
    bt_jsonl_int(&line, "new", e->new_interval);
    bt_jsonl_num(&line, "value", e->value);
    bt_jsonl_num(&line, "rate", e->rate);
    bt_jsonl_str(&line, "reason", e->reason);
    bt_runlog_event(self->log, &line);
}

/*  Aggregates a finished evaluation in float64, writes its line, feeds its trigger. */
static bt_status s_eval_finish(bt_controller_t *self, bt_evaluation *ev) {
    const bt_run_config *c = self->cfg;
    const bt_eval_dataset *d = &c->eval.datasets[ev->ds];
    bt_evaluator_sums sum, part;
    bt_evaluator_sums_init(&sum, d->samples);
    bt_status st = BT_OK;
    for (int i = 0; i < ev->n_jobs && st == BT_OK; i++) {
        bt_job *j = &ev->jobs[i];
        st = bt_sums_from_msg(j->result, &part);
        if (st == BT_OK)
            st = bt_evaluator_sums_add(&sum, &part);
        if (j->worker >= 0 && j->worker < S_TRACK && !isnan(self->wait_since))
            self->wait_busy[j->worker] += fmin(j->compute_s, bt_now() - self->wait_since);
        if (st == BT_OK && j->worker >= 0 && j->worker < S_TRACK && part.compute_s > 0 &&
            j->count > 0) { /* items per second, an EMA per worker and dataset */
            double v = (double)j->count / part.compute_s, *sp = &self->speed[j->worker][ev->ds];
            *sp = *sp > 0 ? 0.5 * *sp + 0.5 * v : v;
        }
    }
    char sizes[S_MAX_SHARDS * 12] = ""; /* the speed-sized split, "150,50" */
    for (int i = 0; i < ev->n_jobs; i++) {
        snprintf(sizes + strlen(sizes), sizeof sizes - strlen(sizes), "%s%lld", i ? "," : "",
                 (long long)ev->jobs[i].count);
        bt_msg_destroy(&ev->jobs[i].result);
    }
    bt_loop_weights_release(&ev->weights);
    ev->active = false;
    BT_TRY(st);
    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "eval");
    bt_jsonl_str(&line, "phase", ev->phase);
    bt_jsonl_int(&line, "step", ev->step);
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_num(&line, "time", bt_now() - self->t0);
    bt_jsonl_str(&line, "dataset", d->name);
    if (d->data_source >= 0)
        bt_jsonl_str(&line, "source", bt_config_source_name(c, d->data_source));
    bt_jsonl_str(&line, "trigger", ev->trigger);
    bt_jsonl_int(&line, "version", ev->version);
    bt_eval_metric metrics[BT_EVAL_MAX_METRICS];
    double primary = NAN;
    int n_metrics = bt_evaluator_metrics(&sum, d->kind, c->eval.probes, c->eval.n_probes, metrics,
                                         BT_EVAL_MAX_METRICS, &primary);
    for (int i = 0; i < n_metrics; i++)
        bt_jsonl_num(&line, metrics[i].name, metrics[i].value);
    bt_jsonl_num(&line, "eval_s", bt_now() - ev->t_start);
    bt_jsonl_int(&line, "shards", ev->n_jobs);
    bt_jsonl_str(&line, "shard_items", sizes);
    BT_TRY(bt_runlog_metric(self->log, &line));
    if (d->kind == BT_EVAL_GENERATE && ev->ds == bt_evals_first_generate(c))
        self->last_accuracy = primary;
    for (int i = 0; c->scaling.enabled && !strcmp(ev->phase, "rl") &&
                    !strcmp(c->scaling.dataset, d->name) && i < n_metrics;
         i++)
        if (!strcmp(metrics[i].name, "nll_per_token"))
            BT_TRY(bt_population_scaling_observe(self, ev->step, metrics[i].value));
    const bt_tuner_plateau_config *pc = &self->tuner.cfg.lr_plateau;
    for (int i = 0;
         pc->enabled && !strcmp(ev->phase, "rl") && !strcmp(pc->dataset, d->name) && i < n_metrics;
         i++)
        if (!strcmp(metrics[i].name, pc->metric)) {
            bt_tuner_decision dec[BT_TUNER_MAX_DECISIONS];
            int n = bt_tuner_after_eval(&self->tuner, ev->step, metrics[i].value, dec,
                                        BT_TUNER_MAX_DECISIONS);
            BT_TRY(bt_ctl_tuner_events(self, dec, n));
        }
    if (strcmp(ev->phase, "rl") == 0) {
        bt_trigger_event events[4];
        int n = bt_trigger_observe(&self->triggers[ev->ds], ev->step, primary, events, 4);
        for (int i = 0; i < n; i++)
            bt_evals_trigger_event(self, d->name, &events[i]);
    }
    return BT_OK;
}

/*  Finishes the evaluations whose shards are all done; fails when a shard failed too often. */
bt_status bt_evals_poll(bt_controller_t *self) {
    for (int i = 0; i < S_MAX_EVALS; i++) {
        bt_evaluation *ev = &self->evals[i];
        if (!ev->active || ev->first_task < 0)
            continue;
        int done = 0;
        for (int j = 0; j < ev->n_jobs; j++) {
            int64_t t = ev->first_task + j;
            done += bt_registry_task_state(self->reg, t) == BT_TASK_DONE;
            if (ev->jobs[j].status != BT_OK)
                return bt_fail(ev->jobs[j].status, "%s (evaluating %s)", self->hub->last_fail,
                               self->cfg->eval.datasets[ev->ds].name);
        }
        if (done == ev->n_jobs)
            BT_TRY(s_eval_finish(self, ev));
    }
    return BT_OK;
}

/*  Turns until the given evaluation (or, with NULL, every one) has finished. */
/*  The wait is on the critical path: it counts in the overhead stats as a batch of tasks whose
    compute is the busiest eval worker's share of the waited time. */
bt_status bt_evals_wait(bt_controller_t *self, const bt_evaluation *ev) {
    int64_t stalled_since = bt_ctl_now_ms();
    self->wait_since = bt_now();
    memset(self->wait_busy, 0, sizeof self->wait_busy);
    bt_status st = BT_OK;
    while (st == BT_OK && (ev ? ev->active : s_evals_active(self) > 0)) {
        if (bt_registry_live(self->reg, BT_ROLE_EVAL) > 0)
            stalled_since = bt_ctl_now_ms();
        else
            st = bt_jobs_unstaffed(self, BT_ROLE_EVAL, stalled_since);
        if (st == BT_OK)
            st = bt_loop_turn(self);
    }
    double busiest = 0;
    for (int w = 0; w < S_TRACK; w++)
        busiest = fmax(busiest, self->wait_busy[w]);
    self->stats.compute_s += busiest;
    self->stats.tasks_s += bt_now() - self->wait_since;
    self->wait_since = NAN;
    return st;
}

/*  Starts the evaluations whose triggers fire after a training step (every dataset on the last
    step).  Never waits for them. */
bt_status bt_evals_after_step(bt_controller_t *self, bool last) {
    const bt_run_config *c = self->cfg;
    if (c->workers.eval == 0)
        return BT_OK;
    double secs = bt_train_clock_seconds(&self->clock, bt_now());
    bool busy = bt_registry_queued(self->reg, BT_ROLE_EVAL) > 0;
    for (int i = 0; i < c->eval.n_datasets; i++) {
        bt_trigger_event e;
        int n_ev = 0;
        int why =
            bt_trigger_check(&self->triggers[i], self->step, bt_policy_epoch(self), secs, busy, &e, &n_ev);
        if (n_ev)
            bt_evals_trigger_event(self, c->eval.datasets[i].name, &e);
        if (!why && !last)
            continue;
        char trigger[32] = "";
        const char *names[] = {"steps", "epochs", "seconds"};
        for (int b = 0; b < 3; b++)
            if (why & (1 << b))
                snprintf(trigger + strlen(trigger), sizeof trigger - strlen(trigger), "%s%s",
                         trigger[0] ? "+" : "", names[b]);
        BT_TRY(bt_evals_start(self, i, "rl", why ? trigger : "final", self->step, NULL));
    }
    return BT_OK;
}

/*  The first generate dataset: the one SFT's early stop and the progress display read. */
int bt_evals_first_generate(const bt_run_config *c) {
    for (int i = 0; i < c->eval.n_datasets; i++)
        if (c->eval.datasets[i].kind == BT_EVAL_GENERATE)
            return i;
    return -1;
}

/*  Drops every evaluation in flight: their tasks are cancelled, their pinned weights released,
    and every eval worker is sent weights again before its next shard. */
void bt_evals_cancel(bt_controller_t *self) {
    for (int i = 0; i < S_MAX_EVALS; i++) {
        bt_evaluation *ev = &self->evals[i];
        if (!ev->active)
            continue;
        bt_jobs_cancel(self, ev->n_jobs, ev->first_task);
        bt_jobs_release(ev->jobs, ev->n_jobs);
        bt_loop_weights_release(&ev->weights);
        ev->active = false;
    }
    for (int i = 0; i < S_TRACK; i++)
        self->worker_version[i] = -1;
}
