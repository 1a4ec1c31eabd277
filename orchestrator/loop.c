/*  loop.c — the one poll: receiving and checking messages, handing out jobs, timers (PINGs,
    expiry, deadlines); see rooms.h. */
#include "rooms.h"

bt_pinned *bt_loop_weights_ref(bt_pinned *w) {
    if (w)
        w->refs++;
    return w;
}

void bt_loop_weights_release(bt_pinned **w_p) {
    bt_pinned *w = *w_p;
    *w_p = NULL;
    if (w && --w->refs == 0) {
        bt_msg_destroy(&w->msg);
        free(w);
    }
}

bt_status bt_loop_send(bt_controller_t *self, bt_msg_t **msg, const bt_worker_info *w) {
    bt_msg_set_run(*msg, self->run_id);
    double weights = 0; /* the tensors' bytes of a WEIGHTS, for the Prometheus counter */
    int64_t variant = 0;
    if (self->prom && bt_msg_type_of(*msg) == BT_MSG_WEIGHTS) {
        for (int i = 0; i < bt_msg_tensor_count(*msg); i++)
            weights += (double)bt_msg_tensor_at(*msg, i).nbytes;
        if (bt_msg_has(*msg, "variant"))
            bt_msg_get_int(*msg, "variant", 0, self->n_pol - 1, &variant);
    }
    bt_status st = bt_proto_send(msg, self->sock, w->peer, w->peer_len);
    if (st == BT_OK && weights > 0) {
        char labels[BT_PROMETHEUS_LABELS_MAX] = "";
        bt_prometheus_label(labels, sizeof labels, "variant", self->pol[variant]->variant_name);
        bt_prometheus_add(self->prom, "baton_weights_sent_bytes_total",
                          "Bytes of weight tensors the controller sent in WEIGHTS messages", labels,
                          weights);
    }
    return st;
}

/*  The stored WEIGHTS for one more recipient; the tensors are shared, not copied. */
bt_msg_t *bt_loop_weights_copy(const bt_msg_t *src) {
    bt_msg_t *m = bt_msg_new(BT_MSG_WEIGHTS);
    int64_t version = 0;
    int64_t variant = 0;
    if (bt_msg_has(src, "variant") &&
        bt_msg_get_int(src, "variant", 0, BT_CONFIG_MAX_VARIANTS - 1, &variant) != BT_OK)
        bt_msg_destroy(&m);
    if (!m || bt_msg_get_int(src, "version", 0, BT_WIRE_INT_MAX, &version) != BT_OK ||
        bt_msg_set_int(m, "version", version) != BT_OK ||
        bt_msg_set_int(m, "variant", variant) != BT_OK) {
        bt_msg_destroy(&m);
        return NULL;
    }
    for (int i = 0; i < bt_msg_tensor_count(src); i++)
        if (bt_msg_add_tensor_shared(m, src, i) != BT_OK) {
            bt_msg_destroy(&m);
            return NULL;
        }
    return m;
}

/*  Rollout workers follow the latest weights; eval workers get an evaluation's pinned weights
    just before its shard (bt_jobs_pin_weights). */
void bt_loop_send_weights(bt_policy *p, const bt_worker_info *w) {
    if (!p->weights || w->role != BT_ROLE_ROLLOUT || w->state == BT_WORKER_LOST)
        return;
    bt_msg_t *copy = bt_loop_weights_copy(p->weights->msg);
    if (!copy || bt_loop_send(p->ctl, &copy, w) != BT_OK)
        bt_log(BT_LOG_WARN, "controller: weights not sent to %s: %s", w->name, bt_last_error());
}

/*  INVALID {reason, leave}: leave tells the worker that joining again cannot help (it belongs to
    another run or speaks another protocol), so it exits with the reason. */
static void s_send_invalid(bt_controller_t *self, const uint8_t *peer, size_t len,
                           const char *reason, bool leave) {
    bt_msg_t *m = bt_msg_new(BT_MSG_INVALID);
    if (!m)
        return;
    bt_msg_set_str(m, "reason", reason);
    bt_msg_set_bool(m, "leave", leave);
    bt_msg_set_run(m, self->run_id);
    bt_proto_send(&m, self->sock, peer, len);
}

/*  A worker's text made safe for a terminal and a log line: control bytes become '?', and an
    empty text says so. */
