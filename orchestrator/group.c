/*  group.c — who trains: the worker holding the training state, or the data-parallel group
    (workers.trainer > 1), formed and re-formed here; see rooms.h. */
#include "rooms.h"

#include "baton/trainer.h"

/*  Without a trainer group: the worker holding the training state was lost.  When another
    trainer is live it takes over (bt_controller.trainer) and BT_ESTATE says the state must be
    restored; while none is, BT_OK (the job waits for the lost one to come back). */
bt_status bt_group_trainer_lost(bt_policy *p) {
    bt_controller_t *ctl = p->ctl;
    const bt_worker_info *t = bt_registry_worker(ctl->reg, ctl->trainer);
    if (p->store || !t || (t->state != BT_WORKER_LOST && !t->quarantined))
        return BT_OK;
    for (int32_t i = 0; i < bt_registry_worker_count(ctl->reg); i++) {
        const bt_worker_info *w = bt_registry_worker(ctl->reg, i);
        if (w->role == BT_ROLE_TRAINER && w->state == BT_WORKER_IDLE && !w->quarantined) {
            char from[64];
            snprintf(from, sizeof from, "%s", t->name);
            ctl->trainer = i;
            bt_jsonl line;
            bt_ctl_event_line(ctl, &line, "trainer_replaced");
            bt_jsonl_str(&line, "lost", from);
            bt_jsonl_str(&line, "by", w->name);
            bt_runlog_event(ctl->log, &line);
            return bt_fail(BT_ESTATE, "controller: trainer %s was lost; %s takes over", from,
                           w->name);
        }
    }
    return BT_OK;
}

/*  Queues tr->ranks[0..n) on the ranks of the group, each bound to its worker. */
static bt_status s_ranks_submit(bt_policy *p, int n) {
    bt_trainer_run *tr = &p->tr;
    tr->set = (bt_jobset){.jobs = tr->ranks, .n = n, .first = -1, .t0 = bt_now()};
    for (int k = 0; k < n; k++) {
        tr->ranks[k].pol = p;
        tr->ranks[k].status = BT_OK;
        int64_t id =
            bt_registry_add_task_only(p->ctl->reg, BT_ROLE_TRAINER, p->ranks[k], &tr->ranks[k]);
        if (id < 0)
            return BT_ENOMEM;
        tr->set.first = tr->set.first < 0 ? id : tr->set.first;
    }
    return BT_OK;
}

/*  The rank jobs until all are done (BT_OK), or until a rank fails (an error) or is lost: then the
    others are cancelled, the group must be re-formed (world = 0) and *broken is set, unless rank
    0 had finished: the collectives had finished on every rank then, so the update happened
    (running it again would train the batch twice) and the job counts as done. */
static bt_status s_ranks_poll(bt_policy *p, bool *broken) {
    bt_controller_t *ctl = p->ctl;
    bt_jobset *set = &p->tr.set;
    int n = set->n, done = 0;
    double longest = 0;
    *broken = false;
    for (int k = 0; k < n; k++) {
        bt_source_state ts = bt_registry_task_state(ctl->reg, set->first + k);
        done += ts == BT_TASK_DONE;
        /* queued again after it was handed out: its rank failed it or was lost */
        *broken |= ts == BT_TASK_QUEUED && bt_registry_task_attempts(ctl->reg, set->first + k) > 0;
        *broken |= bt_registry_worker(ctl->reg, p->ranks[k])->state == BT_WORKER_LOST;
        longest = set->jobs[k].compute_s > longest ? set->jobs[k].compute_s : longest;
    }
    if (done == n) {
        *broken = false;
        bt_jobs_count_done(p, set, longest);
        return BT_OK;
    }
    for (int k = 0; k < n; k++)
        if (set->jobs[k].status != BT_OK) { /* a rank's failure that no re-formation mends */
            bt_jobs_cancel(ctl, n, set->first);
            return bt_fail(set->jobs[k].status, "%s", ctl->last_fail);
        }
    if (!*broken)
        return BT_PENDING;
    bool applied = bt_registry_task_state(ctl->reg, set->first) == BT_TASK_DONE;
    for (int k = applied ? 1 : 0; k < n; k++)
        bt_registry_cancel(ctl->reg, set->first + k);
    bt_jobs_release(set->jobs + (applied ? 1 : 0), n - (applied ? 1 : 0));
    p->world = 0;
    char what[64];
    snprintf(what, sizeof what, "%s, generation %lld%s", bt_job_kind_name(set->jobs[0].kind),
             (long long)p->generation, applied ? ", after its update" : "");
    bt_jsonl line;
    bt_ctl_event_line(ctl, &line, "trainer_group_broken");
    bt_jsonl_str(&line, "during", what);
    bt_jsonl_str(&line, "variant", p->variant_name);
    bt_runlog_event(ctl->log, &line);
    *broken = !applied;
    return BT_OK;
}

