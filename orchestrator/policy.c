/*  policy.c — one variant's state machine: the SFT warm start, then GRPO steps (rollouts, the
    update, the step's record, evaluations, snapshot and checkpoints); see rooms.h.  Every state
    names what it waits for; bt_policy_advance runs states until one has to wait. */
#include "rooms.h"

bt_policy *bt_policy_new(bt_controller_t *ctl, const bt_config *cfg, int k) {
    bt_policy *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "controller: out of memory");
        return NULL;
    }
    self->ctl = ctl;
    self->cfg = cfg;
    self->variant = k;
    self->variant_name = cfg->n_variants > 0 ? cfg->variants[k].name : "main";
    self->last_accuracy = NAN;
    self->last_reward = NAN;
    self->clip_high = cfg->grpo.clip_high;
    bt_tuner_config tc;
    bt_config_tuner(cfg, &tc);
    bt_tuner_init(&self->tuner, &tc);
    /* the training data: each source's task, and the mixture that draws from them */
    bt_status st = BT_OK;
    self->n_sources = bt_config_n_sources(cfg);
    int epoch_source = bt_config_epoch_source(cfg);
    for (int i = 0; i < self->n_sources && st == BT_OK; i++)
        st = bt_config_new_source(cfg, i, &self->sources[i],
                                  i == epoch_source ? &self->epoch_size : NULL);
    bt_config *one = malloc(sizeof *one); /* each source's config: does it run episodes? */
    if (st == BT_OK && !one)
        st = bt_fail(BT_ENOMEM, "controller: out of memory");
    for (int i = 0; i < self->n_sources && st == BT_OK; i++) {
        st = bt_config_source(cfg, i, one);
        self->episodes = self->episodes || (st == BT_OK && one->task.env != BT_CONFIG_ENV_NONE);
    }
    free(one);
    bt_mixture_config mc = {.n_sources = self->n_sources,
                            .seed = (uint64_t)cfg->run.seed,
                            .window = cfg->data.curriculum.window,
                            .skip_solved = cfg->data.curriculum.skip_solved,
                            .skip_failed = cfg->data.curriculum.skip_failed};
    if (st == BT_OK && !(self->mix = bt_mixture_new(&mc)))
        st = BT_ENOMEM;
    if (st == BT_OK)
        st = bt_evals_setup(self);
    if (st == BT_OK && cfg->workers.trainer > 1 &&
        !(self->store = bt_store_serve(0, &self->store_port)))
        st = BT_EIO;
    /* the first earlier policy whose warm start would be this one's runs it for both */
    for (int j = 0; j < k && st == BT_OK && !self->warm_from; j++) {
        bt_policy *leader = ctl->pol[j];
        if (!leader->warm_from && bt_config_same_warm_start(leader->cfg, cfg)) {
            self->warm_from = leader;
            leader->warm_followers++;
        }
    }
    if (st != BT_OK)
        bt_policy_destroy(&self);
    return self;
}

void bt_policy_destroy(bt_policy **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_policy *self = *self_p;
    for (int i = 0; i < S_MAX_EVALS; i++)
        if (self->evals[i].active) {
            bt_jobs_release(self->evals[i].jobs, self->evals[i].n_jobs);
            bt_loop_weights_release(&self->evals[i].weights);
        }
    bt_loop_weights_release(&self->weights);
    for (int i = 0; i < S_AHEAD; i++)
        if (self->ahead[i].active)
            bt_rollouts_release(&self->ahead[i]);
    bt_group_release(self);
    bt_jobs_release(self->tr.ranks, S_MAX_RANKS);
    bt_rollout_batch_release(&self->sampled);
    bt_rollout_batch_release(&self->batch);
    free(self->adv);
    bt_msg_destroy(&self->snap);
    bt_msg_destroy(&self->snap_new);
    bt_msg_destroy(&self->resume_state);
    bt_store_destroy(&self->store);
    bt_eval_suite_release(&self->suite); /* before the task it borrows */
    for (int k = 0; k < BT_CONFIG_MAX_SOURCES; k++)
        bt_source_destroy(&self->sources[k]);
    bt_mixture_destroy(&self->mix);
    free(self->saved_data);
    bt_buf_release(&self->warm_lines);
    free(self);
    *self_p = NULL;
}