void bt_loop_sanitise(const char *in, char *out, size_t cap) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)(in ? in : ""); *p && n + 1 < cap; p++)
        out[n++] = (*p < 0x20 || *p == 0x7f) ? '?' : (char)*p;
    out[n] = '\0';
    if (n == 0)
        snprintf(out, cap, "(the worker gave no reason)");
}

static void s_on_hello(bt_controller_t *self, bt_msg_t *m, const uint8_t *peer, size_t len) {
    const char *role_name = NULL, *name = NULL;
    bt_role role;
    int64_t proto = 0;
    self->start_error[0] = '\0'; /* a newcomer may well start */
    if (bt_msg_get_str(m, "role", 16, &role_name) != BT_OK ||
        bt_role_parse(role_name, &role) != BT_OK || bt_msg_get_str(m, "name", 63, &name) != BT_OK) {
        self->stats.malformed++;
        s_send_invalid(self, peer, len, bt_last_error(), false);
        return;
    }
    char why[256];
    const char *user = bt_msg_user(m), *slash = strchr(user, '/');
    if (slash && ((size_t)(slash - user) != strlen(role_name) ||
                  strncmp(user, role_name, strlen(role_name)) != 0)) {
        /* a key listed under --allow DIR/ROLE/ joins as that role only */
        snprintf(why, sizeof why, "the key %s may join as %.*s only, not as %s", slash + 1,
                 (int)(slash - user), user, role_name);
        bt_jsonl line;
        bt_ctl_event_line(self, &line, "worker_refused");
        bt_jsonl_str(&line, "key", user);
        bt_jsonl_str(&line, "worker", name);
        bt_jsonl_str(&line, "reason", why);
        bt_runlog_event(self->log, &line);
        s_send_invalid(self, peer, len, why, true);
        return;
    }
    if (bt_msg_get_int(m, "proto", 0, BT_WIRE_INT_MAX, &proto) != BT_OK ||
        proto != BT_PROTO_VERSION) {
        snprintf(why, sizeof why, "this controller speaks protocol %d, the worker %lld",
                 BT_PROTO_VERSION, (long long)proto);
        self->stats.wrong_run++;
        s_send_invalid(self, peer, len, why, true);
        return;
    }
    int32_t id = bt_registry_join(self->reg, role, name, peer, len, bt_ctl_now_ms());
    if (id < 0) {
        s_send_invalid(self, peer, len, bt_last_error(), false);
        return;
    }
    bt_worker_info *w = bt_registry_worker(self->reg, id);
    for (int k = 0; id < S_TRACK && k < self->n_pol; k++) { /* it may hold anything */
        self->pol[k]->worker_version[id] = -1;
        memset(self->pol[k]->speed[id], 0, sizeof self->pol[k]->speed[id]);
    }
    bt_msg_t *welcome = bt_msg_new(BT_MSG_WELCOME);
    int64_t shape[1] = {(int64_t)strlen(self->config_json)};
    if (!welcome || bt_msg_set_int(welcome, "worker", id) != BT_OK ||
        bt_msg_set_int(welcome, "heartbeat_ms", self->cfg->workers.heartbeat_ms) != BT_OK ||
        bt_msg_set_int(welcome, "controller_timeout_ms",
                       self->cfg->workers.controller_timeout_ms) != BT_OK ||
        bt_msg_add_tensor(welcome, "config", BT_U8, 1, shape, self->config_json) != BT_OK ||
        bt_loop_send(self, &welcome, w) != BT_OK) {
        bt_msg_destroy(&welcome);
        bt_log(BT_LOG_WARN, "controller: WELCOME to %s failed: %s", name, bt_last_error());
        return;
    }
    for (int k = 0; k < self->n_pol; k++)
        bt_loop_send_weights(self->pol[k], w);
    bt_ctl_event(self, "worker_joined", "worker", name);
}

/*  The trainer job `from` holds now, when it is one that publishes weights (train, sft, restore
    on rank 0) and is still in flight; NULL otherwise. */
static const bt_job *s_publishing_job(bt_controller_t *self, const bt_worker_info *from) {
    if (from->role != BT_ROLE_TRAINER || from->task < 0 ||
        bt_registry_task_state(self->reg, from->task) != BT_TASK_ASSIGNED)
        return NULL;
    const bt_job *j = bt_registry_task_user(self->reg, from->task);
    return j && j->publish ? j : NULL;
}

