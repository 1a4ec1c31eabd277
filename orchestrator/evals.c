/*  evals.c — evaluations beside training: pinning, speed-sized shards, float64 sums, and the
    listeners a finished evaluation goes to; see rooms.h. */
#include "rooms.h"

/*  What each dataset evaluates and when (its trigger); the suite stays loaded for the names its
    metrics need (released by bt_policy_destroy). */
bt_status bt_evals_setup(bt_policy *p) {
    const bt_config *c = p->cfg;
    bt_status st = bt_config_eval_suite(c, p->sources[0], &p->suite);
    for (int i = 0; i < c->eval.n_datasets && st == BT_OK; i++) {
        p->ds_size[i] = (int64_t)bt_eval_suite_size(&p->suite, i);
        bt_trigger_config tc;
        bt_config_trigger(c, i, &tc);
        bt_trigger_init(&p->triggers[i], &tc);
    }
    for (int w = 0; w < S_TRACK; w++)
        p->worker_version[w] = -1;
    p->eval_wait.since = NAN;
    return st;
}

static bt_evaluation *s_free_slot(bt_policy *p) {
    for (int i = 0; i < S_MAX_EVALS; i++)
        if (!p->evals[i].active)
            return &p->evals[i];
    return NULL;
}

/*  The shards of an evaluation of dataset ds: one per live eval worker, sized by its measured
    speed (probes are never split); returns how many, with their workers (-1: any) and sizes. */
static int s_shards(bt_policy *p, int ds, int32_t *ids, int64_t *counts) {
    const bt_eval_dataset *d = &p->cfg->eval.datasets[ds];
    bt_registry_t *reg = p->ctl->reg;
    double speeds[S_MAX_SHARDS];
    int n = 0;
    for (int32_t i = 0; i < bt_registry_worker_count(reg) && n < S_MAX_SHARDS; i++) {
        const bt_worker_info *w = bt_registry_worker(reg, i);
        if (w->role == BT_ROLE_EVAL && w->state != BT_WORKER_LOST && !w->quarantined) {
            ids[n] = w->id;
            speeds[n++] = w->id < S_TRACK ? p->speed[w->id][ds] : 0;
        }
    }
    int64_t total = p->ds_size[ds];
    if (d->kind == BT_EVAL_PROBES || n == 0) {
        ids[0] = -1;
        counts[0] = total;
        return 1;
    }
    int64_t align = d->kind == BT_EVAL_PERPLEXITY ? BT_EVALUATOR_NLL_CHUNK : 1;
    bt_shard_split(total, align, speeds, n, counts);
    return n;
}

/*  Queues evaluation of dataset ds at the current policy version, in shards sized by the measured
    speed of each live eval worker.  BT_PENDING while every slot is taken (the first one's end is
    awaited, as a wait on the critical path); bt_evals_poll finishes it. */
bt_status bt_evals_start(bt_policy *p, int ds, const char *phase, const char *trigger, int64_t step,
                         bt_evaluation **out) {
    if (!s_free_slot(p))
        BT_TRY(bt_evals_wait(p, &p->evals[0]));
    bt_evaluation *ev = s_free_slot(p);
    *ev = (bt_evaluation){.active = true,
                          .ds = ds,
                          .phase = phase,
                          .step = step,
                          .global_step = p->global_step,
                          .weights = bt_loop_weights_ref(p->weights),
                          .version = p->version,
                          .t_start = bt_now(),
                          .first_task = -1};
    snprintf(ev->trigger, sizeof ev->trigger, "%s", trigger);
    int32_t ids[S_MAX_SHARDS];
    int64_t counts[S_MAX_SHARDS], start = 0;
    int n = s_shards(p, ds, ids, counts);
    for (int i = 0; i < n; i++) {
        if (counts[i] == 0 && !(i == n - 1 && ev->n_jobs == 0))
            continue;
        bt_job *j = &ev->jobs[ev->n_jobs++];
        *j = (bt_job){.pol = p,
                      .kind = BT_JOB_EVAL,
                      .role = BT_ROLE_EVAL,
                      .start = start,
                      .count = counts[i],
                      .seed = (int64_t)bt_config_eval_seed(p->cfg, ds, step, i),
                      .ev = ev,
                      .worker = -1};
        start += counts[i];
        int64_t id = bt_registry_add_task_for(p->ctl->reg, BT_ROLE_EVAL, ids[i], j);
        if (id < 0)
            return BT_ENOMEM;
        ev->first_task = ev->first_task < 0 ? id : ev->first_task;
    }
    if (out)
        *out = ev;
    return BT_OK;
}