/*  The ranks of a new formation: the last formation's live ranks first, in their old order, so
    the new rank 0 holds the newest state and every rank copies it; trainers that joined since
    follow (standby trainers beyond workers.trainer wait outside).  Returns how many; *old: how
    many of them were in the last formation. */
static int s_pick_ranks(bt_policy *p, int32_t *order, int *old) {
    bt_controller_t *ctl = p->ctl;
    int n = 0;
    for (int k = 0; k < p->world_last && n < S_MAX_RANKS; k++)
        if (bt_registry_worker(ctl->reg, p->ranks[k])->state != BT_WORKER_LOST)
            order[n++] = p->ranks[k];
    *old = n;
    int64_t cap = p->cfg->workers.trainer < S_MAX_RANKS ? p->cfg->workers.trainer : S_MAX_RANKS;
    for (int32_t i = 0; i < bt_registry_worker_count(ctl->reg) && n < cap; i++) {
        const bt_worker_info *w = bt_registry_worker(ctl->reg, i);
        bool listed = false;
        for (int k = 0; k < n; k++)
            listed |= order[k] == i;
        if (w->role == BT_ROLE_TRAINER && w->state != BT_WORKER_LOST && !w->quarantined && !listed)
            order[n++] = i;
    }
    return n;
}

/*  BT_TRAINER_SETTLE: forming with a dead rank would stall until the collective timeout, so a
    formation waits until no rank of the last one is busy: a survivor reports its failed
    collective soon (at once when a peer's process died, after workers.collective_timeout_ms when
    a link went silent), and a dead rank still holding a task is expired (workers.expiry_ms). */
static bt_status s_settle(bt_policy *p) {
    const bt_config *c = p->cfg;
    bool busy = false;
    for (int k = 0; k < p->world_last; k++)
        busy |= bt_registry_worker(p->ctl->reg, p->ranks[k])->state == BT_WORKER_BUSY;
    if (busy && bt_ctl_now_ms() > p->tr.settle_until)
        return bt_fail(BT_EIO,
                       "controller: trainer ranks still busy %lld ms after their group broke",
                       (long long)(c->workers.collective_timeout_ms + c->workers.expiry_ms));
    if (busy)
        return BT_PENDING;
    p->tr.form_attempt = 0;
    p->tr.join_since = bt_ctl_now_ms();
    p->tr.state = BT_TRAINER_PICK;
    return BT_OK;
}

/*  BT_TRAINER_PICK: the formation's group jobs queued, or BT_PENDING while no trainer is live. */
static bt_status s_pick(bt_policy *p) {
    bt_trainer_run *tr = &p->tr;
    if (tr->form_attempt > S_MAX_ATTEMPTS)
        return bt_fail(BT_EIO, "controller: the trainer group failed to form %d times",
                       tr->form_attempt);
    int32_t order[S_MAX_RANKS];
    int old, n = s_pick_ranks(p, order, &old);
    if (n == 0) {
        BT_TRY(bt_jobs_unstaffed(p->ctl, BT_ROLE_TRAINER, tr->join_since));
        return BT_PENDING;
    }
    /* every rank of the last formation lost: the state went with them; a new group is formed
       from the trainers there are and restored from the snapshot (BT_ESTATE).  A sharded state
       (workers.shard) cannot be re-cut from what survivors hold (a lost rank's shard is gone),
       so every re-formation of a sharded group restores */
    tr->fresh = p->generation > 0 && (old == 0 || p->cfg->workers.shard != BT_SHARD_NONE);
    memcpy(p->ranks, order, sizeof order[0] * (size_t)n);
    p->world = p->world_last = n;
    p->generation++;
    for (int k = 0; k < n; k++)
        tr->ranks[k] = (bt_job){.kind = BT_JOB_GROUP, .role = BT_ROLE_TRAINER, .rank = k};
    tr->expected = p->trainer_version;
    tr->state = BT_TRAINER_FORM;
    return s_ranks_submit(p, n);
}