static void s_on_weights(bt_controller_t *self, bt_msg_t **m, const bt_worker_info *from) {
    int64_t version, variant = 0;
    int n_variants = self->n_pol;
    const bt_job *job = s_publishing_job(self, from);
    if (!job || bt_msg_get_int(*m, "version", 0, BT_WIRE_INT_MAX, &version) != BT_OK ||
        (bt_msg_has(*m, "variant") &&
         bt_msg_get_int(*m, "variant", 0, n_variants - 1, &variant) != BT_OK) ||
        job->pol->variant != variant) {
        /* only the trainer holding the variant's publishing job in flight may publish */
        self->stats.refused_weights++;
        bt_jsonl line;
        bt_ctl_event_line(self, &line, "weights_refused");
        bt_jsonl_str(&line, "worker", from->name);
        bt_jsonl_str(&line, "role", bt_role_name(from->role));
        bt_runlog_event(self->log, &line);
        return;
    }
    bt_policy *p = self->pol[variant]; /* the variant's policy keeps them */
    bt_pinned *fresh = calloc(1, sizeof *fresh);
    if (!fresh) {
        bt_log(BT_LOG_ERROR, "controller: out of memory for weights");
        return;
    }
    *fresh = (bt_pinned){.msg = *m, .version = version, .refs = 1};
    *m = NULL;
    bt_loop_weights_release(&p->weights);
    p->weights = fresh;
    p->version = version;
    for (int32_t i = 0; i < bt_registry_worker_count(self->reg); i++)
        bt_loop_send_weights(p, bt_registry_worker(self->reg, i));
}

/*  A FAIL, or a RESULT refused by bt_jobs_check_result: I/O failures are re-queued (up to
    S_MAX_ATTEMPTS hand-outs); BT_ESTATE ends the job for a restore; anything else fails the same
    way again (a shape, a range, the memory it needs), so the run stops with it at once. */
static void s_on_failure(bt_controller_t *self, int64_t task, bt_job *job, bt_worker_info *w,
                         bt_status code, const char *text) {
    char err[512];
    bt_loop_sanitise(text, err, sizeof err);
    snprintf(self->last_fail, sizeof self->last_fail, "%s: %.446s", w->name, err);
    self->stats.failed_tasks++;
    bt_jsonl line;
    bt_ctl_event_line(self, &line, "task_failed");
    bt_jsonl_str(&line, "kind", job ? bt_job_kind_name(job->kind) : "?");
    bt_jsonl_str(&line, "worker", w->name);
    bt_jsonl_str(&line, "error", err);
    bt_jsonl_int(&line, "status", code);
    bt_runlog_event(self->log, &line);
    bool trainer = job && job->role == BT_ROLE_TRAINER;
    if (code == BT_ESTATE && !trainer) /* an eval worker without the pinned weights: send them */
        for (int k = 0; w->id < S_TRACK && k < self->n_pol; k++)
            self->pol[k]->worker_version[w->id] = -1;
    if (code == BT_EIO || code == BT_EFORMAT || (code == BT_ESTATE && !trainer)) {
        /* a retry may succeed: a link, a bad message, weights sent again */
        int32_t attempts = bt_registry_task_attempts(self->reg, task);
        if (attempts < S_MAX_ATTEMPTS || !job)
            return;
        bt_registry_cancel(self->reg, task); /* handed out S_MAX_ATTEMPTS times: enough */
        snprintf(err, sizeof err, "%s", self->last_fail);
        snprintf(self->last_fail, sizeof self->last_fail,
                 "controller: a %s job failed %d times; the last time: %.400s",
                 bt_job_kind_name(job->kind), attempts, err);
        job->status = BT_EIO;
        return;
    }
    bt_registry_cancel(self->reg, task);
    if (job)
        job->status = code;
    if (code == BT_ESTATE)
        return; /* the schedule restores the trainer (bt_recovery_recover) */
    if (self->fatal[0])
        return;
    snprintf(self->fatal, sizeof self->fatal, "%s", self->last_fail);
    self->fatal_status = code;
    bt_ctl_event_line(self, &line, "run_stopped");
    bt_jsonl_str(&line, "reason", code == BT_ENOMEM ? "out of memory" : "a job no retry can mend");
    bt_jsonl_str(&line, "worker", w->name);
    bt_jsonl_str(&line, "error", err);
    bt_runlog_event(self->log, &line); /* the run's error says it to the user */
}

