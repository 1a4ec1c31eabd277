/*  controller.c — the run's controller: construction, the public API (controller.h), the run of
    the loop that drives the policies, events and progress; see rooms.h. */
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
bt_status bt_ctl_tuner_events(bt_policy *p, const bt_tuner_decision *d, int n) {
    for (int i = 0; i < n; i++) {
        bt_jsonl line;
        bt_jsonl_init(&line);
        bt_tuner_decision_jsonl(&d[i], bt_now() - p->ctl->t0, &line);
        bt_jsonl_str(&line, "variant", p->variant_name);
        if (d[i].source >= 0)
            bt_jsonl_str(&line, "source", bt_config_source_name(p->cfg, d[i].source));
        BT_TRY(bt_runlog_event(p->ctl->log, &line));
    }
    return BT_OK;
}

static void s_make_run_id(const char *name, char *out, size_t cap) {
    uint64_t r = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&r, sizeof r, 1, f) != 1)
        r = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(bt_now() * 1e9);
    if (f)
        fclose(f);
    snprintf(out, cap, "%.63s-%016llx", name, (unsigned long long)r);
}
static void s_limit_socket(void *sock, const bt_config *cfg) {
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

bt_controller_t *bt_controller_new(void *zmq_ctx, const char *endpoint,
                                   const bt_config *const *cfgs, int n, const char *config_json,
                                   bt_runlog_t *log) {
    BT_ASSERT(n >= 1 && n <= BT_CONFIG_MAX_VARIANTS);
    const bt_config *cfg = cfgs[0];
    bt_controller_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "controller: out of memory");
        return NULL;
    }
    self->cfg = cfg;
    self->config_json = config_json;
    self->log = log;
    self->t0 = bt_now();
    self->trainer = -1;
    s_make_run_id(cfg->run.name, self->run_id, sizeof self->run_id);
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
    bt_evals_listen_defaults(self);
    /* each policy's task and datasets now: a config they refuse fails before any worker starts */
    for (int k = 0; k < n; k++) {
        self->pol[k] = bt_policy_new(self, cfgs[k], k);
        if (!self->pol[k]) {
            bt_controller_destroy(&self);
            return NULL;
        }
        self->n_pol++;
    }
    return self;
}

void bt_controller_destroy(bt_controller_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_controller_t *self = *self_p;
    for (int k = 0; k < self->n_pol; k++)
        bt_policy_destroy(&self->pol[k]);
    if (self->sock)
        zmq_close(self->sock);
    bt_registry_destroy(&self->reg);
    bt_ckpt_snapshot_destroy(&self->light_pending);
    bt_ckpt_writer_destroy(&self->writer);
    free(self);
    *self_p = NULL;
}

void bt_controller_set_gone(bt_controller_t *self, bt_controller_gone_fn *fn, void *user) {
    self->gone = fn;
    self->gone_user = user;
}

void bt_controller_set_progress(bt_controller_t *self, bt_progress_fn *fn, void *user) {
    self->progress = fn;
    self->progress_user = user;
}

bt_controller_stats bt_controller_get_stats(const bt_controller_t *self) {
    return self->stats;
}

void bt_controller_set_prometheus(bt_controller_t *self, bt_prometheus_t *prom) {
    self->prom = prom;
}

void bt_controller_set_resume(bt_controller_t *self, const char *folder) {
    self->resuming = true;
    snprintf(self->resume, sizeof self->resume, "%s", folder ? folder : "");
}

/* ---- progress -------------------------------------------------------------------------------- */

static bt_progress s_progress(const bt_policy *p) {
    double elapsed = bt_now() - p->ctl->t0;
    int64_t step = p->step, total = p->cfg->grpo.steps;
    bt_progress out = {p->phase ? p->phase : "join",
                       step,
                       total,
                       p->last_reward,
                       p->last_accuracy,
                       p->tokens_per_s,
                       elapsed,
                       step > 0 ? elapsed / (double)step * (double)(total - step) : NAN};
    return out;
}