/*  BT_TRAINER_FORM: a formation is whole or not at all; once whole, every rank must hold the
    version rank 0 holds, which is the one the controller expects. */
static bt_status s_form(bt_policy *p) {
    bt_trainer_run *tr = &p->tr;
    bool broken;
    BT_TRY(s_ranks_poll(p, &broken));
    int n = tr->set.n;
    if (broken || p->world == 0) {
        bt_jobs_release(tr->ranks, n);
        tr->form_attempt++;
        tr->state = BT_TRAINER_PICK;
        return BT_OK;
    }
    bt_status st = BT_OK;
    int64_t version = -1, v;
    for (int k = 0; k < n && st == BT_OK; k++) {
        st = bt_msg_get_int(tr->ranks[k].result, "trainer_version", 0, BT_WIRE_INT_MAX, &v);
        if (st == BT_OK && k > 0 && v != version)
            st = bt_fail(BT_EIO,
                         "controller: trainer ranks 0 and %d hold versions %lld and %lld after "
                         "forming",
                         k, (long long)version, (long long)v);
        version = k == 0 ? v : version;
    }
    bt_jobs_release(tr->ranks, n);
    BT_TRY(st);
    bt_jsonl line;
    bt_ctl_event_line(p->ctl, &line, "trainer_group_formed");
    bt_jsonl_str(&line, "variant", p->variant_name);
    bt_jsonl_int(&line, "generation", p->generation);
    bt_jsonl_int(&line, "world", n);
    bt_jsonl_int(&line, "version", version);
    BT_TRY(bt_runlog_event(p->ctl->log, &line));
    if (tr->fresh && p->cfg->workers.shard != BT_SHARD_NONE)
        return bt_fail(BT_ESTATE,
                       "controller: the trainer group re-formed, and its state is sharded "
                       "(workers.shard): the new group of %d is restored from the snapshot",
                       n);
    if (tr->fresh)
        return bt_fail(BT_ESTATE,
                       "controller: every trainer rank was lost with the training state; the "
                       "new group of %d is restored from the snapshot",
                       n);
    if (p->generation > 1 && version != tr->expected) /* a rank lost inside an update */
        return bt_fail(BT_ESTATE,
                       "controller: the re-formed trainer group holds version %lld, the "
                       "controller expected %lld",
                       (long long)version, (long long)tr->expected);
    tr->state = BT_TRAINER_NEXT;
    return BT_OK;
}

/*  BT_TRAINER_NEXT: the job on every rank (a snapshot on rank 0 alone unless the state is
    sharded), the group formed first when it is broken. */
static bt_status s_next(bt_policy *p) {
    bt_trainer_run *tr = &p->tr;
    if (tr->attempt > S_MAX_ATTEMPTS)
        return bt_fail(BT_EIO, "controller: a %s job failed on the trainer group %d times",
                       bt_job_kind_name(tr->job.kind), tr->attempt);
    if (p->world == 0) {
        const bt_config *c = p->cfg;
        tr->settle_until =
            bt_ctl_now_ms() + c->workers.collective_timeout_ms + c->workers.expiry_ms + 5000;
        tr->state = BT_TRAINER_SETTLE;
        return BT_OK;
    }
    bool sharded = p->cfg->workers.shard != BT_SHARD_NONE; /* every rank holds a shard */
    int n = tr->job.kind == BT_JOB_SNAPSHOT && !sharded ? 1 : p->world;
    for (int k = 0; k < n; k++) {
        tr->ranks[k] = tr->job;
        tr->ranks[k].publish = tr->job.publish && k == 0;
    }
    tr->state = BT_TRAINER_RANKS;
    return s_ranks_submit(p, n);
}