/*  Epochs completed so far of the epoch source's stream (data.epoch_source). */
int64_t bt_policy_epoch(const bt_policy *self) {
    int k = bt_config_epoch_source(self->cfg);
    return self->epoch_size
               ? (int64_t)(bt_rollouts_train_position(self).drawn[k] / self->epoch_size)
               : 0;
}

/* ---- the warm start ---------------------------------------------------------------------------
 */

/*  Starts SFT step sft_step: demonstrations are the next examples of the first source's stream. */
static void s_sft_begin(bt_policy *self) {
    const bt_config *c = self->cfg;
    bt_lr_schedule sched;
    bt_config_lr(c, BT_CONFIG_PHASE_SFT, &sched);
    int64_t s = self->sft_step;
    bool last = s + 1 == c->sft.steps;
    self->sft_eval = last || (c->sft.eval_every > 0 && (s + 1) % c->sft.eval_every == 0);
    self->sft_lr = bt_lr_at(&sched, s);
    bt_mixture_position pos = bt_mixture_get_position(self->mix);
    bt_job job = {.kind = BT_JOB_SFT,
                  .role = BT_ROLE_TRAINER,
                  .start = (int64_t)pos.drawn[0],
                  .count = c->sft.batch_size,
                  .lr = self->sft_lr,
                  .publish = self->sft_eval};
    pos.drawn[0] += (uint64_t)c->sft.batch_size;
    bt_mixture_set_position(self->mix, &pos);
    bt_group_begin(self, &job);
}

bt_status bt_policy_sft_metric(bt_policy *self, const bt_jsonl *line) {
    BT_TRY(bt_runlog_metric(self->ctl->log, line));
    if (self->warm_followers > 0 && !bt_buf_put(&self->warm_lines, line->buf, line->len + 1))
        return bt_fail(BT_ENOMEM, "controller: out of memory");
    return BT_OK;
}

/*  The SFT warm start is over: the step-0 evaluations are due, then the first snapshot (the
    first point a rollback or a restore returns to). */
static void s_sft_end(bt_policy *self) {
    const bt_config *c = self->cfg;
    self->warm_accuracy = self->last_accuracy; /* what a follower takes */
    self->warm_drawn = bt_mixture_get_position(self->mix).drawn[0] - self->warm_pos.drawn[0];
    for (int i = 0; i < c->eval.n_datasets && c->workers.eval > 0; i++) {
        bt_trigger_mark(&self->triggers[i],
                        &(bt_trigger_at){.epoch = bt_policy_epoch(self), .tokens = self->tokens});
        self->evals_due[i] = true;
        snprintf(self->due_trigger[i], sizeof self->due_trigger[i], "start");
    }
    self->state = BT_POLICY_WARM_EVALS;
}

/*  BT_POLICY_SFT: the step's job, its metrics line, and the evaluation that decides the early
    stop when one is due (blocking: BT_POLICY_SFT_EVAL). */
static bt_status s_sft(bt_policy *self) {
    const bt_config *c = self->cfg;
    if (self->sft_step >= c->sft.steps) {
        s_sft_end(self);
        return BT_OK;
    }
    if (self->tr.state == BT_TRAINER_IDLE)
        s_sft_begin(self);
    BT_TRY(bt_group_poll(self));
    double loss = NAN;
    bt_status st = bt_msg_get_double(self->tr.job.result, "stats.loss", -1e300, 1e300, &loss);
    bt_group_release(self);
    BT_TRY(st);
    int64_t s = self->sft_step;
    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "sft");
    bt_jsonl_int(&line, "step", s + 1);
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_int(&line, "global_step", ++self->global_step);
    bt_jsonl_num(&line, "time", bt_now() - self->ctl->t0);
    bt_jsonl_num(&line, "loss", loss);
    bt_jsonl_num(&line, "lr", self->sft_lr);
    bt_policy_resources(self, &line);
    BT_TRY(bt_policy_sft_metric(self, &line));
    int ds = bt_evals_first_generate(c);
    if (self->sft_eval && s + 1 < c->sft.steps && ds >= 0 && c->workers.eval > 0) {
        self->sft_ev = NULL;
        self->state = BT_POLICY_SFT_EVAL;
        return BT_OK;
    }
    bt_ctl_report(self, "sft", s + 1, c->sft.steps, NAN);
    self->sft_step++;
    return BT_OK;
}

