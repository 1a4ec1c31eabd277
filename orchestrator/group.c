/*  group.c — who trains: the worker holding the training state, or the data-parallel group. */
#include "rooms.h"

/*  Without a trainer group: the worker holding the training state was lost.  When another
    trainer is live it takes over (bt_hub.trainer) and BT_ESTATE says the state must be restored;
    while none is, BT_OK (the job waits for the lost one to come back). */
bt_status bt_group_trainer_lost(bt_controller_t *self) {
    const bt_worker_info *t = bt_registry_worker(self->reg, self->hub->trainer);
    if (self->store || !t || (t->state != BT_WORKER_LOST && !t->quarantined))
        return BT_OK;
    for (int32_t i = 0; i < bt_registry_worker_count(self->reg); i++) {
        const bt_worker_info *w = bt_registry_worker(self->reg, i);
        if (w->role == BT_ROLE_TRAINER && w->state == BT_WORKER_IDLE && !w->quarantined) {
            char from[64];
            snprintf(from, sizeof from, "%s", t->name);
            self->hub->trainer = i;
            bt_jsonl line;
            bt_ctl_event_line(self, &line, "trainer_replaced");
            bt_jsonl_str(&line, "lost", from);
            bt_jsonl_str(&line, "by", w->name);
            bt_runlog_event(self->log, &line);
            return bt_fail(BT_ESTATE, "controller: trainer %s was lost; %s takes over", from,
                           w->name);
        }
    }
    return BT_OK;
}

/*  Runs jobs[k] on rank k of the group (bound to that worker) until all are done, or until a rank
    fails or is lost: then the others are cancelled, the group must be re-formed (world = 0) and
    *broken is set. */
static bt_status s_run_ranks(bt_controller_t *self, bt_job *jobs, int n, bool *broken) {
    *broken = false;
    int64_t first = -1;
    for (int k = 0; k < n; k++) {
        jobs[k].ctl = self;
        jobs[k].status = BT_OK;
        int64_t id =
            bt_registry_add_task_only(self->reg, BT_ROLE_TRAINER, self->ranks[k], &jobs[k]);
        if (id < 0)
            return BT_ENOMEM;
        first = first < 0 ? id : first;
    }
    double t0 = bt_now();
    for (;;) {
        int done = 0;
        double longest = 0;
        for (int k = 0; k < n; k++) {
            bt_task_state ts = bt_registry_task_state(self->reg, first + k);
            done += ts == BT_TASK_DONE;
            /* queued again after it was handed out: its rank failed it or was lost */
            *broken |= ts == BT_TASK_QUEUED && bt_registry_task_attempts(self->reg, first + k) > 0;
            *broken |= bt_registry_worker(self->reg, self->ranks[k])->state == BT_WORKER_LOST;
            longest = jobs[k].compute_s > longest ? jobs[k].compute_s : longest;
        }
        if (done == n) {
            self->stats.compute_s += longest;
            self->stats.tasks_s += bt_now() - t0;
            return BT_OK;
        }
        bt_status failed = BT_OK;
        for (int k = 0; k < n && failed == BT_OK; k++)
            failed = jobs[k].status;
        if (failed != BT_OK) { /* a rank's failure that no re-formation mends */
            bt_jobs_cancel(self, n, first);
            return bt_fail(failed, "%s", self->hub->last_fail);
        }
        if (*broken) {
            /* rank 0 done: the collectives had finished on every rank, so the update happened
               (running it again would train the batch twice); the group is re-formed next time */
            bool applied = bt_registry_task_state(self->reg, first) == BT_TASK_DONE;
            for (int k = applied ? 1 : 0; k < n; k++)
                bt_registry_cancel(self->reg, first + k);
            bt_jobs_release(jobs + (applied ? 1 : 0), n - (applied ? 1 : 0));
            self->world = 0;
            char what[64];
            snprintf(what, sizeof what, "%s, generation %lld%s", jobs[0].kind,
                     (long long)self->generation, applied ? ", after its update" : "");
            bt_ctl_event(self, "trainer_group_broken", "during", what);
            *broken = !applied;
            return BT_OK;
        }
        bt_status st = bt_loop_turn(self);
        if (st != BT_OK) {
            bt_jobs_cancel(self, n, first);
            return st;
        }
    }
}

/*  (Re-)forms the trainer group from the live trainer workers.  The last formation's live ranks
    come first, in their old order, so the new rank 0 holds the newest state and every rank copies
    it; trainers that joined since follow.  When no rank of the last formation lives, the state is
    gone and the run stops with an error saying how to resume.  It first waits until no rank of
    the last formation is busy: a survivor reports its failed collective soon (at once when a
    peer's process died, after workers.collective_timeout_ms when a link went silent), and a dead
    rank still holding a task is expired (workers.expiry_ms); forming with a dead rank would stall
    until the collective timeout. */