/*  BT_TRAINER_RANKS: rank 0's result becomes the job's; a sharded snapshot's holds every rank's
    shards (bt_trainer_state_merge). */
static bt_status s_ranks(bt_policy *p) {
    bt_trainer_run *tr = &p->tr;
    bool broken;
    BT_TRY(s_ranks_poll(p, &broken));
    if (broken) {
        tr->attempt++;
        tr->state = BT_TRAINER_NEXT;
        return BT_OK;
    }
    for (int k = 1; tr->job.kind == BT_JOB_SNAPSHOT && k < tr->set.n; k++)
        BT_TRY(bt_trainer_state_merge(tr->ranks[0].result, tr->ranks[k].result));
    tr->job.result = tr->ranks[0].result;
    tr->job.compute_s = tr->ranks[0].compute_s;
    tr->job.worker = tr->ranks[0].worker;
    tr->ranks[0].result = NULL;
    bt_jobs_release(tr->ranks, tr->set.n);
    tr->state = BT_TRAINER_DONE;
    return BT_OK;
}

void bt_group_begin(bt_policy *p, const bt_job *job) {
    bt_trainer_run *tr = &p->tr;
    BT_ASSERT(tr->state == BT_TRAINER_IDLE);
    tr->job = *job;
    bool applies = job->kind != BT_JOB_RESTORE && job->kind != BT_JOB_GROUP;
    tr->job.expect_version = applies ? p->trainer_version : -1;
    tr->job.result = NULL;
    tr->attempt = 0;
    tr->state = p->store ? BT_TRAINER_NEXT : BT_TRAINER_ONE;
    if (!p->store && bt_jobs_submit(p, &tr->set, &tr->job, 1) != BT_OK)
        tr->job.status = BT_ENOMEM;
}

static bt_status s_step(bt_policy *p) {
    switch (p->tr.state) {
    case BT_TRAINER_ONE:
        if (p->tr.job.status == BT_ENOMEM && p->tr.set.first < 0)
            return bt_fail(BT_ENOMEM, "controller: out of memory");
        BT_TRY(bt_jobs_poll(p, &p->tr.set));
        p->tr.state = BT_TRAINER_DONE;
        return BT_OK;
    case BT_TRAINER_NEXT: return s_next(p);
    case BT_TRAINER_SETTLE: return s_settle(p);
    case BT_TRAINER_PICK: return s_pick(p);
    case BT_TRAINER_FORM: return s_form(p);
    case BT_TRAINER_RANKS: return s_ranks(p);
    case BT_TRAINER_IDLE:
    case BT_TRAINER_DONE: break;
    }
    return BT_OK;
}

bt_status bt_group_poll(bt_policy *p) {
    BT_ASSERT(p->tr.state != BT_TRAINER_IDLE);
    while (p->tr.state != BT_TRAINER_DONE) {
        bt_status st = s_step(p);
        if (st == BT_PENDING)
            return st;
        if (st != BT_OK) {
            bt_group_abort(p);
            return st;
        }
    }
    return BT_OK;
}

void bt_group_release(bt_policy *p) {
    bt_msg_destroy(&p->tr.job.result);
    p->tr.state = BT_TRAINER_IDLE;
}

void bt_group_abort(bt_policy *p) {
    bt_trainer_run *tr = &p->tr;
    if (tr->state == BT_TRAINER_ONE || tr->state == BT_TRAINER_FORM ||
        tr->state == BT_TRAINER_RANKS)
        bt_jobs_cancel(p->ctl, tr->set.n, tr->set.first);
    if (tr->state == BT_TRAINER_FORM || tr->state == BT_TRAINER_RANKS)
        bt_jobs_release(tr->ranks, tr->set.n);
    bt_group_release(p);
}