static bt_status s_sft_eval(bt_policy *self) {
    const bt_config *c = self->cfg;
    int64_t s = self->sft_step;
    if (!self->sft_ev)
        BT_TRY(
            bt_evals_start(self, bt_evals_first_generate(c), "sft", "sft", s + 1, &self->sft_ev));
    BT_TRY(bt_evals_wait(self, self->sft_ev));
    self->sft_ev = NULL;
    if (self->last_accuracy >= c->sft.stop_accuracy) {
        s_sft_end(self);
        return BT_OK;
    }
    bt_ctl_report(self, "sft", s + 1, c->sft.steps, NAN);
    self->sft_step++;
    self->state = BT_POLICY_SFT;
    return BT_OK;
}

/*  A trainer that loses its state before the first snapshot exists is reset to the state every
    trainer starts from, and the warm start runs again from its first step (metrics.jsonl cut
    back), so the run writes what it would have written. */
static bt_status s_warm_reset_begin(bt_policy *self) {
    snprintf(self->reason, sizeof self->reason, "%s", bt_last_error());
    if (++self->recoveries > S_MAX_RECOVERIES)
        return bt_fail(BT_ESTATE, "%s, after %d restores of the trainer in this run", self->reason,
                       S_MAX_RECOVERIES);
    bt_evals_cancel(self);
    if (self->tr.state != BT_TRAINER_IDLE)
        bt_group_abort(self);
    self->snap_state = BT_SNAP_IDLE;
    bt_msg_destroy(&self->snap_new);
    self->sft_ev = NULL;
    self->state = BT_POLICY_WARM_RESET;
    return BT_OK;
}

static bt_status s_warm_reset(bt_policy *self) {
    BT_TRY(bt_recovery_restore(self, NULL, 0, NAN));
    bt_mixture_set_position(self->mix, &self->warm_pos);
    BT_TRY(bt_runlog_drop_metrics(self->ctl->log, self->warm_metrics, self->variant_name));
    self->global_step = 0; /* its lines are gone with the rest */
    bt_buf_truncate(&self->warm_lines, 0);
    self->last_accuracy = NAN;
    self->ctl->stats.restores++;
    bt_jsonl line;
    bt_ctl_event_line(self->ctl, &line, "trainer_restored");
    bt_jsonl_str(&line, "from", "initial");
    bt_jsonl_int(&line, "step", 0);
    bt_jsonl_str(&line, "reason", self->reason);
    BT_TRY(bt_runlog_event(self->ctl->log, &line));
    bt_log(BT_LOG_WARN, "controller: %s: the warm start runs again from its first step",
           self->reason);
    self->sft_step = 0;
    self->state = self->warm_from ? BT_POLICY_WARM_SHARE : BT_POLICY_SFT;
    return BT_OK;
}

/*  The leader's SFT metrics lines again, under this policy's name: its metrics are then those
    of its config run alone. */
static bt_status s_share_lines(bt_policy *self, const bt_policy *leader) {
    char from[BT_CONFIG_NAME_MAX + 16], to[BT_CONFIG_NAME_MAX + 16];
    snprintf(from, sizeof from, "\"variant\":\"%s\"", leader->variant_name);
    snprintf(to, sizeof to, "\"variant\":\"%s\"", self->variant_name);
    const bt_buf *lines = &leader->warm_lines;
    for (size_t at = 0; at < lines->len; at += strlen(lines->data + at) + 1) {
        const char *text = lines->data + at, *name = strstr(text, from);
        BT_ASSERT(name); /* every line the leader kept names it */
        bt_jsonl line;
        bt_jsonl_init(&line);
        int n = snprintf(line.buf, sizeof line.buf, "%.*s%s%s", (int)(name - text), text, to,
                         name + strlen(from));
        line.overflow = n < 0 || (size_t)n >= sizeof line.buf;
        line.len = line.overflow ? 0 : (size_t)n;
        BT_TRY(bt_runlog_metric(self->ctl->log, &line));
    }
    return BT_OK;
}

/*  BT_POLICY_WARM_SHARE: once the leader's first snapshot exists, the trainer takes it (checked
    by its canary loss) as the version the leader's warm start made; the policy then stands
    where a warm start of its own would have left it (the data SFT drew, the accuracy of its last
    evaluation, the clock, its SFT lines), and goes on to its own step-0 evaluations and
    snapshot.  The leader takes no step before every policy's warm start is over
    (population.c), so its snapshot stays the one taken after SFT. */