static bt_status s_group_form(bt_controller_t *self) {
    const bt_run_config *c = self->cfg;
    int64_t settle = bt_ctl_now_ms() + c->workers.collective_timeout_ms + c->workers.expiry_ms + 5000;
    for (bool busy = true; busy;) {
        busy = false;
        for (int k = 0; k < self->world_last; k++)
            busy |= bt_registry_worker(self->reg, self->ranks[k])->state == BT_WORKER_BUSY;
        if (busy && bt_ctl_now_ms() > settle)
            return bt_fail(BT_EIO,
                           "controller: trainer ranks still busy %lld ms after their "
                           "group broke",
                           (long long)(c->workers.collective_timeout_ms + c->workers.expiry_ms));
        if (busy)
            BT_TRY(bt_loop_turn(self));
    }
    int64_t deadline = bt_ctl_now_ms() + S_JOIN_TIMEOUT_MS;
    for (int attempt = 0;; attempt++) {
        if (attempt > S_MAX_ATTEMPTS)
            return bt_fail(BT_EIO, "controller: the trainer group failed to form %d times",
                           attempt);
        int32_t order[S_MAX_RANKS];
        int n = 0, old;
        for (int k = 0; k < self->world_last && n < S_MAX_RANKS; k++)
            if (bt_registry_worker(self->reg, self->ranks[k])->state != BT_WORKER_LOST)
                order[n++] = self->ranks[k];
        old = n;
        /* standby trainers beyond workers.trainer wait outside the group */
        int64_t cap = c->workers.trainer < S_MAX_RANKS ? c->workers.trainer : S_MAX_RANKS;
        for (int32_t i = 0; i < bt_registry_worker_count(self->reg) && n < cap; i++) {
            const bt_worker_info *w = bt_registry_worker(self->reg, i);
            bool listed = false;
            for (int k = 0; k < n; k++)
                listed |= order[k] == i;
            if (w->role == BT_ROLE_TRAINER && w->state != BT_WORKER_LOST && !w->quarantined &&
                !listed)
                order[n++] = i;
        }
        /* every rank of the last formation lost: the state went with them; a new group is
           formed from the trainers there are and restored from the snapshot (BT_ESTATE) */
        bool fresh = self->generation > 0 && old == 0;
        if (n == 0) {
            bt_status st = bt_jobs_unstaffed(self, BT_ROLE_TRAINER, deadline - S_JOIN_TIMEOUT_MS);
            if (st != BT_OK)
                return st;
            BT_TRY(bt_loop_turn(self));
            attempt--;
            continue;
        }
        memcpy(self->ranks, order, sizeof order[0] * (size_t)n);
        self->world = self->world_last = n;
        self->generation++;
        bt_job jobs[S_MAX_RANKS];
        for (int k = 0; k < n; k++)
            jobs[k] = (bt_job){.kind = "group", .role = BT_ROLE_TRAINER, .rank = k};
        bool broken;
        int64_t expected = self->trainer_version;
        BT_TRY(s_run_ranks(self, jobs, n, &broken));
        if (broken || self->world == 0) { /* a formation is whole or not at all */
            bt_jobs_release(jobs, n);
            continue;
        }
        bt_status st = BT_OK;
        int64_t version = -1, v;
        for (int k = 0; k < n && st == BT_OK; k++) {
            st = bt_msg_get_int(jobs[k].result, "trainer_version", 0, BT_WIRE_INT_MAX, &v);
            if (st == BT_OK && k > 0 && v != version)
                st = bt_fail(BT_EIO,
                             "controller: trainer ranks 0 and %d hold versions %lld and "
                             "%lld after forming",
                             k, (long long)version, (long long)v);
            version = k == 0 ? v : version;
        }
        bt_jobs_release(jobs, n);
        BT_TRY(st);
        bt_jsonl line;
        bt_ctl_event_line(self, &line, "trainer_group_formed");
        bt_jsonl_int(&line, "generation", self->generation);
        bt_jsonl_int(&line, "world", n);
        bt_jsonl_int(&line, "version", version);
        BT_TRY(bt_runlog_event(self->log, &line));
        if (fresh)
            return bt_fail(BT_ESTATE,
                           "controller: every trainer rank was lost with the training state; "
                           "the new group of %d is restored from the snapshot",
                           n);
        if (self->generation > 1 && version != expected) /* a rank lost inside an update */
            return bt_fail(BT_ESTATE,
                           "controller: the re-formed trainer group holds version %lld, the "
                           "controller expected %lld",
                           (long long)version, (long long)expected);
        return BT_OK;
    }
}

/*  Runs a trainer job: on the one trainer, or on every rank of the data-parallel group (a
    snapshot on rank 0 alone), re-forming the group and running the job again when a rank fails or
    is lost.  Rank 0's result becomes job's. */
bt_status bt_group_run_trainer(bt_controller_t *self, bt_job *job) {
    bool applies = strcmp(job->kind, "restore") != 0 && strcmp(job->kind, "group") != 0;
    job->expect_version = applies ? self->trainer_version : -1;
    if (!self->store)
        return bt_jobs_run(self, job, 1);
    for (int attempt = 0;; attempt++) {
        if (attempt > S_MAX_ATTEMPTS)
            return bt_fail(BT_EIO, "controller: a %s job failed on the trainer group %d times",
                           job->kind, attempt);
        if (self->world == 0)
            BT_TRY(s_group_form(self));
        int n = strcmp(job->kind, "snapshot") ? self->world : 1;
        bt_job jobs[S_MAX_RANKS];
        for (int k = 0; k < n; k++) {
            jobs[k] = *job;
            jobs[k].publish = job->publish && k == 0;
        }
        bool broken;
        bt_status st = s_run_ranks(self, jobs, n, &broken);
        if (st == BT_OK && broken)
            continue;
        if (st == BT_OK) {
            job->result = jobs[0].result;
            job->compute_s = jobs[0].compute_s;
            job->worker = jobs[0].worker;
            jobs[0].result = NULL;
        }
        bt_jobs_release(jobs, n);
        return st;
    }
}