static void s_on_result(bt_controller_t *self, bt_msg_t **m, bt_worker_info *w) {
    int64_t task;
    if (bt_msg_get_int(*m, "task", 0, BT_WIRE_INT_MAX, &task) != BT_OK) {
        self->stats.malformed++;
        return;
    }
    bool failed = bt_msg_type_of(*m) == BT_MSG_FAIL;
    bt_job *job = w->task == task ? bt_registry_task_user(self->reg, task) : NULL;
    int64_t assigned = w->task == task ? bt_registry_task_assigned_ms(self->reg, task) : 0;
    bt_status code = BT_EIO;
    const char *err = NULL;
    bool quarantine = false;
    if (failed) {
        int64_t status = 0; /* the worker's bt_status; absent from older workers */
        bt_msg_get_str(*m, "error", BT_WIRE_STR_MAX, &err);
        if (bt_msg_has(*m, "status"))
            bt_msg_get_int(*m, "status", -1000, 0, &status);
        code = status < 0 ? (bt_status)status : BT_EIO;
    } else if (job && bt_registry_task_state(self->reg, task) == BT_TASK_ASSIGNED &&
               bt_jobs_check_result(job, *m) != BT_OK) { /* (a cancelled job's result is dropped) */
        failed = true; /* a RESULT that is not its job's: that job's FAIL, naming the sender */
        code = BT_EFORMAT;
        err = bt_last_error();
        self->stats.rejected_results++;
        quarantine = true; /* broken or hostile: it gets no more jobs */
        if (self->rejected++ < S_MAX_REJECTED_LOGGED) {
            bt_jsonl line;
            bt_ctl_event_line(self, &line, "result_rejected");
            bt_jsonl_str(&line, "worker", w->name);
            bt_jsonl_str(&line, "kind", bt_job_kind_name(job->kind));
            bt_jsonl_int(&line, "task", task);
            bt_jsonl_str(&line, "error", err);
            bt_runlog_event(self->log, &line);
        }
    }
    int64_t published = -1;
    if (!failed && job && job->publish && job->role == BT_ROLE_TRAINER &&
        bt_registry_task_state(self->reg, task) == BT_TASK_ASSIGNED &&
        bt_msg_get_int(*m, "trainer_version", 0, BT_WIRE_INT_MAX, &published) == BT_OK &&
        published != job->pol->version) {
        /* its WEIGHTS went missing (sent while the worker was expired, so refused): the job is
           handed out again, and the trainer, which applied it, answers it once more with them */
        failed = true;
        code = BT_EIO;
        err = "the WEIGHTS of this job's update never arrived: the job is asked for again";
    }
    if (failed ? !bt_registry_fail(self->reg, task, w->id)
               : !bt_registry_complete(self->reg, task, w->id)) {
        self->stats.late_results++;
        return;
    }
    if (failed) {
        s_on_failure(self, task, job, w, code, err);
        if (quarantine) {
            bt_registry_quarantine(self->reg, w->id);
            self->stats.quarantined++;
            bt_ctl_event(self, "worker_quarantined", "worker", w->name);
        }
        return;
    }
    int64_t ms = bt_ctl_now_ms() - assigned, *longest = &self->kind_ms[job->kind];
    *longest = ms > *longest ? ms : *longest;
    job->compute_s = 0;
    job->worker = w->id;
    job->done_s = bt_now();
    bt_msg_get_double(*m, "compute_s", 0, 1e9, &job->compute_s);
    bt_usage usage; /* checked with the rest of the RESULT (bt_jobs_check_result) */
    if (bt_usage_from_msg(*m, &usage) == BT_OK)
        bt_registry_report(self->reg, w->id, &usage);
    job->pol->worker_s += job->compute_s; /* each variant's share of the pool */
    if (job->role == BT_ROLE_TRAINER)
        bt_msg_get_int(*m, "trainer_version", 0, BT_WIRE_INT_MAX, &job->pol->trainer_version);
    job->result = *m;
    *m = NULL;
}

static void s_on_bye(bt_controller_t *self, const bt_msg_t *m, bt_worker_info *w) {
    const char *error = NULL;
    bt_msg_get_str(m, "error", 4096, &error);
    bt_registry_remove(self->reg, w->id);
    bt_jsonl line;
    bt_ctl_event_line(self, &line, "worker_left");
    bt_jsonl_str(&line, "worker", w->name);
    if (error) {
        char err[512];
        bt_loop_sanitise(error, err, sizeof err);
        bt_jsonl_str(&line, "error", err);
        snprintf(self->start_error, sizeof self->start_error, "worker %s cannot start: %s", w->name,
                 err);
    }
    bt_runlog_event(self->log, &line);
}