static bt_status s_warm_share(bt_policy *self) {
    const bt_policy *leader = self->warm_from;
    if (leader->state < BT_POLICY_GATE || !leader->snap)
        return BT_PENDING;
    BT_TRY(
        bt_recovery_restore(self, leader->snap, leader->saved.version, leader->saved.canary_loss));
    bt_mixture_position pos = bt_mixture_get_position(self->mix);
    pos.drawn[0] += leader->warm_drawn;
    bt_mixture_set_position(self->mix, &pos);
    self->last_accuracy = leader->warm_accuracy;
    self->sft_step = leader->sft_step;
    self->global_step = leader->global_step; /* its SFT lines, copied (it took no step since) */
    self->clock = leader->clock;
    BT_TRY(s_share_lines(self, leader));
    bt_jsonl line;
    bt_ctl_event_line(self->ctl, &line, "warm_start_shared");
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_str(&line, "from", leader->variant_name);
    bt_jsonl_int(&line, "sft_steps", leader->sft_step + (leader->sft_step < self->cfg->sft.steps));
    bt_jsonl_int(&line, "version", leader->saved.version);
    BT_TRY(bt_runlog_event(self->ctl->log, &line));
    bt_ctl_report(self, "sft", self->cfg->sft.steps, self->cfg->sft.steps, NAN);
    s_sft_end(self);
    return BT_OK;
}

/*  BT_POLICY_START: the checkpoint to resume from, or the warm start. */
static bt_status s_start(bt_policy *self) {
    bt_policy_resources_mark(self);
    if (self->ctl->resuming)
        return bt_saves_resume_read(self);
    bt_train_clock_start(&self->clock, bt_now());
    self->warm_pos = bt_mixture_get_position(self->mix);
    self->warm_metrics = bt_runlog_metrics_size(self->ctl->log);
    self->sft_step = 0;
    self->state = self->warm_from ? BT_POLICY_WARM_SHARE : BT_POLICY_SFT;
    return BT_OK;
}

/* ---- a GRPO step ------------------------------------------------------------------------------
 */

void bt_policy_open_gate(bt_policy *self) {
    bt_lr_schedule sched;
    bt_config_lr(self->cfg, BT_CONFIG_PHASE_GRPO, &sched);
    self->step_t0 = bt_now();
    self->step_lr = bt_lr_at(&sched, self->step) * bt_tuner_lr_scale(&self->tuner);
    self->step_version = self->version;
    self->step_kl_coef = self->tuner.kl_coef;
    self->step_temperature = self->tuner.temperature;
    self->step_clip_high = self->clip_high;
    self->ts = (bt_trainer_stats){0};
    self->updated = false;
    bt_rollout_batch_release(&self->sampled);
    bt_rollout_batch_release(&self->batch);
    bt_rollout_batch_init(&self->sampled);
    bt_rollout_batch_init(&self->batch);
    self->state = BT_POLICY_ROLLOUT;
}

/*  With grpo.dynamic_sampling, the groups whose rewards all agree (zero advantage, no gradient)
    are dropped (DAPO, Yu et al. 2025): with turn rewards, those whose turns' returns all agree;
    self->batch is what trains.  Returns the groups kept. */
static int64_t s_select(bt_policy *self, bt_status *st) {
    const bt_rollout_batch *in = &self->sampled;
    bool *keep = malloc(sizeof *keep * (size_t)(in->n_prompts + 1));
    if (!keep) {
        *st = bt_fail(BT_ENOMEM, "controller: out of memory");
        return 0;
    }
    const int64_t G = in->group_size;
    double *adv = in->has_turn_rewards ? malloc(sizeof *adv * (size_t)(G * BT_MAX_TURNS)) : NULL;
    if (in->has_turn_rewards && !adv) {
        free(keep);
        *st = bt_fail(BT_ENOMEM, "controller: out of memory");
        return 0;
    }
    bt_grpo_config gc;
    bt_config_grpo(self->cfg, &gc);
    int64_t kept = 0;
    for (int64_t g = 0; g < in->n_prompts && *st == BT_OK; g++) {
        bool flat = false; /* every advantage zero: every return of the group the same */
        if (self->cfg->grpo.dynamic_sampling && !in->has_turn_rewards)
            flat = bt_grpo_group_has_zero_variance(in->rewards + g * G, G);
        if (self->cfg->grpo.dynamic_sampling && in->has_turn_rewards) {
            *st = bt_grpo_turn_advantages(in->turn_rewards + g * G * BT_MAX_TURNS,
                                          in->n_turns + g * G, 1, G, BT_MAX_TURNS, gc.turn_gamma,
                                          gc.adv_norm, adv);
            flat = true;
            for (int64_t i = 0; i < G * BT_MAX_TURNS && flat; i++)
                flat = adv[i] == 0.0;
        }
        keep[g] = !flat;
        kept += keep[g];
    }
    if (*st == BT_OK)
        *st = bt_batch_keep_groups(in, keep, &self->batch);
    free(adv);
    free(keep);
    return kept;
}