void bt_evals_trigger_event(bt_policy *p, const char *dataset, const bt_trigger_event *e) {
    char name[32];
    snprintf(name, sizeof name, "eval_%s", e->kind);
    bt_jsonl line;
    bt_ctl_event_line(p->ctl, &line, name);
    bt_jsonl_str(&line, "dataset", dataset);
    bt_jsonl_int(&line, "step", e->step);
    bt_jsonl_int(&line, "old", e->old_interval);
    bt_jsonl_int(&line, "new", e->new_interval);
    bt_jsonl_num(&line, "value", e->value);
    bt_jsonl_num(&line, "rate", e->rate);
    bt_jsonl_str(&line, "reason", e->reason);
    bt_runlog_event(p->ctl->log, &line);
}

/*  The shards' sums added in float64; each shard's speed feeds its worker's EMA (items per
    second, per dataset), and inside a wait its compute counts for the wait. */
static bt_status s_sum(bt_policy *p, bt_evaluation *ev, bt_evaluator_sums *sum) {
    const bt_eval_dataset *d = &p->cfg->eval.datasets[ev->ds];
    bt_evaluator_sums part;
    bt_evaluator_sums_init(sum, d->samples);
    bt_status st = BT_OK;
    double since = p->eval_wait.since;
    for (int i = 0; i < ev->n_jobs && st == BT_OK; i++) {
        bt_job *j = &ev->jobs[i];
        st = bt_sums_from_msg(j->result, &part);
        if (st == BT_OK)
            st = bt_evaluator_sums_add(sum, &part);
        if (j->worker >= 0 && j->worker < S_TRACK && !isnan(since))
            p->wait_busy[j->worker] += fmin(j->compute_s, bt_now() - since);
        if (st == BT_OK && j->worker >= 0 && j->worker < S_TRACK && part.compute_s > 0 &&
            j->count > 0) {
            double v = (double)j->count / part.compute_s, *sp = &p->speed[j->worker][ev->ds];
            *sp = *sp > 0 ? 0.5 * *sp + 0.5 * v : v;
        }
    }
    return st;
}

/*  Aggregates a finished evaluation and hands it to every listener, in order. */
static bt_status s_finish(bt_policy *p, bt_evaluation *ev) {
    const bt_config *c = p->cfg;
    const bt_eval_dataset *d = &c->eval.datasets[ev->ds];
    bt_evaluator_sums sum;
    bt_status st = s_sum(p, ev, &sum);
    char sizes[S_MAX_SHARDS * 12] = "";
    for (int i = 0; i < ev->n_jobs; i++) {
        snprintf(sizes + strlen(sizes), sizeof sizes - strlen(sizes), "%s%lld", i ? "," : "",
                 (long long)ev->jobs[i].count);
        bt_msg_destroy(&ev->jobs[i].result);
    }
    bt_loop_weights_release(&ev->weights);
    ev->active = false;
    BT_TRY(st);
    bt_eval_metric metrics[BT_EVAL_MAX_METRICS];
    bt_eval_done done = {.pol = p,
                         .dataset = d,
                         .ds = ev->ds,
                         .phase = ev->phase,
                         .step = ev->step,
                         .global_step = ev->global_step,
                         .trigger = ev->trigger,
                         .version = ev->version,
                         .metrics = metrics,
                         .primary = NAN,
                         .seconds = bt_now() - ev->t_start,
                         .shards = ev->n_jobs,
                         .shard_items = sizes};
    done.n_metrics =
        bt_eval_suite_metrics(&p->suite, ev->ds, &sum, metrics, BT_EVAL_MAX_METRICS, &done.primary);
    bt_controller_t *ctl = p->ctl;
    for (int i = 0; i < ctl->n_listeners; i++)
        BT_TRY(ctl->listeners[i](&done, ctl->listener_user[i]));
    return BT_OK;
}

/*  Finishes the evaluations whose shards are all done; fails when a shard failed too often. */
bt_status bt_evals_poll(bt_policy *p) {
    for (int i = 0; i < S_MAX_EVALS; i++) {
        bt_evaluation *ev = &p->evals[i];
        if (!ev->active || ev->first_task < 0)
            continue;
        int done = 0;
        for (int j = 0; j < ev->n_jobs; j++) {
            done += bt_registry_task_state(p->ctl->reg, ev->first_task + j) == BT_TASK_DONE;
            if (ev->jobs[j].status != BT_OK)
                return bt_fail(ev->jobs[j].status, "%s (evaluating %s)", p->ctl->last_fail,
                               p->cfg->eval.datasets[ev->ds].name);
        }
        if (done == ev->n_jobs)
            BT_TRY(s_finish(p, ev));
    }
    return BT_OK;
}

