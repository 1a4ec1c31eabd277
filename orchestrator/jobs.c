/*  jobs.c — jobs: TASKs built and RESULTs checked through proto's specs, job sets that are polled.
 */
#include "rooms.h"

/*  Makes sure eval worker w holds the weights of ev's version before it gets a shard. */
bt_status bt_jobs_pin_weights(bt_policy *self, const bt_evaluation *ev, const bt_worker_info *w) {
    int64_t held = w->id < S_TRACK ? self->worker_version[w->id] : -1;
    if (held == ev->version || (held < 0 && !ev->weights))
        return BT_OK; /* version 0 without a WEIGHTS message: as every worker builds it */
    if (!ev->weights)
        return bt_fail(BT_EINVAL,
                       "controller: %s holds version %lld, and version 0 was never "
                       "published to send it back",
                       w->name, (long long)held);
    bt_msg_t *copy = bt_loop_weights_copy(ev->weights->msg);
    if (!copy)
        return BT_ENOMEM;
    BT_TRY(bt_loop_send(self->ctl, &copy, w));
    if (w->id < S_TRACK)
        self->worker_version[w->id] = ev->version;
    return BT_OK;
}

/*  The job's TASK through its kind's spec (spec.h): the job's data, and the tuner's values as one
    bt_hyper; the fixed settings the worker has from WELCOME's config. */
bt_status bt_jobs_build_task(bt_policy *self, const bt_job *j, int64_t id, bt_msg_t *m) {
    bt_spec_task t = {.task = id,
                      .kind = j->kind,
                      .variant = self->variant,
                      .version = j->ev ? j->ev->version : self->version,
                      .hyper = {.lr = j->lr,
                                .kl_coef = self->tuner.kl_coef,
                                .temperature = self->tuner.temperature,
                                .clip_high = self->clip_high}};
    /* applied to the trainer only, once */
    int64_t expect = j->role == BT_ROLE_TRAINER ? j->expect_version : -1;
    switch (j->kind) {
    case BT_JOB_ROLLOUT:
        t.u.rollout =
            (bt_spec_rollout){.seed = j->seed, .n_prompts = j->count, .prompts = j->prompts};
        break;
    case BT_JOB_TRAIN:
        t.u.train = (bt_spec_train){.publish = j->publish,
                                    .expect_version = expect,
                                    .freeze_reference = self->step == 0, /* RL starts here */
                                    .inject_nan = j->inject_nan,
                                    .batch = j->batch,
                                    .adv = j->adv};
        break;
    case BT_JOB_SFT:
        t.u.sft = (bt_spec_sft){
            .publish = j->publish, .expect_version = expect, .start = j->start, .count = j->count};
        break;
    case BT_JOB_EVAL:
        t.u.eval = (bt_spec_eval){.dataset = j->ev->ds,
                                  .start = j->start,
                                  .count = j->count,
                                  .seed = j->seed,
                                  /* the SFT early-stop check needs accuracy only */
                                  .robustness = self->cfg->eval.datasets[j->ev->ds].robustness &&
                                                strcmp(j->ev->phase, "sft") != 0};
        break;
    case BT_JOB_RESTORE:
        t.u.restore =
            (bt_spec_restore){.initial = !j->state, /* the state every trainer starts from */
                              .restore_version = j->restore_version,
                              .state = j->state};
        if (j->state)
            BT_TRY(bt_msg_get_int(j->state, "adam_steps", 0, BT_WIRE_INT_MAX,
                                  &t.u.restore.adam_steps));
        break;
    case BT_JOB_SNAPSHOT: t.u.snapshot.expect_version = expect; break;
    case BT_JOB_GROUP:
        t.u.group =
            (bt_spec_group){.rank = j->rank, .world = self->world, .store_port = self->store_port};
        snprintf(t.u.group.prefix, sizeof t.u.group.prefix, "g%lld", (long long)self->generation);
        break;
    case BT_JOB_KIND_COUNT: BT_ASSERT(!"a job kind");
    }
    return bt_spec_task_to_msg(&t, m);
}

/*  The job's RESULT parses as its kind's spec (every field the schedule reads later, in range), so
    a malformed one is refused at the door instead of ending the run where it is read. */
bt_status bt_jobs_check_result(const bt_job *job, const bt_msg_t *m) {
    bt_spec_result r;
    bt_status st = bt_spec_result_from_msg(m, job->kind, &r);
    if (st == BT_OK && job->kind == BT_JOB_ROLLOUT && r.batch.n_prompts != job->count)
        st = bt_fail(BT_EFORMAT, "RESULT: %lld prompts for a rollout job of %lld",
                     (long long)r.batch.n_prompts, (long long)job->count);
    bt_spec_result_release(&r);
    return st;
}

/*  From the first of the jobs' RESULTs to the last (all done): how long the slowest kept the
    others' results waiting.  0 for one job. */
static double s_spread(const bt_job *jobs, int n) {
    double first = INFINITY, last = -INFINITY;
    for (int i = 0; i < n; i++) {
        first = fmin(first, jobs[i].done_s);
        last = fmax(last, jobs[i].done_s);
    }
    return n > 1 ? last - first : 0;
}

void bt_jobs_count_done(bt_policy *p, const bt_jobset *set, double longest) {
    p->ctl->stats.compute_s += longest;
    p->ctl->stats.tasks_s += bt_now() - set->t0;
    p->wait_slowest_s += s_spread(set->jobs, set->n);
}

