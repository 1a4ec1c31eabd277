/*  controller.c — construction, the public API (controller.h), events and progress; see rooms.h. */
#include "rooms.h"

int64_t bt_ctl_now_ms(void) {
    return (int64_t)(bt_now() * 1000.0);
}

/*  Starts an events.jsonl line: the event's name and the seconds since the start. */
void bt_ctl_event_line(const bt_controller_t *self, bt_jsonl *line, const char *event) {
    bt_jsonl_init(line);
    bt_jsonl_str(line, "event", event);
    bt_jsonl_num(line, "time", bt_now() - self->t0);
}

void bt_ctl_event(bt_controller_t *self, const char *event, const char *key, const char *value) {
    bt_jsonl line;
    bt_ctl_event_line(self, &line, event);
    if (key)
        bt_jsonl_str(&line, key, value);
    bt_runlog_event(self->log, &line);
}

/*  The tuner's decisions as events; they already changed the values the next step uses. */
bt_status bt_ctl_tuner_events(bt_controller_t *self, const bt_tuner_decision *d, int n) {
    for (int i = 0; i < n; i++) {
        bt_jsonl line;
        bt_jsonl_init(&line);
        bt_tuner_decision_jsonl(&d[i], bt_now() - self->t0, &line);
        bt_jsonl_str(&line, "variant", self->variant_name);
        if (d[i].source >= 0)
            bt_jsonl_str(&line, "source", bt_config_source_name(self->cfg, d[i].source));
        BT_TRY(bt_runlog_event(self->log, &line));
    }
    return BT_OK;
}

/*  A controller of variant k of cfg (its state before any work), or NULL out of memory. */
static bt_controller_t *s_alloc(const bt_run_config *cfg, int k, const char *config_json,
                                bt_runlog_t *log, double t0) {
    bt_controller_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "controller: out of memory");
        return NULL;
    }
    self->cfg = cfg;
    self->variant = k;
    self->variant_name = cfg->n_variants > 0 ? cfg->variants[k].name : "main";
    self->config_json = config_json;
    self->log = log;
    self->t0 = t0;
    self->last_accuracy = NAN;
    self->last_reward = NAN;
    self->wait_since = NAN;
    bt_tuner_config tc;
    bt_config_tuner(cfg, &tc);
    bt_tuner_init(&self->tuner, &tc);
    return self;
}

/*  run.name and 64 random bits: two invocations of one config never share an id. */
static void s_make_run_id(const char *name, char *out, size_t cap) {
    uint64_t r = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&r, sizeof r, 1, f) != 1)
        r = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(bt_now() * 1e9);
    if (f)
        fclose(f);
    snprintf(out, cap, "%.63s-%016llx", name, (unsigned long long)r);
}

/*  What a peer can cost before it authenticates: no message beyond the largest one a run sends
    (a WEIGHTS tensor or a rollout batch of this model), and a half-open connection dropped after
    a few seconds; the process may hold as many descriptors as the system lets it. */
static void s_limit_socket(void *sock, const bt_run_config *cfg) {
    int linger = 0, handshake_ms = 5000;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_HANDSHAKE_IVL, &handshake_ms, sizeof handshake_ms);
    const bt_model_config *m = &cfg->model;
    double tensor =
        4.0 * (double)m->hidden_size *
        (double)(m->vocab_size > m->intermediate_size ? m->vocab_size : m->intermediate_size);
    double batch = 8.0 * (double)cfg->grpo.prompts_per_step * (double)cfg->grpo.group_size *
                   (double)m->max_position_embeddings;
    double limit = 2.0 * fmax(tensor, batch) + (64 << 20);
    int64_t max = limit > 9e18 || cfg->model_path[0] ? -1 : (int64_t)limit; /* a folder: unknown */
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
    struct rlimit fds;
    if (getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur < fds.rlim_max) {
        fds.rlim_cur = fds.rlim_max;
        setrlimit(RLIMIT_NOFILE, &fds);
    }
}