static bool s_any_active(const bt_policy *p) {
    for (int i = 0; i < S_MAX_EVALS; i++)
        if (p->evals[i].active)
            return true;
    return false;
}

/*  An evaluation awaited is on the critical path: the wait counts in the overhead stats as a
    batch of tasks whose compute is the busiest eval worker's share of the waited time. */
bt_status bt_evals_wait(bt_policy *p, const bt_evaluation *ev) {
    bt_controller_t *ctl = p->ctl;
    bt_eval_wait *w = &p->eval_wait;
    if (isnan(w->since)) {
        w->since = bt_now();
        w->stalled_since = bt_ctl_now_ms();
        memset(p->wait_busy, 0, sizeof p->wait_busy);
    }
    if (ev ? ev->active : s_any_active(p)) {
        if (bt_registry_live(ctl->reg, BT_ROLE_EVAL) > 0) {
            w->stalled_since = bt_ctl_now_ms();
            return BT_PENDING;
        }
        bt_status st = bt_jobs_unstaffed(ctl, BT_ROLE_EVAL, w->stalled_since);
        if (st == BT_OK)
            return BT_PENDING;
        w->since = NAN;
        return st;
    }
    double busiest = 0;
    for (int i = 0; i < S_TRACK; i++)
        busiest = fmax(busiest, p->wait_busy[i]);
    ctl->stats.compute_s += busiest;
    ctl->stats.tasks_s += bt_now() - w->since;
    w->since = NAN;
    return BT_OK;
}

bt_trigger_at bt_evals_trigger_at(const bt_policy *p) {
    return (bt_trigger_at){.step = p->step,
                           .epoch = bt_policy_epoch(p),
                           .seconds = bt_train_clock_seconds(&p->clock, bt_now()),
                           .tokens = p->tokens};
}

/*  Marks the evaluations whose triggers fire after a training step (every dataset on the last
    step); bt_evals_start_due starts them. */
void bt_evals_after_step(bt_policy *p, bool last) {
    const bt_config *c = p->cfg;
    if (c->workers.eval == 0)
        return;
    bt_trigger_at at = bt_evals_trigger_at(p);
    bool busy = bt_registry_queued(p->ctl->reg, BT_ROLE_EVAL) > 0;
    for (int i = 0; i < c->eval.n_datasets; i++) {
        bt_trigger_event e;
        int n_ev = 0;
        int why = bt_trigger_check(&p->triggers[i], &at, busy, &e, &n_ev);
        if (n_ev)
            bt_evals_trigger_event(p, c->eval.datasets[i].name, &e);
        if (!why && !last)
            continue;
        char *trigger = p->due_trigger[i];
        bt_trigger_reasons_str(why, trigger, sizeof p->due_trigger[i]);
        if (!why)
            snprintf(trigger, 32, "final");
        p->evals_due[i] = true;
    }
}

bt_status bt_evals_start_due(bt_policy *p) {
    for (int i = 0; i < p->cfg->eval.n_datasets; i++)
        if (p->evals_due[i]) {
            BT_TRY(bt_evals_start(p, i, "rl", p->due_trigger[i], p->step, NULL));
            p->evals_due[i] = false;
        }
    return BT_OK;
}

/*  The first generate dataset: the one SFT's early stop and the progress display read. */
int bt_evals_first_generate(const bt_config *c) {
    for (int i = 0; i < c->eval.n_datasets; i++)
        if (c->eval.datasets[i].kind == BT_EVAL_GENERATE)
            return i;
    return -1;
}

/*  Drops every evaluation in flight: their tasks are cancelled, their pinned weights released,
    and every eval worker is sent weights again before its next shard. */
void bt_evals_cancel(bt_policy *p) {
    for (int i = 0; i < S_MAX_EVALS; i++) {
        bt_evaluation *ev = &p->evals[i];
        if (!ev->active)
            continue;
        bt_jobs_cancel(p->ctl, ev->n_jobs, ev->first_task);
        bt_jobs_release(ev->jobs, ev->n_jobs);
        bt_loop_weights_release(&ev->weights);
        ev->active = false;
    }
    for (int i = 0; i < S_TRACK; i++)
        p->worker_version[i] = -1;
    memset(p->evals_due, 0, sizeof p->evals_due);
}

void bt_evals_listen(bt_controller_t *self, bt_eval_listener *fn, void *user) {
    BT_ASSERT(self->n_listeners < S_MAX_LISTENERS);
    self->listeners[self->n_listeners] = fn;
    self->listener_user[self->n_listeners++] = user;
}