/*  phase is kept for bt_controller_progress. */
void bt_ctl_report(bt_policy *p, const char *phase, int64_t step, int64_t total,
                   double tokens_per_s) {
    p->phase = phase;
    p->tokens_per_s = tokens_per_s;
    if (p->ctl->progress) {
        bt_progress out = s_progress(p);
        out.step = step;
        out.total = total;
        p->ctl->progress(&out, p->ctl->progress_user);
    }
}

bt_progress bt_controller_progress(const bt_controller_t *self) {
    return s_progress(self->pol[0]);
}

/* ---- the policy files ------------------------------------------------------------------------ */

/*  Writes the latest published policy (version 0 before any) to dir as a model directory
    (config.json, model.safetensors in model.save_dtype, tokenizer files; bt_model_save), with
    LoRA the base model and the adapters beside it in PEFT's layout.  In a bf16 run these are the
    weights the rollouts used: the matrix-product weights as WEIGHTS carry them, rounded to
    bfloat16 (the float32 masters are in a checkpoint's optimizer.safetensors). */
static bt_status s_save_policy(const bt_policy *p, const char *dir) {
    const bt_config *c = p->cfg;
    bt_model *m = c->model_path[0] ? bt_model_load(c->model_path, bt_cpu())
                                   : bt_model_new(&c->model, bt_cpu(), (uint64_t)c->run.seed);
    bt_tokenizer_t *tok = NULL;
    bt_weights w;
    bt_weights_init(&w);
    bt_status st = m ? bt_tokenizer_for_model(c->model_path, &tok) : BT_ENOMEM;
    if (st == BT_OK && c->lora.rank > 0) /* WEIGHTS carry the adapters: the workers' A */
        st = bt_model_add_lora(m, &c->lora, (uint64_t)c->run.seed);
    if (st == BT_OK && p->weights) /* else version 0, as every worker builds it */
        st = bt_weights_from_msg(p->weights->msg, &w);
    if (st == BT_OK && p->weights)
        st = bt_weights_load(m, &w);
    if (st == BT_OK)
        st = bt_model_set_save_dtype(m, bt_config_resolve_save_dtype(c, bt_model_save_dtype(m)));
    if (st == BT_OK)
        st = bt_model_save(m, tok, dir);
    bt_weights_release(&w);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    return st;
}

bt_status bt_ctl_save_final(bt_policy *p) {
    const char *run_dir = bt_runlog_dir(p->ctl->log);
    char dir[BT_CONFIG_PATH_MAX + 16];
    if (p->ctl->n_pol > 1) { /* each variant's policy in a folder of its own */
        snprintf(dir, sizeof dir, "%s/variants/%s", run_dir, p->variant_name);
        BT_TRY(bt_mkdirs(dir));
        snprintf(dir, sizeof dir, "%s/variants/%s/model", run_dir, p->variant_name);
    } else
        snprintf(dir, sizeof dir, "%s/model", run_dir);
    BT_TRY(s_save_policy(p, dir));
    bt_ctl_event(p->ctl, "policy_saved", "dir", dir);
    return BT_OK;
}

/* ---- the run of the loop --------------------------------------------------------------------- */

/*  The checkpoint writer, when checkpoints are configured. */
static bt_status s_writer_open(bt_controller_t *self) {
    const bt_config *c = self->cfg;
    if (!(c->checkpoint.full_every_steps > 0 || c->checkpoint.full_every_secs > 0 ||
          c->checkpoint.full_every_epochs > 0 || c->checkpoint.light_every_steps > 0))
        return BT_OK;
    bt_ckpt_config cc = {.keep_last = c->checkpoint.keep_last,
                         .keep_every = c->checkpoint.keep_every,
                         .pause_ms = c->debug.save_pause_ms};
    snprintf(cc.dir, sizeof cc.dir, "%s", bt_runlog_dir(self->log));
    snprintf(cc.mirror_dir, sizeof cc.mirror_dir, "%s", c->checkpoint.mirror_dir);
    self->writer = bt_ckpt_writer_new(&cc);
    return self->writer ? BT_OK : BT_EIO;
}