/*  The update of the step's groups: advantages in float64 at the controller (DESIGN.md, step 3),
    then the train job.  Nothing to learn from (dynamic sampling kept no group): no update. */
static bt_status s_train_begin(bt_policy *self) {
    const bt_config *c = self->cfg;
    bt_status st = BT_OK;
    if (s_select(self, &st) == 0 || st != BT_OK) {
        self->ts = (bt_trainer_stats){.loss = NAN,
                                      .kl = NAN,
                                      .clip_frac = NAN,
                                      .entropy = NAN,
                                      .grad_norm = NAN,
                                      .mismatch_kl = NAN,
                                      .ratio_std = NAN,
                                      .ratio_min = NAN,
                                      .ratio_max = NAN};
        self->updated = false;
        return st;
    }
    self->updated = true;
    const bt_rollout_batch *b = &self->batch;
    int64_t per = b->has_turn_rewards ? BT_MAX_TURNS : 1; /* per turn: (n, BT_MAX_TURNS) */
    free(self->adv);
    self->adv = malloc(sizeof *self->adv * (size_t)(b->n * per + 1));
    if (!self->adv)
        return bt_fail(BT_ENOMEM, "controller: out of memory");
    bt_grpo_config gc;
    bt_config_grpo(c, &gc);
    if (b->has_turn_rewards)
        BT_TRY(bt_grpo_turn_advantages(b->turn_rewards, b->n_turns, b->n_prompts, b->group_size,
                                       BT_MAX_TURNS, gc.turn_gamma, gc.adv_norm, self->adv));
    else
        BT_TRY(bt_grpo_advantages(b->rewards, b->n_prompts, b->group_size, gc.adv_norm, self->adv));
    /* debug.inject_nan_at_step: once, even when a rollback replays that step */
    bool inject = c->debug.inject_nan_at_step == self->step + 1 && !self->nan_injected;
    self->nan_injected |= inject;
    bt_group_begin(self, &(bt_job){.kind = BT_JOB_TRAIN,
                                   .role = BT_ROLE_TRAINER,
                                   .lr = self->step_lr,
                                   .publish = true,
                                   .batch = &self->batch,
                                   .adv = self->adv,
                                   .inject_nan = inject});
    return BT_OK;
}

/*  debug.log_prompts: which prompts trained, and how many samples of each were right. */
static bt_status s_log_trained(bt_policy *self) {
    const bt_rollout_batch *b = &self->batch;
    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "event", "trained");
    bt_jsonl_int(&line, "step", self->step + 1);
    bt_jsonl_uints(&line, "prompts", b->indices, (size_t)b->n_prompts);
    uint64_t *right = calloc((size_t)b->n_prompts + 1, sizeof *right);
    for (int64_t g = 0; right && g < b->n_prompts; g++)
        for (int64_t j = 0; j < b->group_size; j++)
            right[g] += b->correct[g * b->group_size + j];
    if (right)
        bt_jsonl_uints(&line, "correct", right, (size_t)b->n_prompts);
    free(right);
    return bt_runlog_event(self->ctl->log, &line);
}

/*  The trainer ran out of memory on this step and retried it with half the micro-batch, lowered
    times: the micro-batch it trained with from now on. */
static bt_status s_log_lowered(bt_policy *self) {
    bt_jsonl line;
    bt_ctl_event_line(self->ctl, &line, "micro_batch_lowered");
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_int(&line, "step", self->step + 1);
    bt_jsonl_int(&line, "from", self->ts.micro_batch << self->ts.lowered);
    bt_jsonl_int(&line, "micro_batch", self->ts.micro_batch);
    bt_jsonl_str(&line, "reason", "out of memory");
    return bt_runlog_event(self->ctl->log, &line);
}