bt_controller_t *bt_controller_new(void *zmq_ctx, const char *endpoint, const bt_run_config *cfg,
                                   const char *config_json, bt_runlog_t *log) {
    bt_controller_t *self = s_alloc(cfg, 0, config_json, log, bt_now());
    if (!self)
        return NULL;
    self->hub = calloc(1, sizeof *self->hub);
    if (!self->hub) {
        bt_fail(BT_ENOMEM, "controller: out of memory");
        bt_controller_destroy(&self);
        return NULL;
    }
    self->hub->v[self->hub->n++] = self;
    self->hub->trainer = -1;
    s_make_run_id(cfg->run.name, self->hub->run_id, sizeof self->hub->run_id);
    self->reg = bt_registry_new(cfg->workers.expiry_ms);
    self->sock = zmq_socket(zmq_ctx, ZMQ_ROUTER);
    if (self->sock)
        s_limit_socket(self->sock, cfg);
    if (self->sock && bt_curve_serve(zmq_ctx, self->sock) != BT_OK) { /* CURVE when keys are set */
        bt_controller_destroy(&self);
        return NULL;
    }
    if (!self->reg || !self->sock || zmq_bind(self->sock, endpoint) != 0) {
        bt_fail(BT_EIO, "controller: cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
        bt_controller_destroy(&self);
        return NULL;
    }
    /* the task and datasets now: a config they refuse fails before any worker starts */
    if (bt_evals_setup(self) != BT_OK ||
        (cfg->workers.trainer > 1 && !(self->store = bt_store_serve(0, &self->store_port))))
        bt_controller_destroy(&self);
    return self;
}

bt_controller_t *bt_controller_new_variant(bt_controller_t *first, const bt_run_config *cfg,
                                           int k) {
    BT_ASSERT(first && k > 0 && k < BT_CONFIG_MAX_VARIANTS && k < cfg->n_variants);
    bt_controller_t *self = s_alloc(cfg, k, first->config_json, first->log, first->t0);
    if (!self)
        return NULL;
    self->hub = first->hub;
    self->sock = first->sock; /* borrowed */
    self->reg = first->reg;
    if (bt_evals_setup(self) != BT_OK) {
        free(self);
        return NULL;
    }
    self->hub->v[self->hub->n++] = self;
    return self;
}

void bt_controller_destroy(bt_controller_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_controller_t *self = *self_p;
    bool owner = self->variant == 0; /* variant 0 owns the socket, registry and hub */
    if (self->sock && owner)
        zmq_close(self->sock);
    if (owner) {
        bt_registry_destroy(&self->reg);
        free(self->hub);
    }
    for (int i = 0; i < S_MAX_EVALS; i++)
        if (self->evals[i].active) {
            for (int j = 0; j < self->evals[i].n_jobs; j++)
                bt_msg_destroy(&self->evals[i].jobs[j].result);
            bt_loop_weights_release(&self->evals[i].weights);
        }
    bt_loop_weights_release(&self->weights);
    for (int i = 0; i < S_AHEAD; i++)
        if (self->ahead[i].active)
            bt_policy_rollouts_release(&self->ahead[i]);
    bt_ckpt_writer_destroy(&self->writer);
    bt_ckpt_snapshot_destroy(&self->light_pending);
    bt_msg_destroy(&self->snap);
    bt_store_destroy(&self->store);
    for (int k = 0; k < BT_CONFIG_MAX_SOURCES; k++)
        bt_task_destroy(&self->sources[k]);
    bt_mixture_destroy(&self->mix);
    free(self->saved_data);
    free(self);
    *self_p = NULL;
}

void bt_controller_set_gone(bt_controller_t *self, bt_controller_gone_fn *fn, void *user) {
    self->hub->gone = fn;
    self->hub->gone_user = user;
}

const char *bt_controller_run_id(const bt_controller_t *self) {
    return self->hub->run_id;
}

void bt_controller_set_progress(bt_controller_t *self, bt_progress_fn *fn, void *user) {
    self->progress = fn;
    self->progress_user = user;
}

bt_controller_stats bt_controller_get_stats(const bt_controller_t *self) {
    return self->stats;
}

/*  phase is kept for bt_controller_progress. */
void bt_ctl_report(bt_controller_t *self, const char *phase, int64_t step, int64_t total,
                     double tokens_per_s) {
    self->phase = phase;
    self->tokens_per_s = tokens_per_s;
    if (self->progress) {
        bt_progress p = bt_controller_progress(self);
        p.step = step;
        p.total = total;
        self->progress(&p, self->progress_user);
    }
}

bt_progress bt_controller_progress(const bt_controller_t *self) {
    double elapsed = bt_now() - self->t0;
    int64_t step = self->step, total = self->cfg->grpo.steps;
    bt_progress p = {self->phase ? self->phase : "join",
                     step,
                     total,
                     self->last_reward,
                     self->last_accuracy,
                     self->tokens_per_s,
                     elapsed,
                     step > 0 ? elapsed / (double)step * (double)(total - step) : NAN};
    return p;
}

bt_status bt_controller_start(bt_controller_t *self) {
    bt_ctl_report(self, "join", 0, 0, NAN);
    BT_TRY(bt_jobs_await_workers(self));
    bt_ctl_event(self, "workers_ready", NULL, NULL);
    const bt_run_config *c = self->cfg;
    if (c->checkpoint.full_every_steps > 0 || c->checkpoint.full_every_secs > 0 ||
        c->checkpoint.full_every_epochs > 0 || c->checkpoint.light_every_steps > 0) {
        bt_ckpt_config cc = {.keep_last = c->checkpoint.keep_last,
                             .keep_every = c->checkpoint.keep_every,
                             .pause_ms = c->debug.save_pause_ms};
        snprintf(cc.dir, sizeof cc.dir, "%s", bt_runlog_dir(self->log));
        snprintf(cc.mirror_dir, sizeof cc.mirror_dir, "%s", c->checkpoint.mirror_dir);
        self->writer = bt_ckpt_writer_new(&cc);
        if (!self->writer)
            return BT_EIO;
    }
    if (self->resuming) {
        BT_TRY(bt_recovery_resume(self));
        bt_ctl_report(self, "rl", self->step, c->grpo.steps, NAN);
        return BT_OK;
    }
    bt_train_clock_start(&self->clock, bt_now());
    BT_TRY(bt_policy_warm_start(self));
    bt_ctl_report(self, "rl", 0, c->grpo.steps, NAN);
    return BT_OK;
}

bt_status bt_controller_step(bt_controller_t *self, bool *done) {
    const bt_run_config *c = self->cfg;
    *done = self->step >= c->grpo.steps;
    if (*done)
        return BT_OK;
    double t_start = bt_now();
    bt_lr_schedule sched;
    bt_config_lr(c, BT_CONFIG_PHASE_GRPO, &sched);
    double lr = bt_lr_at(&sched, self->step) * bt_tuner_lr_scale(&self->tuner);
    bt_rollout_batch batch;
    bt_rollout_batch_init(&batch);
    bt_trainer_stats ts = {0};
    bool updated = false;
    int64_t oldest = 0, version = self->version;
    bt_status st = bt_policy_rollout(self, &batch, &oldest);
    if (st == BT_OK)
        st = bt_policy_train(self, &batch, lr, &ts, &updated);
    if (st == BT_ESTATE) { /* the trainer lost its state: restore it and run the steps again */
        bt_rollout_batch_release(&batch);
        BT_TRY(bt_recovery_recover(self, bt_last_error()));
        bt_ctl_report(self, "rl", self->step, c->grpo.steps, NAN);
        return BT_OK;
    }
    char why[160];
    if (st == BT_OK && updated && bt_recovery_diverged(self, &ts, why, sizeof why)) {
        bt_rollout_batch_release(&batch);
        BT_TRY(bt_recovery_rollback(self, why));
        bt_ctl_report(self, "rl", self->step, c->grpo.steps, NAN);
        return BT_OK;
    }
    double reward = 0, length = 0;
    for (int64_t i = 0; i < batch.n; i++) {
        reward += batch.rewards[i];
        length += (double)batch.lengths[i];
    }
    int64_t n = batch.n;
    /* per source: what the tuner's mixture rule and the train line see; the curriculum's streaks */
    bt_tuner_step_stats tss = {.kl = ts.kl, .entropy = ts.entropy, .n_samples = ts.sequences};
    tss.n_sources = self->n_sources;
    int64_t prompts[BT_CONFIG_MAX_SOURCES] = {0};
    for (int64_t g = 0; g < batch.n_prompts; g++) {
        int k = BT_PROMPT_SOURCE(batch.indices[g]), right = 0;
        prompts[k]++;
        for (int64_t j = 0; j < batch.group_size; j++) {
            int64_t i = g * batch.group_size + j;
            right += batch.correct[i];
            tss.sources[k].n += 1;
            tss.sources[k].correct += batch.correct[i];
            tss.sources[k].reward += batch.rewards[i];
            tss.sources[k].reward_sq += batch.rewards[i] * batch.rewards[i];
        }
        bt_mixture_observe(self->mix, self->sources, batch.indices[g], right, batch.group_size);
    }
    bt_rollout_batch_release(&batch);
    BT_TRY(st);
    self->step++;
    double dt = bt_now() - t_start, tps = length / dt;
    self->last_reward = n ? reward / (double)n : NAN;
    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "train");
    bt_jsonl_int(&line, "step", self->step);
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_num(&line, "time", bt_now() - self->t0);
    bt_jsonl_num(&line, "reward_mean", self->last_reward);
    bt_jsonl_num(&line, "loss", ts.loss);
    bt_jsonl_num(&line, "kl", ts.kl);
    bt_jsonl_num(&line, "clip_frac", ts.clip_frac);
    bt_jsonl_num(&line, "entropy", ts.entropy);
    bt_jsonl_num(&line, "grad_norm", ts.grad_norm);
    bt_jsonl_num(&line, "lr", updated ? ts.lr : lr); /* the one AdamW applied */
    bt_jsonl_num(&line, "response_len_mean", n ? length / (double)n : NAN);
    bt_jsonl_num(&line, "tokens_per_s", tps);
    bt_jsonl_num(&line, "padding", updated ? self->padding : NAN);
    self->tokens += length;
    bt_jsonl_num(&line, "tokens", self->tokens);
    bt_jsonl_int(&line, "version", self->version);
    if (c->grpo.max_staleness > 0) /* policy versions between the oldest sampler and the update */
        bt_jsonl_int(&line, "staleness", version - oldest);
    if (self->epoch_size)
        bt_jsonl_int(&line, "epoch", bt_policy_epoch(self));
    if (c->data.curriculum.window > 0) {
        bt_jsonl_int(&line, "dropped", self->dropped_step);
        bt_jsonl_int(&line, "dropped_total", bt_mixture_dropped(self->mix));
    }
    for (int k = 0; k < self->n_sources && c->data.n_sources > 0; k++) {
        char key[96];
        const char *name = bt_config_source_name(c, k);
        double m = tss.sources[k].n;
        snprintf(key, sizeof key, "prompts.%s", name);
        bt_jsonl_int(&line, key, prompts[k]);
        snprintf(key, sizeof key, "reward_mean.%s", name);
        bt_jsonl_num(&line, key, m > 0 ? tss.sources[k].reward / m : NAN);
        snprintf(key, sizeof key, "accuracy.%s", name);
        bt_jsonl_num(&line, key, m > 0 ? tss.sources[k].correct / m : NAN);
        snprintf(key, sizeof key, "weight.%s", name);
        bt_jsonl_num(&line, key, self->step_weights[k]);
    }
    BT_TRY(bt_runlog_metric(self->log, &line));
    if (updated) { /* the tuner sees the step; its decisions apply from the next one */
        bt_tuner_decision dec[BT_TUNER_MAX_DECISIONS];
        int nd = bt_tuner_after_step(&self->tuner, self->step, &tss, dec, BT_TUNER_MAX_DECISIONS);
        BT_TRY(bt_ctl_tuner_events(self, dec, nd));
    }
    bool last = self->step == c->grpo.steps;
    BT_TRY(bt_evals_after_step(self, last));
    /* the plateau rule's evaluation decides the next step's learning rate: wait for it, so the
       decision lands at the same step whatever the timing (a resumed run must match) */
    for (int i = 0; i < S_MAX_EVALS && self->tuner.cfg.lr_plateau.enabled; i++)
        if (self->evals[i].active && self->evals[i].step == self->step &&
            !strcmp(c->eval.datasets[self->evals[i].ds].name, self->tuner.cfg.lr_plateau.dataset))
            BT_TRY(bt_evals_wait(self, &self->evals[i]));
    st = bt_recovery_after_step(self, last);
    if (st == BT_ESTATE) { /* lost while snapshotting: as above */
        BT_TRY(bt_recovery_recover(self, bt_last_error()));
        bt_ctl_report(self, "rl", self->step, c->grpo.steps, NAN);
        return BT_OK;
    }
    BT_TRY(st);
    if (last) { /* the run's results are complete when the last step returns */
        BT_TRY(bt_evals_wait(self, NULL));
        if (self->writer)
            BT_TRY(bt_recovery_writer_wait(self));
        bt_recovery_ckpt_poll(self);
        char dir[BT_CONFIG_PATH_MAX + 16];
        if (self->hub->n > 1) { /* each variant's policy in a folder of its own */
            snprintf(dir, sizeof dir, "%s/variants/%s", bt_runlog_dir(self->log),
                     self->variant_name);
            BT_TRY(bt_mkdirs(dir));
            snprintf(dir, sizeof dir, "%s/variants/%s/model", bt_runlog_dir(self->log),
                     self->variant_name);
        } else
            snprintf(dir, sizeof dir, "%s/model", bt_runlog_dir(self->log));
        BT_TRY(bt_controller_save_policy(self, dir));
        bt_ctl_event(self, "policy_saved", "dir", dir);
    }
    bt_ctl_report(self, "rl", self->step, c->grpo.steps, tps);
    *done = last;
    return BT_OK;
}