/*  Receives and handles one message, if any is waiting. */
static bt_status s_receive(bt_controller_t *self) {
    uint8_t peer[BT_WIRE_PEER_MAX];
    size_t len = 0;
    bt_msg_t *m = NULL;
    bt_status st = bt_proto_recv(self->sock, &m, peer, &len, ZMQ_DONTWAIT);
    if (st == BT_EIO)
        return st;
    bt_worker_info *w = len ? bt_registry_find_peer(self->reg, peer, len) : NULL;
    if (st == BT_EFORMAT) {
        self->stats.malformed++;
        if (w)
            s_send_invalid(self, peer, len, bt_last_error(), false);
        return BT_OK;
    }
    if (!m)
        return BT_OK;
    bt_msg_type type = bt_msg_type_of(m);
    const char *run = bt_msg_run(m);
    bool other_run = run[0] && strcmp(run, self->run_id) != 0;
    if (!w && type != BT_MSG_HELLO) {
        self->stats.unknown_peer++;
        s_send_invalid(self, peer, len, "unknown peer: send HELLO first", false);
    } else if (other_run) { /* a worker of another run (an orphan of an earlier one) */
        char why[256];
        snprintf(why, sizeof why, "this worker belongs to run %.96s; this is run %s", run,
                 self->run_id);
        self->stats.wrong_run++;
        s_send_invalid(self, peer, len, why, true);
        if (w)
            bt_registry_remove(self->reg, w->id);
    } else if (type == BT_MSG_HELLO) {
        s_on_hello(self, m, peer, len);
    } else {
        bt_registry_touch(self->reg, w->id, bt_ctl_now_ms());
        if (type == BT_MSG_RESULT || type == BT_MSG_FAIL)
            s_on_result(self, &m, w);
        else if (type == BT_MSG_WEIGHTS)
            s_on_weights(self, &m, w);
        else if (type == BT_MSG_BYE)
            s_on_bye(self, m, w);
    }
    bt_msg_destroy(&m);
    return BT_OK;
}

/*  The run's fatal failure, if a worker reported one (see bt_controller.fatal). */
bt_status bt_loop_fatal(const bt_controller_t *self) {
    if (self->fatal[0] && !self->stopping)
        return bt_fail(self->fatal_status, "%s", self->fatal);
    return BT_OK;
}

/*  Hands out the queued tasks that have a worker free. */
static bt_status s_hand_out(bt_controller_t *self) {
    int64_t task;
    int32_t wid;
    while (bt_registry_next_assignment(self->reg, bt_ctl_now_ms(), &task, &wid)) {
        bt_job *job = bt_registry_task_user(self->reg, task);
        bt_policy *owner = job->pol; /* the job's variant */
        bt_worker_info *w = bt_registry_worker(self->reg, wid);
        if (job->role == BT_ROLE_TRAINER && !owner->store && self->trainer < 0) {
            self->trainer = wid; /* the first trainer job's taker holds the state */
            bt_ctl_event(self, "trainer_active", "worker", w->name);
        }
        if (bt_registry_task_attempts(self->reg, task) >
            1) { /* its last holder failed or was lost */
            self->stats.requeued++;
            bt_jsonl line;
            bt_ctl_event_line(self, &line, "task_requeued");
            bt_jsonl_str(&line, "kind", bt_job_kind_name(job->kind));
            bt_jsonl_int(&line, "task", task);
            bt_jsonl_str(&line, "worker", w->name);
            bt_runlog_event(self->log, &line);
        }
        bt_status st = job->ev ? bt_jobs_pin_weights(owner, job->ev, w) : BT_OK;
        bt_msg_t *m = st == BT_OK ? bt_msg_new(BT_MSG_TASK) : NULL;
        if (st == BT_OK)
            st = m ? bt_jobs_build_task(owner, job, task, m) : BT_ENOMEM;
        if (st == BT_OK)
            st = bt_loop_send(self, &m, w);
        bt_msg_destroy(&m);
        if (st != BT_OK)
            return st;
    }
    return BT_OK;
}

/*  A job's deadline: workers.deadline_factor times the longest measured duration of its kind,
    never below workers.deadline_floor_ms (docs/config.md).  A worker past it is quarantined and
    the job re-queued for another. */
