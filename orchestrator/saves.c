/*  saves.c — the run's checkpoints and the resume from them (see rooms.h).  A checkpoint is cut at
    the population's gate, where every live policy stands at the same step with nothing in flight
    but evaluations: each policy's trainer state (its snapshot) and controller state (state.json,
    data.json) are taken with one size of metrics.jsonl and events.jsonl, so a resume cuts both
    logs back once and every policy goes on from the same step.  Without variants the files are
    the checkpoint folder's own; with variants each policy's are in a folder of its name, beside
    population.json (the step, the last PBT round, which policies stopped early). */
#include "rooms.h"

/*  "NAME/" with variants, "" without: where policy p's files go in a checkpoint folder. */
static void s_folder(const bt_policy *p, char *out, size_t len) {
    snprintf(out, len, "%s%s", p->ctl->n_pol > 1 ? p->variant_name : "",
             p->ctl->n_pol > 1 ? "/" : "");
}

static bool s_live(const bt_policy *p) {
    return p->state != BT_POLICY_DONE && p->state != BT_POLICY_FINAL;
}

static void s_ckpt_reject(const char *folder, const char *reason, void *user) {
    bt_controller_t *self = user;
    bt_jsonl line;
    bt_ctl_event_line(self, &line, "checkpoint_rejected");
    bt_jsonl_str(&line, "folder", folder);
    bt_jsonl_str(&line, "reason", reason);
    bt_runlog_event(self->log, &line);
}

void bt_saves_poll(bt_controller_t *self) {
    bt_ckpt_result r;
    while (self->writer && bt_ckpt_writer_poll(self->writer, &r)) {
        bt_jsonl line;
        bt_ctl_event_line(self, &line,
                          r.status == BT_OK ? "checkpoint_saved" : "checkpoint_failed");
        bt_jsonl_int(&line, "step", r.step);
        bt_jsonl_str(&line, "kind", r.full ? "full" : "light");
        bt_jsonl_str(&line, r.status == BT_OK ? "folder" : "reason",
                     r.status == BT_OK ? r.path : r.error);
        bt_jsonl_num(&line, "seconds", r.seconds);
        bt_runlog_event(self->log, &line);
    }
}

/*  The dtype policy p's model files are written in: model.save_dtype, whose "auto" is the dtype
    model.path's weights are stored in (float32 without one). */
static bt_status s_save_dtype(const bt_policy *p, bt_dtype *out) {
    bt_dtype source = BT_F32;
    if (p->cfg->save_dtype == BT_CONFIG_SAVE_DTYPE_AUTO && p->cfg->model_path[0])
        BT_TRY(bt_model_stored_dtype(p->cfg->model_path, &source));
    *out = bt_config_resolve_save_dtype(p->cfg, source);
    return BT_OK;
}

/*  A malloc'd copy of m's elements as dtype to, rounded to nearest even as torch's .to(). */
static void *s_convert(bt_ctx *tmp, const bt_msg_tensor *m, bt_dtype to) {
    size_t nbytes = m->nbytes / bt_dtype_size(m->dtype) * bt_dtype_size(to);
    void *out = malloc(nbytes + 1);
    bt_tensor *t =
        bt_to_dtype(tmp, bt_from_host(tmp, m->dtype, bt_cpu(), m->ndim, m->shape, m->data), to);
    if (out && bt_to_host(t, out, nbytes) != BT_OK) {
        free(out);
        out = NULL;
    }
    bt_ctx_reset(tmp);
    return out;
}

/*  Adds the tensors of msg whose names start with prefix or also (NULL: none) as the file name
    (prefix removed when strip), each floating tensor as dtype as (converted copies are never
    borrowed). */