/*  Everything that can move after a turn: finished evaluations, each policy's state machine, the
    population's gate; repeated while a gate opens (a new step's rollouts go out at once). */
static bt_status s_advance(bt_controller_t *self) {
    BT_TRY(bt_loop_fatal(self));
    if (!self->joined) {
        bt_status st = bt_jobs_joined(self);
        if (st == BT_PENDING)
            return BT_OK;
        BT_TRY(st);
        BT_TRY(s_writer_open(self));
    }
    for (int k = 0; k < self->n_pol; k++)
        BT_TRY(bt_evals_poll(self->pol[k]));
    for (int round = 0; round < 2 * BT_CONFIG_MAX_VARIANTS + 2; round++) {
        for (int k = 0; k < self->n_pol; k++) {
            bt_status st = bt_policy_advance(self->pol[k]);
            if (st != BT_OK && st != BT_PENDING)
                return st;
        }
        bool at_gate[BT_CONFIG_MAX_VARIANTS];
        for (int k = 0; k < self->n_pol; k++)
            at_gate[k] = self->pol[k]->state == BT_POLICY_GATE;
        bt_status st = bt_population_advance(self);
        if (st != BT_OK && st != BT_PENDING)
            return st;
        bool opened = false; /* a gate opened or a PBT copy began: that policy moves now */
        for (int k = 0; k < self->n_pol; k++)
            opened |= at_gate[k] && self->pol[k]->state != BT_POLICY_GATE;
        if (!opened)
            break;
    }
    return BT_OK;
}

static bool s_all_in(const bt_controller_t *self, bt_policy_state state) {
    for (int k = 0; k < self->n_pol; k++)
        if (self->pol[k]->state != state)
            return false;
    return true;
}

/*  Whether a policy is finishing: at the gate after its last step, or in its final state. */
static bool s_finishing(const bt_controller_t *self) {
    for (int k = 0; k < self->n_pol; k++) {
        const bt_policy *p = self->pol[k];
        if (p->state == BT_POLICY_FINAL ||
            (p->state == BT_POLICY_GATE && p->step >= p->cfg->grpo.steps))
            return true;
    }
    return false;
}

bt_status bt_controller_start(bt_controller_t *self) {
    for (int k = 0; k < self->n_pol; k++)
        bt_ctl_report(self->pol[k], "join", 0, 0, NAN);
    for (;;) {
        BT_TRY(s_advance(self));
        if (self->all_started || s_all_in(self, BT_POLICY_DONE))
            return BT_OK;
        BT_TRY(bt_loop_turn(self));
    }
}

bt_status bt_controller_step(bt_controller_t *self, bool *done) {
    int64_t steps = self->steps_done;
    for (;;) {
        BT_TRY(s_advance(self));
        *done = s_all_in(self, BT_POLICY_DONE);
        /* a last step returns once its policy is saved */
        if (*done || (self->steps_done > steps && !s_finishing(self)))
            return BT_OK;
        BT_TRY(bt_loop_turn(self));
    }
}

bt_status bt_controller_stop(bt_controller_t *self) {
    self->stopping = true; /* a fatal failure is reported already: now the workers leave */
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
    for (int k = 0; k < self->n_pol; k++)
        bt_train_clock_stop(&self->pol[k]->clock, bt_now());
    double total = 0; /* with variants: each one's share of the workers' compute */
    for (int k = 0; self->n_pol > 1 && k < self->n_pol; k++)
        total += self->pol[k]->worker_s;
    for (int k = 0; self->n_pol > 1 && k < self->n_pol; k++) {
        const bt_policy *v = self->pol[k];
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
    bt_ctl_report(self->pol[0], "done", self->pol[0]->step, self->pol[0]->cfg->grpo.steps, NAN);
    return BT_OK;
}