static void s_deadlines(bt_controller_t *self, int64_t now) {
    const bt_config *c = self->cfg;
    for (int32_t i = 0; i < bt_registry_worker_count(self->reg); i++) {
        bt_worker_info *w = bt_registry_worker(self->reg, i);
        if (w->state != BT_WORKER_BUSY || w->task < 0 ||
            bt_registry_task_state(self->reg, w->task) != BT_TASK_ASSIGNED)
            continue;
        const bt_job *job = bt_registry_task_user(self->reg, w->task);
        int64_t seen = self->kind_ms[job->kind];
        int64_t limit = (int64_t)c->workers.deadline_factor *
                        (seen > c->workers.deadline_floor_ms ? seen : c->workers.deadline_floor_ms);
        int64_t held = now - bt_registry_task_assigned_ms(self->reg, w->task);
        if (held <= limit)
            continue;
        bt_log(BT_LOG_WARN,
               "controller: %s held a %s job for %lld ms (deadline %lld ms): quarantined, the "
               "job goes to another worker",
               w->name, bt_job_kind_name(job->kind), (long long)held, (long long)limit);
        bt_jsonl line;
        bt_ctl_event_line(self, &line, "worker_quarantined");
        bt_jsonl_str(&line, "worker", w->name);
        bt_jsonl_str(&line, "kind", bt_job_kind_name(job->kind));
        bt_jsonl_int(&line, "held_ms", held);
        bt_jsonl_int(&line, "deadline_ms", limit);
        bt_runlog_event(self->log, &line);
        bt_registry_quarantine(self->reg, w->id);
        self->stats.quarantined++;
    }
}

/*  Reads what the socket holds (at most 256 messages a turn).  Returns true when the socket was
    drained, so silence seen now is real. */
static bt_status s_drain(bt_controller_t *self, bool *drained) {
    *drained = false;
    for (int i = 0; i < 256; i++) {
        int more = 0;
        size_t sz = sizeof more;
        zmq_getsockopt(self->sock, ZMQ_EVENTS, &more, &sz);
        if (!(more & ZMQ_POLLIN)) {
            *drained = true;
            return BT_OK;
        }
        BT_TRY(s_receive(self));
    }
    return BT_OK;
}

/*  The bookkeeping of a turn: a PING to every worker each heartbeat (a worker leaves when its
    controller goes silent), expiry of silent workers (only after the socket was drained, and not
    after the controller itself stood still: stopped, or saving), job deadlines. */
static void s_timers(bt_controller_t *self, bool drained) {
    int64_t now = bt_ctl_now_ms(), hb = self->cfg->workers.heartbeat_ms;
    if (self->last_turn_ms && now - self->last_turn_ms > self->cfg->workers.expiry_ms / 2) {
        bt_registry_touch_all(self->reg, now);
        bt_jsonl line;
        bt_ctl_event_line(self, &line, "controller_stalled");
        bt_jsonl_int(&line, "ms", now - self->last_turn_ms);
        bt_runlog_event(self->log, &line);
    }
    self->last_turn_ms = now;
    if (now - self->last_ping_ms >= hb) {
        self->last_ping_ms = now;
        for (int32_t i = 0; i < bt_registry_worker_count(self->reg); i++) {
            const bt_worker_info *w = bt_registry_worker(self->reg, i);
            bt_msg_t *ping = w->state != BT_WORKER_LOST ? bt_msg_new(BT_MSG_PING) : NULL;
            if (ping)
                bt_loop_send(self, &ping, w);
        }
    }
    int lost = drained ? bt_registry_expire(self->reg, now) : 0;
    if (lost) {
        self->stats.lost_workers += lost;
        bt_ctl_event(self, "workers_expired", NULL, NULL);
    }
    s_deadlines(self, now);
}

/*  Hands out what can be handed out, then waits (at most a heartbeat) for messages, expires
    silent workers and checks deadlines; fails at once after a fatal failure.  The only place
    that waits: the rooms only change state (controller.c advances them after each turn). */
bt_status bt_loop_turn(bt_controller_t *self) {
    BT_TRY(bt_loop_fatal(self));
    BT_TRY(s_hand_out(self));
    zmq_pollitem_t item = {self->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, (long)self->cfg->workers.heartbeat_ms) < 0)
        return bt_fail(BT_EIO, "controller: poll failed: %s", zmq_strerror(zmq_errno()));
    bool drained = true;
    if (item.revents & ZMQ_POLLIN)
        BT_TRY(s_drain(self, &drained));
    s_timers(self, drained);
    if (self->prom)
        bt_prometheus_registry(self->prom, self->reg);
    return bt_loop_fatal(self);
}