/* ---- the listeners every run has ---------------------------------------------------------------
 */

/*  Every probe a pair with the longest name, its four metrics at their longest, and 4096 bytes
    for the rest of the line. */
_Static_assert(BT_JSONL_MAX >= 4096 + BT_EVAL_MAX_PROBES * 4 *
                                          (sizeof ",\"pair.\":" + BT_EVAL_NAME_MAX +
                                           sizeof ".better_ppl" + BT_BUF_NUMBER_LEN),
               "an eval line of every probe fits a bt_jsonl");

/*  The eval line of metrics.jsonl. */
static bt_status s_log_line(const bt_eval_done *e, void *user) {
    const bt_policy *p = e->pol;
    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "eval");
    bt_jsonl_str(&line, "phase", e->phase);
    bt_jsonl_int(&line, "step", e->step);
    bt_jsonl_str(&line, "variant", p->variant_name);
    bt_jsonl_int(&line, "global_step", e->global_step);
    bt_jsonl_num(&line, "time", bt_now() - p->ctl->t0);
    bt_jsonl_str(&line, "dataset", e->dataset->name);
    if (e->dataset->data_source >= 0)
        bt_jsonl_str(&line, "source", bt_config_source_name(p->cfg, e->dataset->data_source));
    bt_jsonl_str(&line, "trigger", e->trigger);
    bt_jsonl_int(&line, "version", e->version);
    for (int i = 0; i < e->n_metrics; i++)
        bt_jsonl_num(&line, e->metrics[i].name, e->metrics[i].value);
    bt_jsonl_num(&line, "eval_s", e->seconds);
    bt_jsonl_int(&line, "shards", e->shards);
    bt_jsonl_str(&line, "shard_items", e->shard_items);
    return strcmp(e->phase, "sft") == 0 ? bt_policy_sft_metric(e->pol, &line)
                                        : bt_runlog_metric(p->ctl->log, &line);
}

/*  The accuracy the progress display, SFT's early stop and PBT read. */
static bt_status s_accuracy(const bt_eval_done *e, void *user) {
    if (e->dataset->kind == BT_EVAL_GENERATE && e->ds == bt_evals_first_generate(e->pol->cfg))
        e->pol->last_accuracy = e->primary;
    return BT_OK;
}

static bt_status s_scaling(const bt_eval_done *e, void *user) {
    const bt_config *c = e->pol->cfg;
    if (!c->scaling.enabled || strcmp(e->phase, "rl") != 0 ||
        strcmp(c->scaling.dataset, e->dataset->name) != 0)
        return BT_OK;
    for (int i = 0; i < e->n_metrics; i++)
        if (!strcmp(e->metrics[i].name, "nll_per_token"))
            BT_TRY(bt_population_scaling_observe(e->pol, e->step, e->metrics[i].value));
    return BT_OK;
}

/*  The tuner's learning-rate plateau rule. */
static bt_status s_plateau(const bt_eval_done *e, void *user) {
    bt_policy *p = e->pol;
    const bt_tuner_plateau_config *pc = &p->tuner.cfg.lr_plateau;
    if (!pc->enabled || strcmp(e->phase, "rl") != 0 || strcmp(pc->dataset, e->dataset->name) != 0)
        return BT_OK;
    for (int i = 0; i < e->n_metrics; i++)
        if (!strcmp(e->metrics[i].name, pc->metric)) {
            bt_tuner_decision dec[BT_TUNER_MAX_DECISIONS];
            int n = bt_tuner_after_eval(&p->tuner, e->step, e->metrics[i].value, dec,
                                        BT_TUNER_MAX_DECISIONS);
            BT_TRY(bt_ctl_tuner_events(p, dec, n));
        }
    return BT_OK;
}

/*  The dataset's trigger (adaptive evaluation frequency). */
static bt_status s_trigger(const bt_eval_done *e, void *user) {
    if (strcmp(e->phase, "rl") != 0)
        return BT_OK;
    bt_trigger_event events[4];
    int n = bt_trigger_observe(&e->pol->triggers[e->ds], e->step, e->primary, events, 4);
    for (int i = 0; i < n; i++)
        bt_evals_trigger_event(e->pol, e->dataset->name, &events[i]);
    return BT_OK;
}

void bt_evals_listen_defaults(bt_controller_t *self) {
    bt_evals_listen(self, s_log_line, NULL);
    bt_evals_listen(self, s_accuracy, NULL);
    bt_evals_listen(self, s_scaling, NULL);
    bt_evals_listen(self, s_plateau, NULL);
    bt_evals_listen(self, s_trigger, NULL);
}