/*  grpo.micro_batch "auto": what the trainer chose from the planner, at its first step. */
static bt_status s_log_auto(bt_policy *self) {
    bt_jsonl line;
    bt_ctl_event_line(self->ctl, &line, "micro_batch_auto");
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_int(&line, "step", self->step + 1);
    bt_jsonl_int(&line, "micro_batch", self->ts.micro_batch);
    return bt_runlog_event(self->ctl->log, &line);
}

/*  The train job's statistics, and the share of the trainer's token slots that were padding. */
static bt_status s_train_end(bt_policy *self) {
    bt_status st = bt_trainer_stats_from_msg(self->tr.job.result, &self->ts);
    bt_group_release(self);
    double real = -self->ts.shared; /* what the trainer's slots hold besides padding: the */
    for (int64_t i = 0; i < self->batch.n; i++) /* rows' tokens, each shared prompt once */
        real += (double)(self->batch.prompt_lens[i] + self->batch.lengths[i]);
    self->padding = st == BT_OK && self->ts.slots > 0 ? 1.0 - real / self->ts.slots : NAN;
    if (st == BT_OK && self->ts.lowered > 0)
        st = s_log_lowered(self);
    if (st == BT_OK && self->cfg->grpo.micro_batch == 0 && self->micro_batch == 0 &&
        self->ts.lowered == 0 && self->ts.micro_batch > 0)
        st = s_log_auto(self);
    if (st == BT_OK)
        self->micro_batch = self->ts.micro_batch;
    if (st == BT_OK && self->cfg->debug.log_prompts)
        st = s_log_trained(self);
    bt_rollout_batch_release(&self->batch);
    free(self->adv);
    self->adv = NULL;
    return st;
}

/*  Drops the step's batches (a recovery or rollback runs the step again, or skips it). */
static void s_step_drop(bt_policy *self) {
    bt_rollout_batch_release(&self->sampled);
    bt_rollout_batch_release(&self->batch);
    free(self->adv);
    self->adv = NULL;
}

/*  BT_POLICY_ROLLOUT: the steps ahead launched, the current one's groups awaited. */
static bt_status s_rollout(bt_policy *self) {
    BT_TRY(bt_rollouts_launch_ahead(self));
    BT_TRY(bt_rollouts_collect(self, &self->sampled, &self->step_oldest));
    BT_TRY(s_train_begin(self));
    if (self->updated) {
        self->state = BT_POLICY_TRAIN;
        return BT_OK;
    }
    return bt_policy_record(self);
}

/*  BT_POLICY_TRAIN: the update; a trainer that lost its state is restored (BT_POLICY_RECOVER), a
    diverged step rolled back (BT_POLICY_ROLLBACK). */
static bt_status s_train(bt_policy *self) {
    bt_status st = bt_group_poll(self);
    if (st == BT_OK)
        st = s_train_end(self);
    if (st == BT_ESTATE) {
        s_step_drop(self);
        return bt_recovery_begin(self, BT_POLICY_RECOVER, bt_last_error());
    }
    BT_TRY(st);
    char why[160];
    if (bt_recovery_diverged(self, &self->ts, why, sizeof why)) {
        s_step_drop(self);
        return bt_recovery_begin(self, BT_POLICY_ROLLBACK, why);
    }
    return bt_policy_record(self);
}

/*  BT_POLICY_PLATEAU: the learning-rate plateau rule's evaluation of this step decides the next
    step's learning rate: it is awaited, so the decision lands at the same step whatever the
    timing (a resumed run must match). */
static bt_status s_plateau(bt_policy *self) {
    const bt_tuner_plateau_config *pc = &self->tuner.cfg.lr_plateau;
    for (int i = 0; i < S_MAX_EVALS && pc->enabled; i++)
        if (self->evals[i].active && self->evals[i].step == self->step &&
            !strcmp(self->cfg->eval.datasets[self->evals[i].ds].name, pc->dataset))
            BT_TRY(bt_evals_wait(self, &self->evals[i]));
    self->save_stage = 0;
    self->state = BT_POLICY_SAVE;
    return BT_OK;
}