bt_status bt_jobs_submit(bt_policy *p, bt_jobset *set, bt_job *jobs, int n) {
    bt_controller_t *ctl = p->ctl;
    *set = (bt_jobset){
        .jobs = jobs, .n = n, .first = -1, .stalled_since = bt_ctl_now_ms(), .t0 = bt_now()};
    for (int i = 0; i < n; i++) {
        jobs[i].pol = p;
        jobs[i].status = BT_OK;
        int32_t holder = jobs[i].role == BT_ROLE_TRAINER ? ctl->trainer : -1;
        int64_t id = holder >= 0
                         ? bt_registry_add_task_only(ctl->reg, jobs[i].role, holder, &jobs[i])
                         : bt_registry_add_task(ctl->reg, jobs[i].role, &jobs[i]);
        if (id < 0) {
            bt_jobs_abort(p, set);
            return BT_ENOMEM;
        }
        set->first = set->first < 0 ? id : set->first;
    }
    return BT_OK;
}

void bt_jobs_cancel(bt_controller_t *self, int n, int64_t first) {
    for (int i = 0; i < n && first >= 0; i++)
        bt_registry_cancel(self->reg, first + i);
}

void bt_jobs_abort(bt_policy *p, bt_jobset *set) {
    bt_jobs_cancel(p->ctl, set->n, set->first);
    bt_jobs_release(set->jobs, set->n);
    set->first = -1;
}

/*  While no worker of role is live: BT_OK as long as one may still come, else the error saying
    why none will (it could not start, the launcher knows its processes of that role are gone, or
    none came for workers.join_timeout_s since `since`). */
bt_status bt_jobs_unstaffed(bt_controller_t *self, bt_role role, int64_t since) {
    char why[256] = "";
    const char *name = bt_role_name(role);
    if (self->start_error[0]) /* the last of a role could not start: none will */
        return bt_fail(BT_EINVAL, "%s", self->start_error);
    if (self->gone && !self->gone(role, why, sizeof why, self->gone_user))
        return bt_fail(BT_EIO,
                       "controller: no %s worker is left (%s)%s; resume with `baton run CONFIG "
                       "--resume`",
                       name, why,
                       role == BT_ROLE_TRAINER ? " and no standby trainer "
                                                 "(workers.standby_trainers) to take over"
                                               : "");
    int64_t limit_s = self->cfg->workers.join_timeout_s;
    if (bt_ctl_now_ms() - since > limit_s * 1000)
        return bt_fail(BT_EIO,
                       "controller: no live %s worker for %lld s (workers.join_timeout_s); start "
                       "one (`baton worker --connect ENDPOINT --role %s`), or stop and resume "
                       "later with --resume",
                       name, (long long)limit_s, name);
    return BT_OK;
}

/*  Every job done: BT_OK, and the set counts in the overhead stats as one batch of parallel
    tasks.  A job that failed for good, a trainer lost with its state (BT_ESTATE) or a role no
    worker will come for ends the set: its jobs are cancelled, nothing hands them out later. */
bt_status bt_jobs_poll(bt_policy *p, bt_jobset *set) {
    bt_controller_t *ctl = p->ctl;
    int done = 0;
    double longest = 0;
    for (int i = 0; i < set->n; i++) {
        done += bt_registry_task_state(ctl->reg, set->first + i) == BT_TASK_DONE;
        longest = set->jobs[i].compute_s > longest ? set->jobs[i].compute_s : longest;
    }
    if (done == set->n) {
        bt_jobs_count_done(p, set, longest);
        return BT_OK;
    }
    bt_status st = BT_OK;
    for (int i = 0; i < set->n && st == BT_OK; i++)
        if (set->jobs[i].status != BT_OK)
            st = bt_fail(set->jobs[i].status, "%s", ctl->last_fail);
    bool staffed = true;
    for (int i = 0; i < set->n && st == BT_OK; i++) {
        bool live = bt_registry_live(ctl->reg, set->jobs[i].role) > 0;
        staffed &= live;
        if (set->jobs[i].role == BT_ROLE_TRAINER)
            st = bt_group_trainer_lost(p);
        if (st == BT_OK && !live)
            st = bt_jobs_unstaffed(ctl, set->jobs[i].role, set->stalled_since);
    }
    if (staffed)
        set->stalled_since = bt_ctl_now_ms();
    if (st != BT_OK) {
        bt_jobs_cancel(ctl, set->n, set->first);
        return st;
    }
    return BT_PENDING;
}

bt_status bt_jobs_joined(bt_controller_t *self) {
    const bt_config *c = self->cfg;
    int64_t want[BT_ROLE_COUNT] = {c->workers.rollout, c->workers.trainer, c->workers.eval};
    if (self->joined)
        return BT_OK;
    if (!self->join_deadline)
        self->join_deadline = bt_ctl_now_ms() + c->workers.join_timeout_s * 1000;
    bool all = true;
    for (int r = 0; r < BT_ROLE_COUNT; r++)
        all &= bt_registry_live(self->reg, (bt_role)r) >= want[r];
    if (all) {
        self->joined = true;
        bt_ctl_event(self, "workers_ready", NULL, NULL);
        return BT_OK;
    }
    if (self->start_error[0]) /* the same config would fail the same way on any worker */
        return bt_fail(BT_EINVAL, "%s", self->start_error);
    if (bt_ctl_now_ms() > self->join_deadline)
        return bt_fail(BT_EIO,
                       "controller: workers did not join within %lld s (workers.join_timeout_s)",
                       (long long)c->workers.join_timeout_s);
    return BT_PENDING;
}

void bt_jobs_release(bt_job *jobs, int n) {
    for (int i = 0; i < n; i++)
        bt_msg_destroy(&jobs[i].result);
}