void bt_controller_set_resume(bt_controller_t *self, const char *folder) {
    self->resuming = true;
    snprintf(self->resume, sizeof self->resume, "%s", folder ? folder : "");
}

bt_status bt_controller_save_policy(bt_controller_t *self, const char *dir) {
    const bt_run_config *c = self->cfg;
    bt_model *m = c->model_path[0] ? bt_model_load(c->model_path, bt_cpu())
                                   : bt_model_new(&c->model, bt_cpu(), (uint64_t)c->run.seed);
    bt_tokenizer_t *tok = NULL;
    bt_weights w;
    bt_weights_init(&w);
    bt_status st = m ? bt_tokenizer_for_model(c->model_path, &tok) : BT_ENOMEM;
    if (st == BT_OK && self->weights) /* else version 0, as every worker builds it */
        st = bt_weights_from_msg(self->weights->msg, &w);
    if (st == BT_OK && self->weights)
        st = bt_weights_load(m, &w);
    if (st == BT_OK)
        st = bt_model_save(m, tok, dir);
    bt_weights_release(&w);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    return st;
}

bt_status bt_controller_wait_evals(bt_controller_t *self) {
    return bt_evals_wait(self, NULL);
}

const char *bt_controller_variant_name(const bt_controller_t *self) {
    return self->variant_name;
}