/*  BT_POLICY_SAVE: epoch events and the snapshot due (the checkpoints are cut at the gate, where
    the population moves a policy past its last step to BT_POLICY_FINAL); a trainer lost while
    snapshotting is restored as in BT_POLICY_TRAIN. */
static bt_status s_save(bt_policy *self) {
    const bt_config *c = self->cfg;
    bt_status st = bt_recovery_after_step(self);
    if (st == BT_ESTATE) {
        self->save_stage = 0;
        return bt_recovery_begin(self, BT_POLICY_RECOVER, bt_last_error());
    }
    BT_TRY(st);
    self->ctl->steps_done++;
    if (self->step < c->grpo.steps)
        bt_ctl_report(self, "rl", self->step, c->grpo.steps, self->step_tps);
    self->state = BT_POLICY_GATE;
    return BT_OK;
}

/*  BT_POLICY_FINAL: the run's results are complete when the policy is done: every evaluation
    written, the writer idle, the policy saved (RUN_DIR/model). */
static bt_status s_final(bt_policy *self) {
    const bt_config *c = self->cfg;
    BT_TRY(bt_evals_wait(self, NULL));
    BT_TRY(bt_recovery_writer_idle(self->ctl));
    bt_saves_poll(self->ctl);
    BT_TRY(bt_ctl_save_final(self));
    if (c->grpo.steps > 0)
        bt_ctl_report(self, "rl", self->step, c->grpo.steps, self->step_tps);
    self->state = BT_POLICY_DONE;
    return BT_OK;
}

/*  One state's work.  BT_OK: the state changed (or the policy is at the gate or done); BT_PENDING:
    it waits; else a run-ending error. */
static bt_status s_run_state(bt_policy *self) {
    bt_status st = BT_OK;
    bool warm = false;
    switch (self->state) {
    case BT_POLICY_START: return s_start(self);
    case BT_POLICY_RESUME:
        BT_TRY(bt_saves_resume_poll(self));
        bt_ctl_report(self, "rl", self->step, self->cfg->grpo.steps, NAN);
        self->state = BT_POLICY_GATE;
        return BT_OK;
    case BT_POLICY_SFT:
        st = s_sft(self);
        warm = true;
        break;
    case BT_POLICY_SFT_EVAL: return s_sft_eval(self);
    case BT_POLICY_WARM_EVALS:
        BT_TRY(bt_evals_start_due(self));
        self->state = BT_POLICY_WARM_SNAP;
        return BT_OK;
    case BT_POLICY_WARM_SNAP:
        st = bt_recovery_snapshot(self);
        warm = true;
        if (st == BT_OK) {
            bt_ctl_report(self, "rl", 0, self->cfg->grpo.steps, NAN);
            self->state = BT_POLICY_GATE;
        }
        break;
    case BT_POLICY_WARM_RESET: return s_warm_reset(self);
    case BT_POLICY_WARM_SHARE:
        st = s_warm_share(self);
        warm = true;
        break;
    case BT_POLICY_ROLLOUT: return s_rollout(self);
    case BT_POLICY_TRAIN: return s_train(self);
    case BT_POLICY_RECOVER:
    case BT_POLICY_ROLLBACK:
        BT_TRY(bt_recovery_poll(self));
        bt_ctl_report(self, "rl", self->step, self->cfg->grpo.steps, NAN);
        self->state = BT_POLICY_GATE;
        return BT_OK;
    case BT_POLICY_EVALS:
        BT_TRY(bt_evals_start_due(self));
        self->state = BT_POLICY_PLATEAU;
        return BT_OK;
    case BT_POLICY_PLATEAU: return s_plateau(self);
    case BT_POLICY_SAVE: return s_save(self);
    case BT_POLICY_FINAL: return s_final(self);
    case BT_POLICY_EXPLOIT:
        BT_TRY(bt_population_exploit_poll(self));
        self->state = BT_POLICY_GATE;
        return BT_OK;
    case BT_POLICY_GATE:
    case BT_POLICY_DONE: return BT_OK;
    }
    if (warm && st == BT_ESTATE) /* lost before the first snapshot: the warm start again */
        return s_warm_reset_begin(self);
    return st;
}

bt_status bt_policy_advance(bt_policy *self) {
    for (;;) {
        if (self->state == BT_POLICY_DONE || self->state == BT_POLICY_GATE)
            return BT_OK; /* the population opens the gate, or sends a finished policy on */
        BT_TRY(s_run_state(self));
    }
}