static bt_status s_add_tensors(bt_ckpt_snapshot_t *snap, const char *name, const bt_msg_t *msg,
                               const char *prefix, const char *also, bool strip, bool borrow,
                               bt_dtype as, const bt_st_tensor *extra) {
    int n = bt_msg_tensor_count(msg), k = 0;
    bt_st_tensor *t = calloc((size_t)n + 2, sizeof *t);
    void **owned = calloc((size_t)n + 1, sizeof *owned);
    bt_ctx *tmp = bt_ctx_new();
    bt_status st = t && owned && tmp ? BT_OK : bt_fail(BT_ENOMEM, "controller: out of memory");
    size_t plen = strlen(prefix);
    for (int i = 0; i < n && st == BT_OK; i++) {
        bt_msg_tensor m = bt_msg_tensor_at(msg, i);
        if (strncmp(m.name, prefix, plen) != 0 && !(also && !strncmp(m.name, also, strlen(also))))
            continue;
        bool floating = m.dtype == BT_F32 || m.dtype == BT_BF16 || m.dtype == BT_F16;
        const void *data = m.data;
        if (floating && m.dtype != as && !(data = owned[i] = s_convert(tmp, &m, as)))
            st = bt_fail(BT_ENOMEM, "controller: %s: cannot convert %s to %s", name, m.name,
                         bt_dtype_name(as));
        t[k] = (bt_st_tensor){.name = m.name + (strip ? plen : 0),
                              .dtype = floating ? as : m.dtype,
                              .ndim = m.ndim,
                              .data = data};
        memcpy(t[k++].shape, m.shape, sizeof m.shape);
        borrow = borrow && !owned[i];
    }
    if (extra && st == BT_OK)
        t[k++] = *extra;
    if (st == BT_OK && k > 0)
        st = borrow ? bt_ckpt_snapshot_add_tensors_borrowed(snap, name, t, k)
                    : bt_ckpt_snapshot_add_tensors(snap, name, t, k);
    for (int i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(t);
    bt_ctx_destroy(&tmp);
    return st;
}

/*  LoRA: the adapters among msg's tensors named prefix + NAME (all of them: a LoRA trainer's
    parameters are its adapters) as PEFT's adapter_model.safetensors (names base_model.model. +
    NAME) and adapter_config.json, under folder. */
static bt_status s_add_adapters(bt_ckpt_snapshot_t *snap, const bt_policy *p, const char *folder,
                                const bt_msg_t *msg, const char *prefix, bool borrow) {
    char name[BT_CKPT_NAME_MAX];
    char *config = bt_lora_config_to_json(&p->cfg->lora, p->cfg->model_path);
    snprintf(name, sizeof name, "%sadapter_config.json", folder);
    bt_status st = config ? bt_ckpt_snapshot_add_text(snap, name, config) : BT_ENOMEM;
    free(config);
    int n = bt_msg_tensor_count(msg), k = 0;
    bt_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    char(*names)[BT_WIRE_NAME_MAX + 32] = calloc((size_t)n + 1, sizeof *names);
    if (st == BT_OK && (!t || !names))
        st = bt_fail(BT_ENOMEM, "controller: out of memory");
    size_t plen = strlen(prefix);
    for (int i = 0; st == BT_OK && i < n; i++) {
        bt_msg_tensor m = bt_msg_tensor_at(msg, i);
        if (strncmp(m.name, prefix, plen) != 0)
            continue;
        snprintf(names[k], sizeof names[k], BT_LORA_PEFT_PREFIX "%s", m.name + plen);
        t[k] = (bt_st_tensor){.name = names[k], .dtype = m.dtype, .ndim = m.ndim, .data = m.data};
        memcpy(t[k++].shape, m.shape, sizeof m.shape);
    }
    snprintf(name, sizeof name, "%sadapter_model.safetensors", folder);
    if (st == BT_OK && k > 0)
        st = borrow ? bt_ckpt_snapshot_add_tensors_borrowed(snap, name, t, k)
                    : bt_ckpt_snapshot_add_tensors(snap, name, t, k);
    free(t);
    free(names);
    return st;
}

/*  The model files of a checkpoint under folder: config.json and model.safetensors (Hugging Face
    names, in the policy's save dtype) from the tensors named prefix + NAME of msg; with LoRA,
    config.json (the base's) and the adapters in PEFT's layout (the base is model.path's, or drawn
    from run.seed). */
static bt_status s_add_model(bt_ckpt_snapshot_t *snap, const bt_policy *p, const bt_msg_t *msg,
                             const char *prefix, bool borrow, bt_dtype as) {
    char folder[BT_CONFIG_NAME_MAX + 2], name[BT_CKPT_NAME_MAX];
    s_folder(p, folder, sizeof folder);
    char *config = bt_model_config_to_json(&p->cfg->model);
    snprintf(name, sizeof name, "%sconfig.json", folder);
    bt_status st = config ? bt_ckpt_snapshot_add_text(snap, name, config) : BT_ENOMEM;
    free(config);
    if (st == BT_OK && p->cfg->lora.rank > 0)
        return s_add_adapters(snap, p, folder, msg, prefix, borrow);
    snprintf(name, sizeof name, "%smodel.safetensors", folder);
    return st == BT_OK ? s_add_tensors(snap, name, msg, prefix, NULL, true, borrow, as, NULL) : st;
}

/*  Policy p's part of a full checkpoint: its snapshot's model (a Hugging Face folder), optimizer
    (moments and step count, and the float32 master weights param.NAME when the model file holds
    another dtype, so a resume is exact), KL reference, and its state.json and data.json.  The
    tensors are borrowed from p->snap, which bt_recovery_snapshot keeps until the writer is idle. */
static bt_status s_add_policy(bt_ckpt_snapshot_t *snap, bt_policy *p) {
    char folder[BT_CONFIG_NAME_MAX + 2], name[BT_CKPT_NAME_MAX];
    s_folder(p, folder, sizeof folder);
    bt_dtype as;
    BT_TRY(s_save_dtype(p, &as));
    BT_TRY(s_add_model(snap, p, p->snap, "param.", true, as));
    int64_t steps = 0;
    BT_TRY(bt_msg_get_int(p->snap, "adam_steps", 0, BT_WIRE_INT_MAX, &steps));
    p->snap_adam_steps = steps; /* borrowed too: lives as long as p->snap */
    bt_st_tensor adam = {
        .name = "adam_steps", .dtype = BT_I64, .ndim = 0, .data = &p->snap_adam_steps};
    snprintf(name, sizeof name, "%soptimizer.safetensors", folder);
    BT_TRY(s_add_tensors(snap, name, p->snap, "exp_avg", as == BT_F32 ? NULL : "param.", false,
                         true, BT_F32, &adam));
    snprintf(name, sizeof name, "%sreference.safetensors", folder); /* with a KL reference */
    BT_TRY(s_add_tensors(snap, name, p->snap, "ref.", NULL, false, true, BT_F32, NULL));
    char *state = bt_runstate_to_json(&p->saved);
    snprintf(name, sizeof name, "%sstate.json", folder);
    bt_status st = state ? bt_ckpt_snapshot_add_text(snap, name, state) : BT_ENOMEM;
    free(state);
    snprintf(name, sizeof name, "%sdata.json", folder); /* the data position, the curriculum */
    return st == BT_OK ? bt_ckpt_snapshot_add_text(snap, name, p->saved_data) : st;
}

/*  population.json: the step, the last PBT round, the policies that stopped early. */
static bt_status s_add_population(bt_ckpt_snapshot_t *snap, bt_controller_t *self, int64_t step) {
    bt_runstate_population rec = {.step = step, .pbt_step = self->pbt_step, .n = self->n_pol};
    for (int k = 0; k < self->n_pol; k++) {
        snprintf(rec.policies[k].name, sizeof rec.policies[k].name, "%s",
                 self->pol[k]->variant_name);
        rec.policies[k].stopped = self->pol[k]->stopped;
        rec.policies[k].step = self->pol[k]->step;
    }
    char *text = bt_runstate_population_to_json(&rec);
    bt_status st = text ? bt_ckpt_snapshot_add_text(snap, "population.json", text) : BT_ENOMEM;
    free(text);
    return st;
}

/*  The full checkpoint of step: every live policy's state captured now (one size of each log). */
static bt_status s_write_full(bt_controller_t *self, int64_t step) {
    bt_ckpt_snapshot_t *snap = bt_ckpt_snapshot_new(step, true);
    bt_status st = snap ? BT_OK : BT_ENOMEM;
    for (int k = 0; k < self->n_pol && st == BT_OK; k++)
        if (s_live(self->pol[k])) {
            st = bt_recovery_capture(self->pol[k]);
            if (st == BT_OK)
                st = s_add_policy(snap, self->pol[k]);
        }
    if (st == BT_OK && self->n_pol > 1)
        st = s_add_population(snap, self, step);
    if (st == BT_OK)
        st = bt_ckpt_writer_submit(self->writer, &snap);
    bt_ckpt_snapshot_destroy(&snap);
    return st;
}

/*  A light checkpoint of step: each live policy's latest published weights as a model folder
    (copied now).  When the writer is busy it is kept and submitted once the writer is free (a
    `checkpoint_deferred` event); one kept already is replaced by the newer (`checkpoint_skipped`).
 */
static bt_status s_write_light(bt_controller_t *self, int64_t step) {
    bt_ckpt_snapshot_t *snap = bt_ckpt_snapshot_new(step, false);
    bt_status st = snap ? BT_OK : BT_ENOMEM;
    int models = 0;
    for (int k = 0; k < self->n_pol && st == BT_OK; k++) {
        bt_policy *p = self->pol[k];
        bt_dtype as = BT_F32;
        if (s_live(p) && p->weights && ++models && (st = s_save_dtype(p, &as)) == BT_OK)
            st = s_add_model(snap, p, p->weights->msg, "", false, as);
    }
    if (st == BT_OK && models > 0 && !bt_ckpt_writer_is_busy(self->writer))
        st = bt_ckpt_writer_submit(self->writer, &snap);
    if (st != BT_OK || models == 0 || !snap) {
        bt_ckpt_snapshot_destroy(&snap);
        return st;
    }
    bt_jsonl line;
    if (self->light_pending) {
        bt_ctl_event_line(self, &line, "checkpoint_skipped");
        bt_jsonl_str(&line, "kind", "light");
        bt_jsonl_int(&line, "step", bt_ckpt_snapshot_step(self->light_pending));
        bt_jsonl_int(&line, "superseded_by", step);
        st = bt_runlog_event(self->log, &line);
    }
    if (st == BT_OK) {
        bt_ctl_event_line(self, &line, "checkpoint_deferred");
        bt_jsonl_str(&line, "kind", "light");
        bt_jsonl_int(&line, "step", step);
        st = bt_runlog_event(self->log, &line);
    }
    bt_ckpt_snapshot_destroy(&self->light_pending);
    self->light_pending = snap;
    return st;
}

/*  Training seconds of the run: the most any live policy has trained. */
static double s_train_seconds(const bt_controller_t *self) {
    double secs = 0;
    for (int k = 0; k < self->n_pol; k++)
        if (s_live(self->pol[k]))
            secs = fmax(secs, bt_recovery_train_seconds(self->pol[k]));
    return secs;
}

/*  Which checkpoints step calls for: a full one every checkpoint.full_every_steps steps, every
    full_every_secs training seconds, when a policy's epoch source completed full_every_epochs
    more epochs, or owed (the writer was busy when one was due); a light one every
    light_every_steps steps. */
static void s_plan(bt_controller_t *self, int64_t step) {
    const bt_config *c = self->cfg;
    bool epoch_due = false;
    for (int k = 0; k < self->n_pol; k++) {
        epoch_due |= self->pol[k]->epoch_due;
        self->pol[k]->epoch_due = false;
    }
    self->cut_secs = s_train_seconds(self);
    self->cut_full =
        self->writer &&
        (epoch_due ||
         (c->checkpoint.full_every_steps > 0 && step % c->checkpoint.full_every_steps == 0) ||
         (c->checkpoint.full_every_secs > 0 &&
          self->cut_secs - self->last_full_s >= c->checkpoint.full_every_secs) ||
         self->full_owed);
    self->cut_light = self->writer && c->checkpoint.light_every_steps > 0 &&
                      step % c->checkpoint.light_every_steps == 0;
}

/*  Every live policy's snapshot of step taken (those taken after the step are fresh already).  A
    trainer lost meanwhile starts that policy's recovery: BT_ESTATE, and the cut is made when the
    policies stand together at the gate again. */
static bt_status s_snapshots(bt_controller_t *self) {
    bt_status pending = BT_OK;
    for (int k = 0; k < self->n_pol; k++) {
        bt_policy *p = self->pol[k];
        bool fresh = p->snap && p->snap_state == BT_SNAP_IDLE && p->saved.step == p->step &&
                     p->saved.version == p->version;
        if (!s_live(p) || fresh)
            continue;
        bt_status st = bt_recovery_snapshot(p);
        if (st == BT_ESTATE) {
            BT_TRY(bt_recovery_begin(p, BT_POLICY_RECOVER, bt_last_error()));
            return BT_ESTATE;
        }
        if (st == BT_PENDING)
            pending = st;
        else
            BT_TRY(st);
    }
    return pending;
}

bt_status bt_saves_cut(bt_controller_t *self, int64_t step, bool last) {
    if (step >= 1 && step > self->cut_step) {
        if (self->cut_stage == 0) {
            s_plan(self, step);
            self->cut_stage = 1;
        }
        if (self->cut_stage == 1) { /* at most one save in flight; the last one waits for it */
            if (self->cut_full && last)
                BT_TRY(bt_recovery_writer_idle(self));
            if (self->cut_full && bt_ckpt_writer_is_busy(self->writer)) {
                self->full_owed = true;
                self->cut_full = false;
            }
            self->cut_stage = 2;
        }
        if (self->cut_full) {
            bt_status st = s_snapshots(self);
            if (st == BT_ESTATE) {
                self->cut_stage = 0;
                return BT_OK; /* the gate waits for that policy's recovery */
            }
            BT_TRY(st);
            BT_TRY(s_write_full(self, step));
            self->full_owed = false;
            self->last_full_s = self->cut_secs;
        } else if (self->cut_light) { /* a full checkpoint holds the policies too */
            BT_TRY(s_write_light(self, step));
        }
        self->cut_step = step;
        self->cut_stage = 0;
    }
    if (self->light_pending && last)
        BT_TRY(bt_recovery_writer_idle(self));
    if (self->light_pending && !bt_ckpt_writer_is_busy(self->writer))
        BT_TRY(bt_ckpt_writer_submit(self->writer, &self->light_pending));
    bt_saves_poll(self);
    return BT_OK;
}

void bt_saves_rewind(bt_controller_t *self, int64_t step) {
    if (self->cut_step > step)
        self->cut_step = step;
}

/* ---- resume ------------------------------------------------------------------------------- */

/*  The trainer state a checkpoint folder holds, as a restore message, and its run state. */
static bt_status s_read_policy(const char *folder, bt_msg_t **state_out, bt_runstate *run) {
    char path[BT_CONFIG_PATH_MAX + 256], *text = NULL;
    snprintf(path, sizeof path, "%s/state.json", folder);
    BT_TRY(bt_file_read(path, 64 << 20, &text, NULL));
    bt_status st = bt_runstate_from_json(text, path, run);
    free(text);
    bt_msg_t *m = bt_msg_new(BT_MSG_TASK);
    bt_safetensors_t *files[3] = {NULL, NULL, NULL};
    const char *names[3] = {"model.safetensors", "optimizer.safetensors", "reference.safetensors"};
    bool peft = false; /* LoRA: the adapters in PEFT's layout instead of model.safetensors */
    for (int f = 0; f < 3 && st == BT_OK; f++) {
        snprintf(path, sizeof path, "%s/%s", folder, names[f]);
        if (f == 2 && access(path, F_OK) != 0)
            break; /* only with a KL reference */
        if (f == 0 && access(path, F_OK) != 0) {
            snprintf(path, sizeof path, "%s/adapter_model.safetensors", folder);
            peft = access(path, F_OK) == 0;
        }
        st = bt_safetensors_open(path, &files[f]);
    }
    /* the float32 masters: optimizer.safetensors's param.NAME when the model file holds another
       dtype (model.save_dtype), else model.safetensors's */
    bool masters = false;
    for (int i = 0; files[1] && i < bt_safetensors_count(files[1]) && !masters; i++)
        masters = !strncmp(bt_safetensors_entry(files[1], i)->name, "param.", 6);
    for (int f = masters; f < 3 && files[f] && st == BT_OK; f++)
        for (int i = 0; i < bt_safetensors_count(files[f]) && st == BT_OK; i++) {
            const bt_st_entry *e = bt_safetensors_entry(files[f], i);
            char name[BT_WIRE_NAME_MAX];
            if (f == 1 && !strcmp(e->name, "adam_steps")) {
                int64_t steps;
                memcpy(&steps, e->data, sizeof steps);
                st = bt_msg_set_int(m, "adam_steps", steps);
                continue;
            }
            const char *tensor = e->name;
            if (f == 0 && peft &&
                strncmp(tensor, BT_LORA_PEFT_PREFIX, strlen(BT_LORA_PEFT_PREFIX)) == 0)
                tensor += strlen(BT_LORA_PEFT_PREFIX);
            snprintf(name, sizeof name, "%s%s", f == 0 ? "param." : "", tensor);
            st = bt_msg_add_tensor(m, name, e->dtype, e->ndim, e->shape, e->data);
        }
    for (int f = 0; f < 3; f++)
        bt_safetensors_destroy(&files[f]);
    if (st == BT_OK && !m)
        st = BT_ENOMEM;
    if (st != BT_OK)
        bt_msg_destroy(&m);
    *state_out = m;
    return st;
}

/*  The population's record of a checkpoint of a run with variants, checked against the run. */
static bt_status s_read_population(bt_controller_t *self, const char *folder) {
    char *text = NULL, source[BT_CONFIG_PATH_MAX + 32];
    snprintf(source, sizeof source, "%s/population.json", folder);
    BT_TRY(bt_ckpt_read_file(folder, "population.json", 1 << 20, &text));
    bt_status st = bt_runstate_population_from_json(text, source, &self->resume_pop);
    free(text);
    BT_TRY(st);
    const bt_runstate_population *r = &self->resume_pop;
    bool same = r->n == self->n_pol;
    for (int k = 0; same && k < r->n; k++)
        same = strcmp(r->policies[k].name, self->pol[k]->variant_name) == 0;
    if (!same)
        return bt_fail(BT_EINVAL,
                       "%s: policies: the checkpoint's variants are not this config's (%d "
                       "variants, the first \"%s\"): resume with the config it was taken with",
                       source, r->n, r->policies[0].name);
    self->pbt_step = r->pbt_step;
    return BT_OK;
}

/*  The run's checkpoint (the one named, else the newest verified), once for every policy. */
static bt_status s_resume_folder(bt_controller_t *self) {
    char *folder = self->resume_folder;
    if (folder[0])
        return BT_OK;
    if (self->resume[0]) {
        snprintf(folder, BT_CONFIG_PATH_MAX, "%s", self->resume);
        BT_TRY(bt_ckpt_verify(folder));
    } else {
        BT_TRY(bt_ckpt_find_latest(bt_runlog_dir(self->log), s_ckpt_reject, self, folder,
                                   BT_CONFIG_PATH_MAX));
    }
    if (self->n_pol > 1) {
        bt_status st = s_read_population(self, folder);
        if (st == BT_OK)
            return BT_OK;
        folder[0] = '\0';
        return st;
    }
    return BT_OK;
}

bt_status bt_saves_resume_read(bt_policy *p) {
    bt_controller_t *ctl = p->ctl;
    BT_TRY(s_resume_folder(ctl));
    ctl->early_checked = -1; /* the gate of the checkpoint's step decides again */
    if (ctl->n_pol > 1 && ctl->resume_pop.policies[p->variant].stopped) {
        p->stopped = true; /* its lines are all before the checkpoint's sizes */
        p->step = ctl->resume_pop.policies[p->variant].step;
        p->state = BT_POLICY_DONE;
        return BT_OK;
    }
    snprintf(p->resume_folder, sizeof p->resume_folder, "%s%s%s", ctl->resume_folder,
             ctl->n_pol > 1 ? "/" : "", ctl->n_pol > 1 ? p->variant_name : "");
    BT_TRY(s_read_policy(p->resume_folder, &p->resume_state, &p->resume_run));
    if (ctl->n_pol > 1 && p->resume_run.step != ctl->resume_pop.step)
        return bt_fail(BT_EFORMAT, "%s/state.json: step %lld, but population.json says %lld",
                       p->resume_folder, (long long)p->resume_run.step,
                       (long long)ctl->resume_pop.step);
    const bt_runstate *run = &p->resume_run, *first = &ctl->resume_first;
    if (ctl->resume_first_read &&
        (run->metrics_size != first->metrics_size || run->events_size != first->events_size))
        return bt_fail(BT_EFORMAT,
                       "%s/state.json: metrics_size %lld and events_size %lld, but the first "
                       "policy's are %lld and %lld: the policies of one checkpoint share one size "
                       "of each log",
                       p->resume_folder, (long long)run->metrics_size, (long long)run->events_size,
                       (long long)first->metrics_size, (long long)first->events_size);
    if (!ctl->resume_first_read)
        ctl->resume_first = *run;
    ctl->resume_first_read = true;
    p->state = BT_POLICY_RESUME;
    return BT_OK;
}

/*  The data position and the curriculum of the checkpoint (data.json; absent in a checkpoint from
    before data.sources: the state's cursor holds). */
static bt_status s_resume_data(bt_policy *p) {
    char path[sizeof p->resume_folder + 16], *data = NULL;
    snprintf(path, sizeof path, "%s/data.json", p->resume_folder);
    if (access(path, F_OK) == 0) {
        bt_mixture_position pos;
        bt_status st = bt_file_read(path, SIZE_MAX, &data, NULL);
        if (st == BT_OK)
            st = bt_mixture_from_json(p->mix, data, path, &pos);
        free(data);
        BT_TRY(st);
    }
    free(p->saved_data);
    bt_mixture_position now = bt_mixture_get_position(p->mix);
    p->saved_data = bt_mixture_to_json(p->mix, &now);
    return p->saved_data ? BT_OK : bt_fail(BT_ENOMEM, "controller: out of memory");
}

/*  metrics.jsonl and events.jsonl cut back to the checkpoint, once for the population (every
    policy's state.json holds the same sizes, bt_saves_resume_read checked): a second cut would
    delete what the policies restored first have written since, their pending evaluations' lines. */
static bt_status s_resume_cut(bt_policy *p) {
    bt_controller_t *ctl = p->ctl;
    const bt_runstate *run = &p->resume_run;
    if (ctl->resume_cut)
        return BT_OK;
    BT_TRY(bt_runlog_truncate_metrics(ctl->log, run->metrics_size));
    if (run->events_size >= 0) /* the events of the steps after the checkpoint are written again */
        BT_TRY(bt_runlog_truncate_events(ctl->log, run->events_size));
    ctl->resume_cut = true;
    return BT_OK;
}

/*  The checkpoint's state in the trainer and the policy; the logs cut back to it (s_resume_cut);
    its pending evaluations started again. */
bt_status bt_saves_resume_poll(bt_policy *p) {
    bt_controller_t *ctl = p->ctl;
    bt_runstate *run = &p->resume_run;
    BT_TRY(bt_recovery_restore(p, p->resume_state, run->version, run->canary_loss));
    BT_TRY(s_resume_cut(p));
    bt_msg_destroy(&p->snap);
    p->snap = p->resume_state;
    p->resume_state = NULL;
    p->saved = *run;
    bt_recovery_apply(p, run, true);
    BT_TRY(s_resume_data(p));
    p->epoch_seen = bt_policy_epoch(p); /* its epoch_end events were written before */
    bt_train_clock_init(&p->clock, run->train_seconds);
    bt_train_clock_start(&p->clock, bt_now());
    ctl->last_full_s = fmax(ctl->last_full_s, run->train_seconds);
    ctl->cut_step = run->step; /* the checkpoint's own step is not saved again */
    bt_jsonl resumed;
    bt_ctl_event_line(ctl, &resumed, "resumed");
    if (ctl->n_pol > 1)
        bt_jsonl_str(&resumed, "variant", p->variant_name);
    bt_jsonl_str(&resumed, "folder", p->resume_folder);
    bt_jsonl_int(&resumed, "step", run->step);
    bt_runlog_event(ctl->log, &resumed);
    return bt_recovery_pending_evals(p, run);
}