bt_status bt_controller_stop(bt_controller_t *self) {
    self->hub->stopping = true; /* a fatal failure is reported already: now the workers leave */
    bt_registry_cancel_pending(self->reg); /* nothing is handed out after the run */
    const bt_controller_stats *s = &self->stats;
    bt_jsonl counters; /* what the controller refused or recovered from (docs/protocol.md) */
    bt_ctl_event_line(self, &counters, "counters");
    bt_jsonl_int(&counters, "malformed", s->malformed);
    bt_jsonl_int(&counters, "unknown_peer", s->unknown_peer);
    bt_jsonl_int(&counters, "late_results", s->late_results);
    bt_jsonl_int(&counters, "rejected_results", s->rejected_results);
    bt_jsonl_int(&counters, "wrong_run", s->wrong_run);
    bt_jsonl_int(&counters, "refused_weights", s->refused_weights);
    bt_jsonl_int(&counters, "failed_tasks", s->failed_tasks);
    bt_jsonl_int(&counters, "lost_workers", s->lost_workers);
    bt_jsonl_int(&counters, "requeued", s->requeued);
    bt_jsonl_int(&counters, "quarantined", s->quarantined);
    bt_jsonl_int(&counters, "restores", s->restores);
    bt_runlog_event(self->log, &counters);
    bt_train_clock_stop(&self->clock, bt_now());
    double total = 0; /* with variants: each one's share of the workers' compute */
    for (int k = 0; self->hub->n > 1 && k < self->hub->n; k++)
        total += self->hub->v[k]->worker_s;
    for (int k = 0; self->hub->n > 1 && k < self->hub->n; k++) {
        const bt_controller_t *v = self->hub->v[k];
        bt_jsonl line;
        bt_ctl_event_line(self, &line, "variant_share");
        bt_jsonl_str(&line, "variant", v->variant_name);
        bt_jsonl_int(&line, "steps", v->step);
        bt_jsonl_num(&line, "worker_s", v->worker_s);
        bt_jsonl_num(&line, "share", total > 0 ? v->worker_s / total : NAN);
        BT_TRY(bt_runlog_event(self->log, &line));
    }
    for (int32_t i = 0; i < bt_registry_worker_count(self->reg); i++) {
        bt_worker_info *w = bt_registry_worker(self->reg, i);
        if (w->state == BT_WORKER_LOST)
            continue;
        bt_msg_t *stop = bt_msg_new(BT_MSG_STOP);
        if (stop)
            bt_loop_send(self, &stop, w);
    }
    int64_t deadline = bt_ctl_now_ms() + 10000;
    while (bt_ctl_now_ms() < deadline) {
        int live = 0;
        for (int r = 0; r < BT_ROLE_COUNT; r++)
            live += bt_registry_live(self->reg, (bt_role)r);
        if (!live)
            break;
        BT_TRY(bt_loop_turn(self));
    }
    bt_ctl_report(self, "done", self->step, self->cfg->grpo.steps, NAN);
    return BT_OK;
}
