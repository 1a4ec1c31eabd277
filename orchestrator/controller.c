/*  controller.c — the controller's event loop and the GRPO schedule; see controller.h. */
#define _POSIX_C_SOURCE 200809L
#include "baton/controller.h"

#include "baton/checkpoint.h"
#include "baton/fileio.h"
#include "baton/messages.h"
#include "baton/mixture.h"
#include "baton/registry.h"
#include "baton/rollout.h"
#include "baton/runstate.h"
#include "baton/safetensors.h"
#include "baton/scaling.h"
#include "baton/security.h"
#include "baton/shard.h"
#include "baton/tokenizer.h"
#include "baton/wire.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

enum {
    S_JOIN_TIMEOUT_MS = 60000,
    S_MAX_DROPPED_LOGGED = 1024, /* prompt ids a "dropped" event lists, per step */
    S_MAX_ATTEMPTS = 4,
    S_MAX_EVALS = 16,      /* evaluations in flight at once */
    S_MAX_SHARDS = 64,     /* shards of one evaluation */
    S_TRACK = 1024,        /* workers whose weights version and speed are tracked */
    S_ROLLBACK_EVERY = 10, /* steps between in-memory snapshots: the most a rollback loses */
    S_MAX_ROLLBACKS = 3,   /* rollbacks to one snapshot before the run gives up */
    S_MAX_RANKS = 64,      /* data-parallel trainer ranks */
    S_AHEAD = 17,          /* steps whose rollouts may be in flight: the current + max_staleness */
    S_MAX_POINTS = 4096,   /* held-out losses a scaling-law fit sees */
    S_MAX_RECOVERIES = 8,  /* trainer state restores in one run before it gives up */
    S_MAX_REJECTED_LOGGED = 100 /* result_rejected events written, per run */
};

/*  A WEIGHTS message shared by the controller (the latest) and the evaluations pinned to it. */
typedef struct s_weights {
    bt_msg_t *msg;
    int64_t version;
    int refs;
} s_weights;

struct s_evaluation;

/*  One unit of work for a worker; the TASK message is built from it at each hand-out. */
typedef struct s_job {
    struct bt_controller *ctl; /* the variant's controller that queued it */
    const char *kind; /* "rollout", "train", "sft", "eval", "restore", "snapshot", "group" */
    bt_role role;
    int rank; /* group: this rank's number in the formation */
    int64_t start, count, seed;
    double lr;
    bool publish;
    const uint64_t *prompts;       /* rollout: training-stream indices [count] */
    const bt_rollout_batch *batch; /* train */
    const double *adv;             /* train: [batch->n] */
    bool inject_nan;               /* train: debug.inject_nan_at_step */
    const bt_msg_t *state;         /* restore: the trainer state to load */
    int64_t restore_version;       /* restore: the version the loaded weights get */
    struct s_evaluation *ev;       /* eval: the evaluation the shard belongs to */
    int64_t expect_version;        /* train, sft, snapshot: the trainer version it applies to */
    bt_msg_t *result;              /* owned once the task is done */
    double compute_s;              /* the worker's compute time for it */
    int32_t worker;                /* who completed it */
    bt_status status;              /* a failure no retry mends (BT_ESTATE: restore the trainer) */
} s_job;

/*  The rollouts of one GRPO step, in flight on the rollout workers: launched when the step comes
    (synchronous) or up to grpo.max_staleness steps before it (asynchronous). */
typedef struct s_rollouts {
    bool active;
    int64_t step;                         /* the 0-based step it is for */
    bt_mixture_position before;           /* the data position before its prompts were drawn */
    int64_t dropped;                      /* prompts the curriculum dropped while drawing them */
    double weights[BT_TUNER_MAX_SOURCES]; /* the mixture weights they were drawn with */
    uint64_t *idx;                        /* its prompt ids, grouped by source */
    s_job jobs[64];
    int n_jobs;
    int64_t first_task;
} s_rollouts;

/*  One evaluation of one dataset at one policy version, running beside training. */
typedef struct s_evaluation {
    bool active;
    int ds;             /* eval.datasets index */
    const char *phase;  /* "sft" or "rl" */
    char trigger[32];   /* "start", "steps", "epochs+seconds", "final", "sft" */
    int64_t step;       /* the training step it belongs to */
    s_weights *weights; /* pinned; NULL: version 0 as every worker builds it */
    int64_t version;
    s_job jobs[S_MAX_SHARDS];
    int n_jobs;
    int64_t first_task;
    double t_start;
} s_evaluation;

/*  The controllers of a run's strategy variants: one socket and registry (the first one's), one
    worker pool. */
typedef struct s_hub {
    struct bt_controller *v[BT_CONFIG_MAX_VARIANTS];
    int n;
    /* a failure no retry can mend (out of memory: the same task needs the same memory); every
       turn then fails with it, until bt_controller_stop */
    char fatal[BT_WIRE_STR_MAX / 4];
    bt_status fatal_status;
    bool stopping;
    int32_t trainer;      /* without a trainer group: the worker holding the training state; -1
                             until the first trainer job is handed out */
    int64_t last_turn_ms; /* when s_turn last looked at the socket */
    int64_t last_ping_ms; /* when the workers were last sent PING */
    char last_fail[512];  /* the last FAIL's text, sanitised: a give-up names it */
    int64_t kind_ms[8];   /* the longest measured duration of each job kind (s_kind_index) */
    int64_t rejected;     /* result_rejected events written */
    char run_id[96];      /* this invocation: messages stamped with another run's are refused */
    bt_controller_gone_fn *gone; /* the launcher: may a worker of a role still come? */
    void *gone_user;
} s_hub;

struct bt_controller {
    const bt_run_config *cfg;
    int variant;              /* index in the hub; 0 without variants */
    const char *variant_name; /* "main" without variants */
    s_hub *hub;               /* every variant's controller (this one alone without variants);
                                 owned by variant 0 */
    double worker_s;          /* worker compute spent on this variant's tasks */
    const char *config_json;
    bt_runlog_t *log;
    void *sock;
    bt_registry_t *reg;
    bt_controller_stats stats;
    s_weights *weights; /* the latest WEIGHTS, sent to (re)joining rollout workers */
    int64_t version;
    /* evaluation */
    bt_trigger triggers[BT_EVAL_MAX_DATASETS];
    bt_train_clock clock;
    int64_t ds_size[BT_EVAL_MAX_DATASETS]; /* items each dataset evaluates */
    uint64_t epoch_size;                   /* training-stream indices per epoch; 0: none */
    s_evaluation evals[S_MAX_EVALS];
    int64_t worker_version[S_TRACK];             /* eval workers: weights held; -1: unknown */
    double speed[S_TRACK][BT_EVAL_MAX_DATASETS]; /* eval workers: items per second (EMA) */
    /* checkpoints and faults */
    bt_msg_t *snap;           /* the trainer's state at saved.step (a snapshot or restore TASK) */
    int64_t trainer_version;  /* the version the trainer holds after its last job */
    int recoveries;           /* trainer state restores (a trainer lost with its state) */
    bt_run_state saved;       /* the controller's state at the same point */
    int64_t snap_adam_steps;  /* its AdamW step count, which a full checkpoint borrows */
    int rollbacks;            /* rollbacks to the current snapshot */
    bt_ckpt_writer_t *writer; /* when checkpoints are configured */
    bool full_owed;           /* a full checkpoint is due but the writer was busy */
    bt_ckpt_snapshot_t *light_pending; /* a light checkpoint that fell due during a save: its
                                          step's policy, copied then, submitted once the writer
                                          is free */
    double last_full_s;                /* training seconds at the last full checkpoint */
    bool nan_injected;
    char start_error[700]; /* a worker that could not build its state said why (BYE {error}) */
    double loss_ema;       /* |loss|, for spike detection */
    int64_t loss_n;
    char resume[BT_CONFIG_PATH_MAX]; /* with resuming: "" = LATEST, else a checkpoint folder */
    bool resuming;
    double wait_since;         /* while s_eval_wait waits: when it began; else NaN */
    double wait_busy[S_TRACK]; /* eval worker compute inside that wait */
    int64_t step;              /* GRPO steps done */
    double tokens;             /* completion tokens sampled by those steps */
    /* the training data: each source's task, the mixture's draws and curriculum (mixture.h) */
    bt_task_t *sources[BT_CONFIG_MAX_SOURCES];
    int n_sources;
    bt_mixture_t *mix;
    int64_t dropped_step; /* prompts the curriculum dropped while drawing the current step's
                             (its rollouts slot's, kept when the slot is released) */
    double step_weights[BT_TUNER_MAX_SOURCES]; /* the mixture weights that drew them */
    double padding;     /* the last update's share of trainer token slots that were padding */
    int64_t epoch_seen; /* the epoch source's completed epochs at the last step's end */
    char *saved_data;   /* data.json of the snapshot: the position and the curriculum then */
    double t0, last_accuracy, last_reward, tokens_per_s;
    const char *phase; /* of the last report */
    bt_progress_fn *progress;
    void *progress_user;
    /* the data-parallel trainer group (workers.trainer > 1) */
    bt_store *store; /* the ranks' rendezvous */
    int store_port;
    int32_t ranks[S_MAX_RANKS]; /* worker ids, by rank */
    int world;                  /* ranks; 0: the group must be (re-)formed */
    int world_last;             /* ranks of the last formation */
    int64_t generation;         /* formations so far */
    /* rollouts in flight, slot step % S_AHEAD; launched: the next step to launch */
    s_rollouts ahead[S_AHEAD];
    int64_t launched;
    /* the hyperparameters the next step uses (KL coefficient, temperature, learning rate) */
    bt_tuner tuner;
    /* scaling-law prediction (scaling.*): held-out losses by step, and every prediction made */
    int64_t sc_steps[S_MAX_POINTS];
    double sc_loss[S_MAX_POINTS];
    int sc_n;
    bt_scaling_record sc_record;
};

static void s_weights_release(s_weights **w_p);
static void s_rollouts_release(s_rollouts *r);
static void s_evals_cancel(bt_controller_t *self);
static bt_status s_restore_trainer(bt_controller_t *self, const bt_msg_t *state, int64_t version,
                                   double canary);
static bt_mixture_position s_train_position(const bt_controller_t *self);

static int64_t s_now_ms(void) {
    return (int64_t)(bt_now() * 1000.0);
}

/*  Starts an events.jsonl line: the event's name and the seconds since the start. */
static void s_event_line(const bt_controller_t *self, bt_jsonl *line, const char *event) {
    bt_jsonl_init(line);
    bt_jsonl_str(line, "event", event);
    bt_jsonl_num(line, "time", bt_now() - self->t0);
}

static void s_event(bt_controller_t *self, const char *event, const char *key, const char *value) {
    bt_jsonl line;
    s_event_line(self, &line, event);
    if (key)
        bt_jsonl_str(&line, key, value);
    bt_runlog_event(self->log, &line);
}

static bt_status s_eval_setup(bt_controller_t *self);

/*  The tuner's decisions as events; they already changed the values the next step uses. */
static bt_status s_tuner_events(bt_controller_t *self, const bt_tuner_decision *d, int n) {
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
    if (s_eval_setup(self) != BT_OK ||
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
    if (s_eval_setup(self) != BT_OK) {
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
            s_weights_release(&self->evals[i].weights);
        }
    s_weights_release(&self->weights);
    for (int i = 0; i < S_AHEAD; i++)
        if (self->ahead[i].active)
            s_rollouts_release(&self->ahead[i]);
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
int64_t bt_controller_version(const bt_controller_t *self) {
    return self->version;
}

/*  phase is kept for bt_controller_progress. */
static void s_report(bt_controller_t *self, const char *phase, int64_t step, int64_t total,
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

/* ---- sending --------------------------------------------------------------------------------- */

static s_weights *s_weights_ref(s_weights *w) {
    if (w)
        w->refs++;
    return w;
}

static void s_weights_release(s_weights **w_p) {
    s_weights *w = *w_p;
    *w_p = NULL;
    if (w && --w->refs == 0) {
        bt_msg_destroy(&w->msg);
        free(w);
    }
}

static bt_status s_send(bt_controller_t *self, bt_msg_t **msg, const bt_worker_info *w) {
    bt_msg_set_run(*msg, self->hub->run_id);
    return bt_msg_send(msg, self->sock, w->peer, w->peer_len);
}

/*  The stored WEIGHTS for one more recipient; the tensors are shared, not copied. */
static bt_msg_t *s_weights_copy(const bt_msg_t *src) {
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
    just before its shard (s_pin_weights). */
static void s_send_weights(bt_controller_t *self, const bt_worker_info *w) {
    if (!self->weights || w->role != BT_ROLE_ROLLOUT || w->state == BT_WORKER_LOST)
        return;
    bt_msg_t *copy = s_weights_copy(self->weights->msg);
    if (!copy || s_send(self, &copy, w) != BT_OK)
        bt_log(BT_LOG_WARN, "controller: weights not sent to %s: %s", w->name, bt_last_error());
}

/*  Makes sure eval worker w holds the weights of ev's version before it gets a shard. */
static bt_status s_pin_weights(bt_controller_t *self, const s_evaluation *ev,
                               const bt_worker_info *w) {
    int64_t held = w->id < S_TRACK ? self->worker_version[w->id] : -1;
    if (held == ev->version || (held < 0 && !ev->weights))
        return BT_OK; /* version 0 without a WEIGHTS message: as every worker builds it */
    if (!ev->weights)
        return bt_fail(BT_EINVAL,
                       "controller: %s holds version %lld, and version 0 was never "
                       "published to send it back",
                       w->name, (long long)held);
    bt_msg_t *copy = s_weights_copy(ev->weights->msg);
    if (!copy)
        return BT_ENOMEM;
    BT_TRY(s_send(self, &copy, w));
    if (w->id < S_TRACK)
        self->worker_version[w->id] = ev->version;
    return BT_OK;
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
    bt_msg_set_run(m, self->hub->run_id);
    bt_msg_send(&m, self->sock, peer, len);
}

static bt_status s_build_task(bt_controller_t *self, const s_job *j, int64_t id, bt_msg_t *m) {
    BT_TRY(bt_msg_set_int(m, "task", id));
    BT_TRY(bt_msg_set_int(m, "variant", self->variant));
    BT_TRY(bt_msg_set_str(m, "kind", j->kind));
    BT_TRY(bt_msg_set_int(m, "version", j->ev ? j->ev->version : self->version));
    BT_TRY(bt_msg_set_int(m, "seed", j->seed));
    BT_TRY(bt_msg_set_int(m, "start", j->start));
    BT_TRY(bt_msg_set_int(m, "count", j->count));
    BT_TRY(bt_msg_set_double(m, "lr", j->lr));
    BT_TRY(bt_msg_set_bool(m, "publish", j->publish));
    if (j->role == BT_ROLE_TRAINER && j->expect_version >= 0) /* applied to it only, once */
        BT_TRY(bt_msg_set_int(m, "expect_version", j->expect_version));
    const bt_run_config *c = self->cfg;
    if (!strcmp(j->kind, "rollout")) {
        int64_t shape[1] = {j->count};
        BT_TRY(bt_msg_set_int(m, "group_size", c->grpo.group_size));
        BT_TRY(bt_msg_set_double(m, "temperature", self->tuner.temperature));
        BT_TRY(bt_msg_set_double(m, "top_p", c->grpo.top_p));
        BT_TRY(bt_msg_set_int(m, "top_k", c->grpo.top_k));
        BT_TRY(bt_msg_set_int(m, "max_new_tokens", c->grpo.max_new_tokens));
        BT_TRY(bt_msg_add_tensor(m, "prompts", BT_I64, 1, shape, j->prompts));
    } else if (!strcmp(j->kind, "train")) {
        int64_t shape[1] = {j->batch->n};
        BT_TRY(bt_batch_to_msg(j->batch, m));
        BT_TRY(bt_msg_add_tensor(m, "adv", BT_F64, 1, shape, j->adv));
        BT_TRY(bt_msg_set_double(m, "kl_coef", self->tuner.kl_coef));
        BT_TRY(bt_msg_set_bool(m, "freeze_reference", self->step == 0)); /* RL starts here */
        BT_TRY(bt_msg_set_bool(m, "inject_nan", j->inject_nan));
    } else if (!strcmp(j->kind, "restore") && !j->state) {
        BT_TRY(bt_msg_set_bool(m, "initial", true)); /* the state every trainer starts from */
    } else if (!strcmp(j->kind, "restore")) {
        int64_t steps;
        BT_TRY(bt_msg_get_int(j->state, "adam_steps", 0, BT_WIRE_INT_MAX, &steps));
        BT_TRY(bt_msg_set_int(m, "adam_steps", steps));
        BT_TRY(bt_msg_set_int(m, "restore_version", j->restore_version));
        for (int i = 0; i < bt_msg_tensor_count(j->state); i++)
            BT_TRY(bt_msg_add_tensor_shared(m, j->state, i));
    } else if (!strcmp(j->kind, "group")) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "g%lld", (long long)self->generation);
        BT_TRY(bt_msg_set_int(m, "rank", j->rank));
        BT_TRY(bt_msg_set_int(m, "world", self->world));
        BT_TRY(bt_msg_set_int(m, "store_port", self->store_port));
        BT_TRY(bt_msg_set_str(m, "prefix", prefix));
        BT_TRY(bt_msg_set_int(m, "timeout_ms", c->workers.collective_timeout_ms));
    } else if (!strcmp(j->kind, "eval")) {
        BT_TRY(bt_msg_set_int(m, "dataset", j->ev->ds));
        /* the SFT early-stop check needs accuracy only */
        BT_TRY(bt_msg_set_bool(m, "robustness",
                               self->cfg->eval.datasets[j->ev->ds].robustness &&
                                   strcmp(j->ev->phase, "sft") != 0));
    }
    return BT_OK;
}

/* ---- receiving ------------------------------------------------------------------------------- */

/*  A worker's text made safe for a terminal and a log line: control bytes become '?', and an
    empty text says so. */
static void s_sanitise(const char *in, char *out, size_t cap) {
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
        s_event_line(self, &line, "worker_refused");
        bt_jsonl_str(&line, "key", user);
        bt_jsonl_str(&line, "worker", name);
        bt_jsonl_str(&line, "reason", why);
        bt_runlog_event(self->log, &line);
        s_send_invalid(self, peer, len, why, true);
        return;
    }
    if (bt_msg_get_int(m, "proto", 0, BT_WIRE_INT_MAX, &proto) != BT_OK || proto != BT_WIRE_PROTO) {
        snprintf(why, sizeof why, "this controller speaks protocol %d, the worker %lld",
                 BT_WIRE_PROTO, (long long)proto);
        self->stats.wrong_run++;
        s_send_invalid(self, peer, len, why, true);
        return;
    }
    int32_t id = bt_registry_join(self->reg, role, name, peer, len, s_now_ms());
    if (id < 0) {
        s_send_invalid(self, peer, len, bt_last_error(), false);
        return;
    }
    bt_worker_info *w = bt_registry_worker(self->reg, id);
    for (int k = 0; id < S_TRACK && k < self->hub->n; k++) { /* it may hold anything */
        self->hub->v[k]->worker_version[id] = -1;
        memset(self->hub->v[k]->speed[id], 0, sizeof self->hub->v[k]->speed[id]);
    }
    bt_msg_t *welcome = bt_msg_new(BT_MSG_WELCOME);
    int64_t shape[1] = {(int64_t)strlen(self->config_json)};
    if (!welcome || bt_msg_set_int(welcome, "worker", id) != BT_OK ||
        bt_msg_set_int(welcome, "heartbeat_ms", self->cfg->workers.heartbeat_ms) != BT_OK ||
        bt_msg_set_int(welcome, "controller_timeout_ms",
                       self->cfg->workers.controller_timeout_ms) != BT_OK ||
        bt_msg_add_tensor(welcome, "config", BT_U8, 1, shape, self->config_json) != BT_OK ||
        s_send(self, &welcome, w) != BT_OK) {
        bt_msg_destroy(&welcome);
        bt_log(BT_LOG_WARN, "controller: WELCOME to %s failed: %s", name, bt_last_error());
        return;
    }
    for (int k = 0; k < self->hub->n; k++)
        s_send_weights(self->hub->v[k], w);
    s_event(self, "worker_joined", "worker", name);
}

/*  The trainer job `from` holds now, when it is one that publishes weights (train, sft, restore
    on rank 0) and is still in flight; NULL otherwise. */
static const s_job *s_publishing_job(bt_controller_t *self, const bt_worker_info *from) {
    if (from->role != BT_ROLE_TRAINER || from->task < 0 ||
        bt_registry_task_state(self->reg, from->task) != BT_TASK_ASSIGNED)
        return NULL;
    const s_job *j = bt_registry_task_user(self->reg, from->task);
    return j && j->publish ? j : NULL;
}

static void s_on_weights(bt_controller_t *self, bt_msg_t **m, const bt_worker_info *from) {
    int64_t version, variant = 0;
    int n_variants = self->hub->n;
    const s_job *job = s_publishing_job(self, from);
    if (!job || bt_msg_get_int(*m, "version", 0, BT_WIRE_INT_MAX, &version) != BT_OK ||
        (bt_msg_has(*m, "variant") &&
         bt_msg_get_int(*m, "variant", 0, n_variants - 1, &variant) != BT_OK) ||
        (job->ctl && job->ctl->variant != variant)) {
        /* only the trainer holding the variant's publishing job in flight may publish */
        self->stats.refused_weights++;
        bt_jsonl line;
        s_event_line(self, &line, "weights_refused");
        bt_jsonl_str(&line, "worker", from->name);
        bt_jsonl_str(&line, "role", bt_role_name(from->role));
        bt_runlog_event(self->log, &line);
        return;
    }
    self = self->hub->v[variant]; /* the variant's controller keeps them */
    s_weights *fresh = calloc(1, sizeof *fresh);
    if (!fresh) {
        bt_log(BT_LOG_ERROR, "controller: out of memory for weights");
        return;
    }
    *fresh = (s_weights){.msg = *m, .version = version, .refs = 1};
    *m = NULL;
    s_weights_release(&self->weights);
    self->weights = fresh;
    self->version = version;
    for (int32_t i = 0; i < bt_registry_worker_count(self->reg); i++)
        s_send_weights(self, bt_registry_worker(self->reg, i));
}

/*  The job's RESULT parses as its kind's (every field the schedule reads later, in range), so a
    malformed one is refused at the door instead of ending the run where it is read. */
static bt_status s_check_result(const s_job *job, const bt_msg_t *m) {
    double x;
    int64_t v;
    if (!strcmp(job->kind, "rollout")) {
        bt_rollout_batch b;
        bt_rollout_batch_init(&b);
        bt_status st = bt_batch_from_msg(m, &b);
        if (st == BT_OK && b.n_prompts != job->count)
            st = bt_fail(BT_EFORMAT, "RESULT: %lld prompts for a rollout job of %lld",
                         (long long)b.n_prompts, (long long)job->count);
        bt_rollout_batch_release(&b);
        return st;
    }
    if (!strcmp(job->kind, "eval")) {
        bt_evaluator_sums sums;
        return bt_sums_from_msg(m, &sums);
    }
    if (job->role != BT_ROLE_TRAINER)
        return BT_OK;
    BT_TRY(bt_msg_get_int(m, "trainer_version", 0, BT_WIRE_INT_MAX, &v));
    if (!strcmp(job->kind, "train")) {
        bt_trainer_stats ts;
        return bt_trainer_stats_from_msg(m, &ts);
    }
    if (!strcmp(job->kind, "sft"))
        return bt_msg_get_double(m, "stats.loss", -1e300, 1e300, &x);
    if (!strcmp(job->kind, "snapshot") || !strcmp(job->kind, "restore"))
        return bt_msg_get_double(m, "canary_loss", 0, 1e300, &x);
    return BT_OK;
}

/*  A FAIL, or a RESULT refused by s_check_result: I/O failures are re-queued (up to
    S_MAX_ATTEMPTS hand-outs); BT_ESTATE ends the job for a restore; anything else fails the same
    way again (a shape, a range, the memory it needs), so the run stops with it at once. */
static void s_on_failure(bt_controller_t *self, int64_t task, s_job *job, bt_worker_info *w,
                         bt_status code, const char *text) {
    char err[512];
    s_sanitise(text, err, sizeof err);
    snprintf(self->hub->last_fail, sizeof self->hub->last_fail, "%s: %s", w->name, err);
    self->stats.failed_tasks++;
    bt_jsonl line;
    s_event_line(self, &line, "task_failed");
    bt_jsonl_str(&line, "kind", job ? job->kind : "?");
    bt_jsonl_str(&line, "worker", w->name);
    bt_jsonl_str(&line, "error", err);
    bt_jsonl_int(&line, "status", code);
    bt_runlog_event(self->log, &line);
    bool trainer = job && job->role == BT_ROLE_TRAINER;
    if (code == BT_ESTATE && !trainer) /* an eval worker without the pinned weights: send them */
        for (int k = 0; w->id < S_TRACK && k < self->hub->n; k++)
            self->hub->v[k]->worker_version[w->id] = -1;
    if (code == BT_EIO || code == BT_EFORMAT || (code == BT_ESTATE && !trainer)) {
        /* a retry may succeed: a link, a bad message, weights sent again */
        int32_t attempts = bt_registry_task_attempts(self->reg, task);
        if (attempts < S_MAX_ATTEMPTS || !job)
            return;
        bt_registry_cancel(self->reg, task); /* handed out S_MAX_ATTEMPTS times: enough */
        snprintf(err, sizeof err, "%s", self->hub->last_fail);
        snprintf(self->hub->last_fail, sizeof self->hub->last_fail,
                 "controller: a %s job failed %d times; the last time: %.400s", job->kind, attempts,
                 err);
        job->status = BT_EIO;
        return;
    }
    bt_registry_cancel(self->reg, task);
    if (job)
        job->status = code;
    if (code == BT_ESTATE)
        return; /* the schedule restores the trainer (s_recover) */
    if (self->hub->fatal[0])
        return;
    snprintf(self->hub->fatal, sizeof self->hub->fatal, "%s", self->hub->last_fail);
    self->hub->fatal_status = code;
    s_event_line(self, &line, "run_stopped");
    bt_jsonl_str(&line, "reason", code == BT_ENOMEM ? "out of memory" : "a job no retry can mend");
    bt_jsonl_str(&line, "worker", w->name);
    bt_jsonl_str(&line, "error", err);
    bt_runlog_event(self->log, &line); /* the run's error says it to the user */
}

/*  The longest measured duration of a kind is kept for deadlines (s_kind_index). */
static int s_kind_index(const char *kind) {
    static const char *const kinds[] = {"rollout", "train",    "sft",   "eval",
                                        "restore", "snapshot", "group", NULL};
    for (int i = 0; kinds[i]; i++)
        if (!strcmp(kinds[i], kind))
            return i;
    return 7;
}

static void s_on_result(bt_controller_t *self, bt_msg_t **m, bt_worker_info *w) {
    int64_t task;
    if (bt_msg_get_int(*m, "task", 0, BT_WIRE_INT_MAX, &task) != BT_OK) {
        self->stats.malformed++;
        return;
    }
    bool failed = bt_msg_type_of(*m) == BT_MSG_FAIL;
    s_job *job = w->task == task ? bt_registry_task_user(self->reg, task) : NULL;
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
               s_check_result(job, *m) != BT_OK) { /* (a cancelled job's result is dropped) */
        failed = true; /* a RESULT that is not its job's: that job's FAIL, naming the sender */
        code = BT_EFORMAT;
        err = bt_last_error();
        self->stats.rejected_results++;
        quarantine = true; /* broken or hostile: it gets no more jobs */
        if (self->hub->rejected++ < S_MAX_REJECTED_LOGGED) {
            bt_jsonl line;
            s_event_line(self, &line, "result_rejected");
            bt_jsonl_str(&line, "worker", w->name);
            bt_jsonl_str(&line, "kind", job->kind);
            bt_jsonl_int(&line, "task", task);
            bt_jsonl_str(&line, "error", err);
            bt_runlog_event(self->log, &line);
        }
    }
    int64_t published = -1;
    if (!failed && job && job->publish && job->role == BT_ROLE_TRAINER && job->ctl &&
        bt_registry_task_state(self->reg, task) == BT_TASK_ASSIGNED &&
        bt_msg_get_int(*m, "trainer_version", 0, BT_WIRE_INT_MAX, &published) == BT_OK &&
        published != job->ctl->version) {
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
            s_event(self, "worker_quarantined", "worker", w->name);
        }
        return;
    }
    int64_t ms = s_now_ms() - assigned, *longest = &self->hub->kind_ms[s_kind_index(job->kind)];
    *longest = ms > *longest ? ms : *longest;
    job->compute_s = 0;
    job->worker = w->id;
    bt_msg_get_double(*m, "compute_s", 0, 1e9, &job->compute_s);
    if (job->ctl) /* each variant's share of the pool */
        job->ctl->worker_s += job->compute_s;
    if (job->role == BT_ROLE_TRAINER && job->ctl)
        bt_msg_get_int(*m, "trainer_version", 0, BT_WIRE_INT_MAX, &job->ctl->trainer_version);
    job->result = *m;
    *m = NULL;
}

static void s_on_bye(bt_controller_t *self, const bt_msg_t *m, bt_worker_info *w) {
    const char *error = NULL;
    bt_msg_get_str(m, "error", 4096, &error);
    bt_registry_remove(self->reg, w->id);
    bt_jsonl line;
    s_event_line(self, &line, "worker_left");
    bt_jsonl_str(&line, "worker", w->name);
    if (error) {
        char err[512];
        s_sanitise(error, err, sizeof err);
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
    bt_status st = bt_msg_recv(self->sock, &m, peer, &len, ZMQ_DONTWAIT);
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
    bool other_run = run[0] && strcmp(run, self->hub->run_id) != 0;
    if (!w && type != BT_MSG_HELLO) {
        self->stats.unknown_peer++;
        s_send_invalid(self, peer, len, "unknown peer: send HELLO first", false);
    } else if (other_run) { /* a worker of another run (an orphan of an earlier one) */
        char why[256];
        snprintf(why, sizeof why, "this worker belongs to run %.96s; this is run %s", run,
                 self->hub->run_id);
        self->stats.wrong_run++;
        s_send_invalid(self, peer, len, why, true);
        if (w)
            bt_registry_remove(self->reg, w->id);
    } else if (type == BT_MSG_HELLO) {
        s_on_hello(self, m, peer, len);
    } else {
        bt_registry_touch(self->reg, w->id, s_now_ms());
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

static bt_status s_poll_evals(bt_controller_t *self);
static bt_status s_eval_wait(bt_controller_t *self, const struct s_evaluation *ev);
static int s_first_generate(const bt_run_config *c);
static bt_status s_snapshot(bt_controller_t *self);
static bt_status s_resume(bt_controller_t *self);

/*  The run's fatal failure, if a worker reported one (see s_hub.fatal). */
static bt_status s_fatal(const bt_controller_t *self) {
    if (self->hub->fatal[0] && !self->hub->stopping)
        return bt_fail(self->hub->fatal_status, "%s", self->hub->fatal);
    return BT_OK;
}

/*  Hands out the queued tasks that have a worker free. */
static bt_status s_hand_out(bt_controller_t *self) {
    int64_t task;
    int32_t wid;
    while (bt_registry_next_assignment(self->reg, s_now_ms(), &task, &wid)) {
        s_job *job = bt_registry_task_user(self->reg, task);
        bt_controller_t *owner = job->ctl ? job->ctl : self; /* the job's variant */
        bt_worker_info *w = bt_registry_worker(self->reg, wid);
        if (job->role == BT_ROLE_TRAINER && !owner->store && self->hub->trainer < 0) {
            self->hub->trainer = wid; /* the first trainer job's taker holds the state */
            s_event(self, "trainer_active", "worker", w->name);
        }
        if (bt_registry_task_attempts(self->reg, task) >
            1) { /* its last holder failed or was lost */
            self->stats.requeued++;
            bt_jsonl line;
            s_event_line(self, &line, "task_requeued");
            bt_jsonl_str(&line, "kind", job->kind);
            bt_jsonl_int(&line, "task", task);
            bt_jsonl_str(&line, "worker", w->name);
            bt_runlog_event(self->log, &line);
        }
        bt_status st = job->ev ? s_pin_weights(owner, job->ev, w) : BT_OK;
        bt_msg_t *m = st == BT_OK ? bt_msg_new(BT_MSG_TASK) : NULL;
        if (st == BT_OK)
            st = m ? s_build_task(owner, job, task, m) : BT_ENOMEM;
        if (st == BT_OK)
            st = s_send(self, &m, w);
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
    const bt_run_config *c = self->cfg;
    for (int32_t i = 0; i < bt_registry_worker_count(self->reg); i++) {
        bt_worker_info *w = bt_registry_worker(self->reg, i);
        if (w->state != BT_WORKER_BUSY || w->task < 0 ||
            bt_registry_task_state(self->reg, w->task) != BT_TASK_ASSIGNED)
            continue;
        const s_job *job = bt_registry_task_user(self->reg, w->task);
        int64_t seen = self->hub->kind_ms[s_kind_index(job->kind)];
        int64_t limit = (int64_t)c->workers.deadline_factor *
                        (seen > c->workers.deadline_floor_ms ? seen : c->workers.deadline_floor_ms);
        int64_t held = now - bt_registry_task_assigned_ms(self->reg, w->task);
        if (held <= limit)
            continue;
        bt_log(BT_LOG_WARN,
               "controller: %s held a %s job for %lld ms (deadline %lld ms): quarantined, the "
               "job goes to another worker",
               w->name, job->kind, (long long)held, (long long)limit);
        bt_jsonl line;
        s_event_line(self, &line, "worker_quarantined");
        bt_jsonl_str(&line, "worker", w->name);
        bt_jsonl_str(&line, "kind", job->kind);
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
    s_hub *hub = self->hub;
    int64_t now = s_now_ms(), hb = self->cfg->workers.heartbeat_ms;
    if (hub->last_turn_ms && now - hub->last_turn_ms > self->cfg->workers.expiry_ms / 2) {
        bt_registry_touch_all(self->reg, now);
        bt_jsonl line;
        s_event_line(self, &line, "controller_stalled");
        bt_jsonl_int(&line, "ms", now - hub->last_turn_ms);
        bt_runlog_event(self->log, &line);
    }
    hub->last_turn_ms = now;
    if (now - hub->last_ping_ms >= hb) {
        hub->last_ping_ms = now;
        for (int32_t i = 0; i < bt_registry_worker_count(self->reg); i++) {
            const bt_worker_info *w = bt_registry_worker(self->reg, i);
            bt_msg_t *ping = w->state != BT_WORKER_LOST ? bt_msg_new(BT_MSG_PING) : NULL;
            if (ping)
                s_send(self, &ping, w);
        }
    }
    int lost = drained ? bt_registry_expire(self->reg, now) : 0;
    if (lost) {
        self->stats.lost_workers += lost;
        s_event(self, "workers_expired", NULL, NULL);
    }
    s_deadlines(self, now);
}

/*  Hands out what can be handed out, then waits (at most a heartbeat) for messages, expires
    silent workers and checks deadlines; fails at once after a fatal failure. */
static bt_status s_turn(bt_controller_t *self) {
    BT_TRY(s_fatal(self));
    BT_TRY(s_hand_out(self));
    zmq_pollitem_t item = {self->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, (long)self->cfg->workers.heartbeat_ms) < 0)
        return bt_fail(BT_EIO, "controller: poll failed: %s", zmq_strerror(zmq_errno()));
    bool drained = true;
    if (item.revents & ZMQ_POLLIN)
        BT_TRY(s_drain(self, &drained));
    s_timers(self, drained);
    BT_TRY(s_fatal(self));
    for (int k = 0; k < self->hub->n; k++)
        if (self->hub->v[k] != self)
            BT_TRY(s_poll_evals(self->hub->v[k]));
    return s_poll_evals(self);
}

/*  Queues jobs for the workers of their roles; *first is the first one's task id (ids are
    dense).  The jobs must stay where they are until done or cancelled.  A trainer job without a
    trainer group goes to the worker holding the training state alone (s_hub.trainer). */
static bt_status s_jobs_add(bt_controller_t *self, s_job *jobs, int n, int64_t *first) {
    *first = -1;
    for (int i = 0; i < n; i++) {
        jobs[i].ctl = self;
        jobs[i].status = BT_OK;
        int32_t holder = jobs[i].role == BT_ROLE_TRAINER ? self->hub->trainer : -1;
        int64_t id = holder >= 0
                         ? bt_registry_add_task_only(self->reg, jobs[i].role, holder, &jobs[i])
                         : bt_registry_add_task(self->reg, jobs[i].role, &jobs[i]);
        if (id < 0)
            return BT_ENOMEM;
        *first = *first < 0 ? id : *first;
    }
    return BT_OK;
}

static void s_jobs_cancel(bt_controller_t *self, int n, int64_t first) {
    for (int i = 0; i < n; i++)
        bt_registry_cancel(self->reg, first + i);
}

/*  While no worker of role is live: BT_OK as long as one may still come, else the error saying
    why none will (it could not start, the launcher knows its processes of that role are gone, or
    none came for S_JOIN_TIMEOUT_MS since `since`). */
static bt_status s_unstaffed(bt_controller_t *self, bt_role role, int64_t since) {
    char why[256] = "";
    const char *name = bt_role_name(role);
    if (self->start_error[0]) /* the last of a role could not start: none will */
        return bt_fail(BT_EINVAL, "%s", self->start_error);
    if (self->hub->gone && !self->hub->gone(role, why, sizeof why, self->hub->gone_user))
        return bt_fail(BT_EIO,
                       "controller: no %s worker is left (%s)%s; resume with `baton run CONFIG "
                       "--resume`",
                       name, why,
                       role == BT_ROLE_TRAINER ? " and no standby trainer "
                                                 "(workers.standby_trainers) to take over"
                                               : "");
    if (s_now_ms() - since > S_JOIN_TIMEOUT_MS)
        return bt_fail(BT_EIO,
                       "controller: no live %s worker for %d s; start one (`baton worker "
                       "--connect ENDPOINT --role %s`), or stop and resume later with --resume",
                       name, S_JOIN_TIMEOUT_MS / 1000, name);
    return BT_OK;
}

/*  Without a trainer group: the worker holding the training state was lost.  When another
    trainer is live it takes over (s_hub.trainer) and BT_ESTATE says the state must be restored;
    while none is, BT_OK (the job waits for the lost one to come back). */
static bt_status s_trainer_lost(bt_controller_t *self) {
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
            s_event_line(self, &line, "trainer_replaced");
            bt_jsonl_str(&line, "lost", from);
            bt_jsonl_str(&line, "by", w->name);
            bt_runlog_event(self->log, &line);
            return bt_fail(BT_ESTATE, "controller: trainer %s was lost; %s takes over", from,
                           w->name);
        }
    }
    return BT_OK;
}

/*  Serves workers until the n jobs queued from task id first are done.  On any way out but
    success the jobs that are not done are cancelled: nothing hands them out after their owner
    returned. */
static bt_status s_jobs_wait(bt_controller_t *self, s_job *jobs, int n, int64_t first) {
    int64_t stalled_since = s_now_ms();
    double t0 = bt_now();
    bt_status st = BT_OK;
    for (;;) {
        int done = 0;
        double longest = 0;
        for (int i = 0; i < n; i++) {
            done += bt_registry_task_state(self->reg, first + i) == BT_TASK_DONE;
            longest = jobs[i].compute_s > longest ? jobs[i].compute_s : longest;
        }
        if (done == n) {
            self->stats.compute_s += longest;
            self->stats.tasks_s += bt_now() - t0;
            return BT_OK;
        }
        for (int i = 0; i < n && st == BT_OK; i++) {
            if (jobs[i].status != BT_OK)
                st = bt_fail(jobs[i].status, "%s", self->hub->last_fail);
        }
        bool staffed = true;
        for (int i = 0; i < n && st == BT_OK; i++) {
            bool live = bt_registry_live(self->reg, jobs[i].role) > 0;
            staffed &= live;
            if (jobs[i].role == BT_ROLE_TRAINER)
                st = s_trainer_lost(self);
            if (st == BT_OK && !live)
                st = s_unstaffed(self, jobs[i].role, stalled_since);
        }
        if (staffed)
            stalled_since = s_now_ms();
        if (st == BT_OK)
            st = s_turn(self);
        if (st != BT_OK) {
            s_jobs_cancel(self, n, first);
            return st;
        }
    }
}

/*  Runs jobs to completion on the workers of their roles. */
static bt_status s_run_jobs(bt_controller_t *self, s_job *jobs, int n) {
    int64_t first;
    BT_TRY(s_jobs_add(self, jobs, n, &first));
    return s_jobs_wait(self, jobs, n, first);
}

/* ---- the data-parallel trainer group -----------------------------------------------------------
 */

static void s_jobs_release(s_job *jobs, int n);

/*  Runs jobs[k] on rank k of the group (bound to that worker) until all are done, or until a rank
    fails or is lost: then the others are cancelled, the group must be re-formed (world = 0) and
    *broken is set. */
static bt_status s_run_ranks(bt_controller_t *self, s_job *jobs, int n, bool *broken) {
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
            s_jobs_cancel(self, n, first);
            return bt_fail(failed, "%s", self->hub->last_fail);
        }
        if (*broken) {
            /* rank 0 done: the collectives had finished on every rank, so the update happened
               (running it again would train the batch twice); the group is re-formed next time */
            bool applied = bt_registry_task_state(self->reg, first) == BT_TASK_DONE;
            for (int k = applied ? 1 : 0; k < n; k++)
                bt_registry_cancel(self->reg, first + k);
            s_jobs_release(jobs + (applied ? 1 : 0), n - (applied ? 1 : 0));
            self->world = 0;
            char what[64];
            snprintf(what, sizeof what, "%s, generation %lld%s", jobs[0].kind,
                     (long long)self->generation, applied ? ", after its update" : "");
            s_event(self, "trainer_group_broken", "during", what);
            *broken = !applied;
            return BT_OK;
        }
        bt_status st = s_turn(self);
        if (st != BT_OK) {
            s_jobs_cancel(self, n, first);
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
    int64_t settle = s_now_ms() + c->workers.collective_timeout_ms + c->workers.expiry_ms + 5000;
    for (bool busy = true; busy;) {
        busy = false;
        for (int k = 0; k < self->world_last; k++)
            busy |= bt_registry_worker(self->reg, self->ranks[k])->state == BT_WORKER_BUSY;
        if (busy && s_now_ms() > settle)
            return bt_fail(BT_EIO,
                           "controller: trainer ranks still busy %lld ms after their "
                           "group broke",
                           (long long)(c->workers.collective_timeout_ms + c->workers.expiry_ms));
        if (busy)
            BT_TRY(s_turn(self));
    }
    int64_t deadline = s_now_ms() + S_JOIN_TIMEOUT_MS;
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
            bt_status st = s_unstaffed(self, BT_ROLE_TRAINER, deadline - S_JOIN_TIMEOUT_MS);
            if (st != BT_OK)
                return st;
            BT_TRY(s_turn(self));
            attempt--;
            continue;
        }
        memcpy(self->ranks, order, sizeof order[0] * (size_t)n);
        self->world = self->world_last = n;
        self->generation++;
        s_job jobs[S_MAX_RANKS];
        for (int k = 0; k < n; k++)
            jobs[k] = (s_job){.kind = "group", .role = BT_ROLE_TRAINER, .rank = k};
        bool broken;
        int64_t expected = self->trainer_version;
        BT_TRY(s_run_ranks(self, jobs, n, &broken));
        if (broken || self->world == 0) { /* a formation is whole or not at all */
            s_jobs_release(jobs, n);
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
        s_jobs_release(jobs, n);
        BT_TRY(st);
        bt_jsonl line;
        s_event_line(self, &line, "trainer_group_formed");
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
static bt_status s_run_trainer(bt_controller_t *self, s_job *job) {
    bool applies = strcmp(job->kind, "restore") != 0 && strcmp(job->kind, "group") != 0;
    job->expect_version = applies ? self->trainer_version : -1;
    if (!self->store)
        return s_run_jobs(self, job, 1);
    for (int attempt = 0;; attempt++) {
        if (attempt > S_MAX_ATTEMPTS)
            return bt_fail(BT_EIO, "controller: a %s job failed on the trainer group %d times",
                           job->kind, attempt);
        if (self->world == 0)
            BT_TRY(s_group_form(self));
        int n = strcmp(job->kind, "snapshot") ? self->world : 1;
        s_job jobs[S_MAX_RANKS];
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
        s_jobs_release(jobs, n);
        return st;
    }
}

static bt_status s_await_workers(bt_controller_t *self) {
    const bt_run_config *c = self->cfg;
    int64_t want[BT_ROLE_COUNT] = {c->workers.rollout, c->workers.trainer, c->workers.eval};
    int64_t deadline = s_now_ms() + S_JOIN_TIMEOUT_MS;
    for (;;) {
        bool all = true;
        for (int r = 0; r < BT_ROLE_COUNT; r++)
            all &= bt_registry_live(self->reg, (bt_role)r) >= want[r];
        if (all)
            return BT_OK;
        if (self->start_error[0]) /* the same config would fail the same way on any worker */
            return bt_fail(BT_EINVAL, "%s", self->start_error);
        if (s_now_ms() > deadline)
            return bt_fail(BT_EIO, "controller: workers did not join within %d s",
                           S_JOIN_TIMEOUT_MS / 1000);
        BT_TRY(s_turn(self));
    }
}

/* ---- the schedule ---------------------------------------------------------------------------- */

static void s_jobs_release(s_job *jobs, int n) {
    for (int i = 0; i < n; i++)
        bt_msg_destroy(&jobs[i].result);
}

/* ---- evaluation ------------------------------------------------------------------------------ */

/*  Epochs completed so far of the epoch source's stream (data.epoch_source). */
static int64_t s_epoch(const bt_controller_t *self) {
    int k = bt_config_epoch_source(self->cfg);
    return self->epoch_size ? (int64_t)(s_train_position(self).drawn[k] / self->epoch_size) : 0;
}

/*  What each dataset evaluates, and the training stream's epoch, from the task and the sources. */
static bt_status s_eval_setup(bt_controller_t *self) {
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
    S_MAX_EVALS are in flight); s_poll_evals writes the result. */
static bt_status s_eval_start(bt_controller_t *self, int ds, const char *phase, const char *trigger,
                              int64_t step, s_evaluation **out) {
    const bt_eval_dataset *d = &self->cfg->eval.datasets[ds];
    while (s_evals_active(self) == S_MAX_EVALS) /* all slots taken: wait for one */
        BT_TRY(s_eval_wait(self, &self->evals[0]));
    s_evaluation *ev = NULL;
    for (int i = 0; i < S_MAX_EVALS && !ev; i++)
        ev = self->evals[i].active ? NULL : &self->evals[i];
    *ev = (s_evaluation){.active = true,
                         .ds = ds,
                         .phase = phase,
                         .step = step,
                         .weights = s_weights_ref(self->weights),
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
        s_job *j = &ev->jobs[ev->n_jobs++];
        *j = (s_job){.kind = "eval",
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

static void s_trigger_event(bt_controller_t *self, const char *dataset, const bt_trigger_event *e) {
    char name[32];
    snprintf(name, sizeof name, "eval_%s", e->kind);
    bt_jsonl line;
    s_event_line(self, &line, name);
    bt_jsonl_str(&line, "dataset", dataset);
    bt_jsonl_int(&line, "step", e->step);
    bt_jsonl_int(&line, "old", e->old_interval);
    bt_jsonl_int(&line, "new", e->new_interval);
    bt_jsonl_num(&line, "value", e->value);
    bt_jsonl_num(&line, "rate", e->rate);
    bt_jsonl_str(&line, "reason", e->reason);
    bt_runlog_event(self->log, &line);
}

/*  A held-out loss of scaling.dataset at step: it settles the predictions made for this step
    (a `scaling_error` event each), then joins the points the law is fitted to, and with enough of
    them the loss at the last GRPO step is predicted under the planned schedule (the configured
    one, scaled by the tuner's current learning-rate factor): a `scaling_prediction` event. */
static bt_status s_scaling_observe(bt_controller_t *self, int64_t step, double loss) {
    const bt_run_config *c = self->cfg;
    int64_t last = c->grpo.steps;
    if (bt_scaling_record_measure(&self->sc_record, step, loss) > 0)
        for (int i = 0; i < self->sc_record.n; i++) {
            const bt_scaling_prediction *p = &self->sc_record.entries[i];
            if (p->target != step || !p->measured)
                continue;
            bt_jsonl line;
            s_event_line(self, &line, "scaling_error");
            bt_jsonl_str(&line, "variant", self->variant_name);
            bt_jsonl_int(&line, "made_at", p->made_at);
            bt_jsonl_int(&line, "step", p->target);
            bt_jsonl_num(&line, "predicted", p->predicted);
            bt_jsonl_num(&line, "measured", p->loss);
            bt_jsonl_num(&line, "error", p->error);
            BT_TRY(bt_runlog_event(self->log, &line));
        }
    if (step < 1 || step >= last || self->sc_n >= S_MAX_POINTS || !(loss > 0))
        return BT_OK;
    self->sc_steps[self->sc_n] = step;
    self->sc_loss[self->sc_n++] = loss;
    if (self->sc_n < c->scaling.min_points)
        return BT_OK;
    bt_lr_schedule sched;
    bt_config_lr(c, BT_CONFIG_PHASE_GRPO, &sched);
    double *lr = malloc(sizeof *lr * (size_t)last * 3);
    if (!lr)
        return bt_fail(BT_ENOMEM, "controller: out of memory");
    double *s1 = lr + last, *s2 = s1 + last, scale = bt_tuner_lr_scale(&self->tuner);
    for (int64_t s = 0; s < last; s++)
        lr[s] = bt_lr_at(&sched, s) * scale;
    bt_scaling_areas(lr, last, sched.warmup_steps < last ? sched.warmup_steps : last, s1, s2);
    bt_scaling_fit_config fc;
    bt_scaling_fit_config_init(&fc);
    bt_scaling_fit fit;
    bt_status st =
        bt_scaling_fit_curve(s1, s2, last, self->sc_steps, self->sc_loss, self->sc_n, &fc, &fit);
    double predicted = st == BT_OK ? bt_scaling_predict(&fit.p, s1, s2, last) : NAN;
    free(lr);
    if (st != BT_OK) { /* a curve the law cannot take is no reason to stop the run */
        s_event(self, "scaling_failed", "error", bt_last_error());
        return BT_OK;
    }
    if (isfinite(predicted) && self->sc_record.n < BT_SCALING_RECORD_MAX)
        BT_TRY(bt_scaling_record_add(&self->sc_record, step, last, predicted));
    bt_jsonl line;
    s_event_line(self, &line, "scaling_prediction");
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_int(&line, "step", step);
    bt_jsonl_int(&line, "target", last);
    bt_jsonl_num(&line, "predicted", predicted);
    bt_jsonl_int(&line, "points", self->sc_n);
    bt_jsonl_num(&line, "L0", fit.p.L0);
    bt_jsonl_num(&line, "A", fit.p.A);
    bt_jsonl_num(&line, "alpha", fit.p.alpha);
    bt_jsonl_num(&line, "C", fit.p.C);
    bt_jsonl_num(&line, "rms", fit.rms);
    bt_jsonl_bool(&line, "converged", fit.converged);
    bt_jsonl_bool(&line, "c_identified", fit.c_identified);
    return bt_runlog_event(self->log, &line);
}

/*  Aggregates a finished evaluation in float64, writes its line, feeds its trigger. */
static bt_status s_eval_finish(bt_controller_t *self, s_evaluation *ev) {
    const bt_run_config *c = self->cfg;
    const bt_eval_dataset *d = &c->eval.datasets[ev->ds];
    bt_evaluator_sums sum, part;
    bt_evaluator_sums_init(&sum, d->samples);
    bt_status st = BT_OK;
    for (int i = 0; i < ev->n_jobs && st == BT_OK; i++) {
        s_job *j = &ev->jobs[i];
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
    s_weights_release(&ev->weights);
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
    if (d->kind == BT_EVAL_GENERATE && ev->ds == s_first_generate(c))
        self->last_accuracy = primary;
    for (int i = 0; c->scaling.enabled && !strcmp(ev->phase, "rl") &&
                    !strcmp(c->scaling.dataset, d->name) && i < n_metrics;
         i++)
        if (!strcmp(metrics[i].name, "nll_per_token"))
            BT_TRY(s_scaling_observe(self, ev->step, metrics[i].value));
    const bt_tuner_plateau_config *pc = &self->tuner.cfg.lr_plateau;
    for (int i = 0;
         pc->enabled && !strcmp(ev->phase, "rl") && !strcmp(pc->dataset, d->name) && i < n_metrics;
         i++)
        if (!strcmp(metrics[i].name, pc->metric)) {
            bt_tuner_decision dec[BT_TUNER_MAX_DECISIONS];
            int n = bt_tuner_after_eval(&self->tuner, ev->step, metrics[i].value, dec,
                                        BT_TUNER_MAX_DECISIONS);
            BT_TRY(s_tuner_events(self, dec, n));
        }
    if (strcmp(ev->phase, "rl") == 0) {
        bt_trigger_event events[4];
        int n = bt_trigger_observe(&self->triggers[ev->ds], ev->step, primary, events, 4);
        for (int i = 0; i < n; i++)
            s_trigger_event(self, d->name, &events[i]);
    }
    return BT_OK;
}

/*  Finishes the evaluations whose shards are all done; fails when a shard failed too often. */
static bt_status s_poll_evals(bt_controller_t *self) {
    for (int i = 0; i < S_MAX_EVALS; i++) {
        s_evaluation *ev = &self->evals[i];
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
static bt_status s_eval_wait(bt_controller_t *self, const s_evaluation *ev) {
    int64_t stalled_since = s_now_ms();
    self->wait_since = bt_now();
    memset(self->wait_busy, 0, sizeof self->wait_busy);
    bt_status st = BT_OK;
    while (st == BT_OK && (ev ? ev->active : s_evals_active(self) > 0)) {
        if (bt_registry_live(self->reg, BT_ROLE_EVAL) > 0)
            stalled_since = s_now_ms();
        else
            st = s_unstaffed(self, BT_ROLE_EVAL, stalled_since);
        if (st == BT_OK)
            st = s_turn(self);
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
static bt_status s_eval_after_step(bt_controller_t *self, bool last) {
    const bt_run_config *c = self->cfg;
    if (c->workers.eval == 0)
        return BT_OK;
    double secs = bt_train_clock_seconds(&self->clock, bt_now());
    bool busy = bt_registry_queued(self->reg, BT_ROLE_EVAL) > 0;
    for (int i = 0; i < c->eval.n_datasets; i++) {
        bt_trigger_event e;
        int n_ev = 0;
        int why =
            bt_trigger_check(&self->triggers[i], self->step, s_epoch(self), secs, busy, &e, &n_ev);
        if (n_ev)
            s_trigger_event(self, c->eval.datasets[i].name, &e);
        if (!why && !last)
            continue;
        char trigger[32] = "";
        const char *names[] = {"steps", "epochs", "seconds"};
        for (int b = 0; b < 3; b++)
            if (why & (1 << b))
                snprintf(trigger + strlen(trigger), sizeof trigger - strlen(trigger), "%s%s",
                         trigger[0] ? "+" : "", names[b]);
        BT_TRY(s_eval_start(self, i, "rl", why ? trigger : "final", self->step, NULL));
    }
    return BT_OK;
}

/*  The first generate dataset: the one SFT's early stop and the progress display read. */
static int s_first_generate(const bt_run_config *c) {
    for (int i = 0; i < c->eval.n_datasets; i++)
        if (c->eval.datasets[i].kind == BT_EVAL_GENERATE)
            return i;
    return -1;
}

static bt_status s_sft(bt_controller_t *self) {
    const bt_run_config *c = self->cfg;
    bt_lr_schedule sched;
    bt_config_lr(c, BT_CONFIG_PHASE_SFT, &sched);
    for (int64_t s = 0; s < c->sft.steps; s++) {
        bool last = s + 1 == c->sft.steps;
        bool eval = last || (c->sft.eval_every > 0 && (s + 1) % c->sft.eval_every == 0);
        double lr = bt_lr_at(&sched, s);
        /* demonstrations: the next examples of the first source's stream */
        bt_mixture_position pos = bt_mixture_get_position(self->mix);
        s_job job = {.kind = "sft",
                     .role = BT_ROLE_TRAINER,
                     .start = (int64_t)pos.drawn[0],
                     .count = c->sft.batch_size,
                     .lr = lr,
                     .publish = eval};
        pos.drawn[0] += (uint64_t)c->sft.batch_size;
        bt_mixture_set_position(self->mix, &pos);
        bt_status st = s_run_trainer(self, &job);
        double loss = NAN;
        if (st == BT_OK)
            st = bt_msg_get_double(job.result, "stats.loss", -1e300, 1e300, &loss);
        s_jobs_release(&job, 1);
        BT_TRY(st);
        bt_jsonl line;
        bt_jsonl_init(&line);
        bt_jsonl_str(&line, "kind", "sft");
        bt_jsonl_int(&line, "step", s + 1);
        bt_jsonl_str(&line, "variant", self->variant_name);
        bt_jsonl_num(&line, "time", bt_now() - self->t0);
        bt_jsonl_num(&line, "loss", loss);
        bt_jsonl_num(&line, "lr", lr);
        BT_TRY(bt_runlog_metric(self->log, &line));
        int ds = s_first_generate(c);
        if (eval && !last && ds >= 0 && c->workers.eval > 0) { /* blocking: it decides the stop */
            s_evaluation *ev = NULL;
            BT_TRY(s_eval_start(self, ds, "sft", "sft", s + 1, &ev));
            BT_TRY(s_eval_wait(self, ev));
            if (self->last_accuracy >= c->sft.stop_accuracy)
                break;
        }
        s_report(self, "sft", s + 1, c->sft.steps, NAN);
    }
    return BT_OK;
}

/*  The SFT warm start, the step-0 evaluations and the first snapshot (the first point a rollback
    or a restore returns to).  A trainer that loses its state before that snapshot exists is
    reset to the state every trainer starts from, and the warm start runs again from its first
    step (metrics.jsonl cut back), so the run writes what it would have written. */
static bt_status s_warm_start(bt_controller_t *self) {
    const bt_run_config *c = self->cfg;
    bt_mixture_position pos0 = bt_mixture_get_position(self->mix);
    int64_t metrics0 = bt_runlog_metrics_size(self->log);
    for (;;) {
        bt_status st = s_sft(self);
        for (int i = 0; i < c->eval.n_datasets && c->workers.eval > 0 && st == BT_OK; i++) {
            bt_trigger_mark(&self->triggers[i], 0, s_epoch(self), 0);
            st = s_eval_start(self, i, "rl", "start", 0, NULL);
        }
        if (st == BT_OK)
            st = s_snapshot(self);
        if (st != BT_ESTATE)
            return st;
        char reason[512];
        snprintf(reason, sizeof reason, "%s", bt_last_error());
        if (++self->recoveries > S_MAX_RECOVERIES)
            return bt_fail(BT_ESTATE, "%s, after %d restores of the trainer in this run", reason,
                           S_MAX_RECOVERIES);
        s_evals_cancel(self);
        BT_TRY(s_restore_trainer(self, NULL, 0, NAN));
        bt_mixture_set_position(self->mix, &pos0);
        BT_TRY(bt_runlog_truncate_metrics(self->log, metrics0));
        self->last_accuracy = NAN;
        self->stats.restores++;
        bt_jsonl line;
        s_event_line(self, &line, "trainer_restored");
        bt_jsonl_str(&line, "from", "initial");
        bt_jsonl_int(&line, "step", 0);
        bt_jsonl_str(&line, "reason", reason);
        BT_TRY(bt_runlog_event(self->log, &line));
        bt_log(BT_LOG_WARN, "controller: %s: the warm start runs again from its first step",
               reason);
    }
}

bt_status bt_controller_start(bt_controller_t *self) {
    s_report(self, "join", 0, 0, NAN);
    BT_TRY(s_await_workers(self));
    s_event(self, "workers_ready", NULL, NULL);
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
        BT_TRY(s_resume(self));
        s_report(self, "rl", self->step, c->grpo.steps, NAN);
        return BT_OK;
    }
    bt_train_clock_start(&self->clock, bt_now());
    BT_TRY(s_warm_start(self));
    s_report(self, "rl", 0, c->grpo.steps, NAN);
    return BT_OK;
}

/*  Queues the rollouts of step `step` (its prompts are the next P of the training stream),
    sharded over the configured rollout workers; they run while the controller does other work. */
/*  A rollout job's seed: (run.seed, step) above the low BT_TASK_SEED_JOB_BITS, which number the
    job; computed unsigned and kept within a wire integer's 53 bits (a large run.seed overflowed).
 */
static int64_t s_rollout_seed(const bt_run_config *c, int64_t step, int job) {
    uint64_t x = ((uint64_t)c->run.seed * 1000003u + (uint64_t)step) * 64u + (uint64_t)job;
    return (int64_t)(x & ((UINT64_C(1) << 53) - 1));
}

static bt_status s_rollout_launch(bt_controller_t *self, int64_t step) {
    const bt_run_config *c = self->cfg;
    s_rollouts *r = &self->ahead[step % S_AHEAD];
    BT_ASSERT(!r->active);
    int64_t P = c->grpo.prompts_per_step;
    int shards = (int)(c->workers.rollout < 1 ? 1 : c->workers.rollout);
    if (shards > P)
        shards = (int)P;
    if (shards > 64)
        shards = 64;
    r->idx = malloc(sizeof *r->idx * (size_t)P);
    uint64_t dropped[S_MAX_DROPPED_LOGGED];
    int64_t n_dropped = 0;
    if (!r->idx)
        return bt_fail(BT_ENOMEM, "controller: out of memory");
    r->step = step;
    r->before = bt_mixture_get_position(self->mix);
    memcpy(r->weights, self->tuner.weights, sizeof r->weights);
    bt_status st = BT_OK;
    for (int64_t i = 0; i < P && st == BT_OK; i++)
        st = bt_mixture_next(self->mix, self->sources, self->tuner.weights, 1000 * P, &r->idx[i],
                             dropped, S_MAX_DROPPED_LOGGED, &n_dropped);
    if (st != BT_OK) {
        free(r->idx);
        r->idx = NULL;
        return st;
    }
    r->dropped = n_dropped;
    if (n_dropped && c->debug.log_prompts) {
        bt_jsonl line;
        s_event_line(self, &line, "dropped");
        bt_jsonl_int(&line, "step", step + 1);
        bt_jsonl_uints(
            &line, "prompts", dropped,
            (size_t)(n_dropped < S_MAX_DROPPED_LOGGED ? n_dropped : S_MAX_DROPPED_LOGGED));
        BT_TRY(bt_runlog_event(self->log, &line));
    }
    /* a job holds one source's prompts: group them by source (stable), then shard each group */
    for (int64_t i = 1; i < P; i++)
        for (int64_t j = i; j > 0 && BT_PROMPT_SOURCE(r->idx[j]) < BT_PROMPT_SOURCE(r->idx[j - 1]);
             j--) {
            uint64_t t = r->idx[j];
            r->idx[j] = r->idx[j - 1];
            r->idx[j - 1] = t;
        }
    int64_t per = (P + shards - 1) / shards;
    r->n_jobs = 0;
    for (int64_t s = 0; s < P; r->n_jobs++) {
        int64_t e = s;
        while (e < P && e - s < per && BT_PROMPT_SOURCE(r->idx[e]) == BT_PROMPT_SOURCE(r->idx[s]))
            e++;
        BT_ASSERT(r->n_jobs < 64);
        r->jobs[r->n_jobs] = (s_job){.kind = "rollout",
                                     .role = BT_ROLE_ROLLOUT,
                                     .start = s,
                                     .count = e - s,
                                     .prompts = r->idx + s,
                                     .seed = s_rollout_seed(c, step, r->n_jobs)};
        s = e;
    }
    r->active = true;
    return s_jobs_add(self, r->jobs, r->n_jobs, &r->first_task);
}

static void s_rollouts_release(s_rollouts *r) {
    s_jobs_release(r->jobs, r->n_jobs);
    free(r->idx);
    r->idx = NULL;
    r->active = false;
}

/*  Drops every rollout in flight (a rollback): their tasks are cancelled, their prompts skipped. */
static void s_rollouts_cancel(bt_controller_t *self) {
    for (int i = 0; i < S_AHEAD; i++) {
        s_rollouts *r = &self->ahead[i];
        for (int j = 0; r->active && j < r->n_jobs; j++)
            bt_registry_cancel(self->reg, r->first_task + j);
        if (r->active)
            s_rollouts_release(r);
    }
    self->launched = self->step;
}

/*  The data position of the first prompt not yet trained: the oldest rollouts in flight hold the
    prompts after it. */
static bt_mixture_position s_train_position(const bt_controller_t *self) {
    const s_rollouts *r = &self->ahead[self->step % S_AHEAD];
    return r->active && r->step == self->step ? r->before : bt_mixture_get_position(self->mix);
}

/*  The current step's groups: launches the rollouts of the steps up to grpo.max_staleness ahead
    that are not in flight yet, then waits for the current step's; fills *batch.  *oldest gets
    the oldest policy version that sampled any of it. */
static bt_status s_rollout(bt_controller_t *self, bt_rollout_batch *batch, int64_t *oldest) {
    const bt_run_config *c = self->cfg;
    if (self->launched < self->step)
        self->launched = self->step;
    while (self->launched <= self->step + c->grpo.max_staleness && self->launched < c->grpo.steps)
        BT_TRY(s_rollout_launch(self, self->launched++));
    s_rollouts *r = &self->ahead[self->step % S_AHEAD];
    BT_ASSERT(r->active && r->step == self->step);
    bt_status st = s_jobs_wait(self, r->jobs, r->n_jobs, r->first_task);
    bt_rollout_batch parts[64];
    *oldest = INT64_MAX;
    for (int i = 0; i < r->n_jobs; i++)
        bt_rollout_batch_init(&parts[i]);
    for (int i = 0; i < r->n_jobs && st == BT_OK; i++) {
        st = bt_batch_from_msg(r->jobs[i].result, &parts[i]);
        *oldest = parts[i].version < *oldest ? parts[i].version : *oldest;
    }
    if (st == BT_OK)
        st = bt_batch_concat(parts, r->n_jobs, batch);
    for (int i = 0; i < r->n_jobs; i++)
        bt_rollout_batch_release(&parts[i]);
    self->dropped_step = r->dropped; /* with grpo.max_staleness, later steps were drawn since */
    memcpy(self->step_weights, r->weights, sizeof self->step_weights);
    s_rollouts_release(r);
    return st;
}

/*  With grpo.dynamic_sampling, the groups whose rewards all agree (zero advantage, no gradient)
    are dropped (DAPO, Yu et al. 2025); *out is what trains.  Returns the groups kept. */
static int64_t s_select(const bt_run_config *c, const bt_rollout_batch *in, bt_rollout_batch *out,
                        bt_status *st) {
    bool *keep = malloc(sizeof *keep * (size_t)(in->n_prompts + 1));
    if (!keep) {
        *st = bt_fail(BT_ENOMEM, "controller: out of memory");
        return 0;
    }
    int64_t kept = 0;
    for (int64_t g = 0; g < in->n_prompts; g++) {
        keep[g] =
            !c->grpo.dynamic_sampling ||
            !bt_grpo_group_has_zero_variance(in->rewards + g * in->group_size, in->group_size);
        kept += keep[g];
    }
    *st = bt_batch_keep_groups(in, keep, out);
    free(keep);
    return kept;
}

/*  *updated: false when dynamic sampling left nothing to train on (no update was made). */
static bt_status s_train(bt_controller_t *self, const bt_rollout_batch *sampled, double lr,
                         bt_trainer_stats *out, bool *updated) {
    const bt_run_config *c = self->cfg;
    bt_rollout_batch batch;
    bt_rollout_batch_init(&batch);
    bt_status st = BT_OK;
    if (s_select(c, sampled, &batch, &st) == 0 || st != BT_OK) {
        bt_rollout_batch_release(&batch);
        *out = (bt_trainer_stats){.loss = NAN,
                                  .kl = NAN,
                                  .clip_frac = NAN,
                                  .entropy = NAN,
                                  .grad_norm = NAN}; /* nothing to learn from: no update */
        *updated = false;
        return st;
    }
    *updated = true;
    double *adv = malloc(sizeof *adv * (size_t)(batch.n + 1));
    if (!adv) {
        bt_rollout_batch_release(&batch);
        return bt_fail(BT_ENOMEM, "controller: out of memory");
    }
    bt_grpo_config gc;
    bt_config_grpo(c, &gc);
    /* advantages in float64 at the controller (DESIGN.md, step 3) */
    st = bt_grpo_advantages(batch.rewards, batch.n_prompts, batch.group_size, gc.adv_norm, adv);
    /* debug.inject_nan_at_step: once, even when a rollback replays that step */
    bool inject = c->debug.inject_nan_at_step == self->step + 1 && !self->nan_injected;
    self->nan_injected |= inject;
    s_job job = {.kind = "train",
                 .role = BT_ROLE_TRAINER,
                 .lr = lr,
                 .publish = true,
                 .batch = &batch,
                 .adv = adv,
                 .inject_nan = inject};
    if (st == BT_OK)
        st = s_run_trainer(self, &job);
    if (st == BT_OK)
        st = bt_trainer_stats_from_msg(job.result, out);
    double real = 0; /* tokens of the trained rows: what the trainer's slots hold besides padding */
    for (int64_t i = 0; i < batch.n; i++)
        real += (double)(batch.prompt_lens[i] + batch.lengths[i]);
    self->padding = st == BT_OK && out->slots > 0 ? 1.0 - real / out->slots : NAN;
    if (st == BT_OK && c->debug.log_prompts) {
        bt_jsonl line;
        bt_jsonl_init(&line);
        bt_jsonl_str(&line, "event", "trained");
        bt_jsonl_int(&line, "step", self->step + 1);
        bt_jsonl_uints(&line, "prompts", batch.indices, (size_t)batch.n_prompts);
        uint64_t *right = calloc((size_t)batch.n_prompts + 1, sizeof *right);
        for (int64_t g = 0; right && g < batch.n_prompts; g++) /* correct samples per group */
            for (int64_t j = 0; j < batch.group_size; j++)
                right[g] += batch.correct[g * batch.group_size + j];
        if (right)
            bt_jsonl_uints(&line, "correct", right, (size_t)batch.n_prompts);
        free(right);
        st = bt_runlog_event(self->log, &line);
    }
    s_jobs_release(&job, 1);
    bt_rollout_batch_release(&batch);
    free(adv);
    return st;
}

/* ---- snapshots, checkpoints, rollback, resume -------------------------------------------------
 */

static double s_train_seconds(const bt_controller_t *self) {
    return bt_train_clock_seconds(&self->clock, bt_now());
}

/*  The controller's state now, for a snapshot.  Evaluations pinned to older versions must have
    finished (their lines are then before metrics_size); those of the current version are listed
    to be run again by a resume. */
static void s_state_capture(bt_controller_t *self, double canary, bt_run_state *out) {
    *out = (bt_run_state){.step = self->step,
                          .version = self->version,
                          .cursor = s_train_position(self).draws,
                          .train_seconds = s_train_seconds(self),
                          .last_reward = self->last_reward,
                          .last_accuracy = self->last_accuracy,
                          .metrics_size = bt_runlog_metrics_size(self->log),
                          .canary_loss = canary,
                          .nan_injected = self->nan_injected,
                          .loss_ema = self->loss_ema,
                          .loss_n = self->loss_n,
                          .tokens = self->tokens,
                          .n_triggers = self->cfg->eval.n_datasets};
    memcpy(out->triggers, self->triggers, sizeof out->triggers);
    out->has_tuner = true;
    out->tuner = self->tuner;
    for (int i = 0; i < S_MAX_EVALS && out->n_pending < BT_RUNSTATE_MAX_PENDING; i++) {
        const s_evaluation *ev = &self->evals[i];
        if (!ev->active || strcmp(ev->phase, "rl") != 0)
            continue;
        bt_runstate_eval *p = &out->pending[out->n_pending++];
        *p = (bt_runstate_eval){.dataset = ev->ds, .step = ev->step};
        snprintf(p->trigger, sizeof p->trigger, "%s", ev->trigger);
    }
}

/*  Puts the controller back to a captured state; the cursor only with restore_cursor (a rollback
    keeps it, so the batches since the snapshot, the offending one included, are skipped). */
static void s_state_apply(bt_controller_t *self, const bt_run_state *st, bool restore_cursor) {
    self->step = st->step;
    if (restore_cursor) { /* a state.json without data.json (one source): its cursor */
        bt_mixture_position pos = {.draws = st->cursor};
        pos.drawn[0] = st->cursor;
        bt_mixture_set_position(self->mix, &pos);
    }
    self->last_reward = st->last_reward;
    self->last_accuracy = st->last_accuracy;
    self->nan_injected |= st->nan_injected;
    self->loss_ema = st->loss_ema;
    self->loss_n = st->loss_n;
    self->tokens = st->tokens;
    for (int i = 0; i < st->n_triggers && i < self->cfg->eval.n_datasets; i++) {
        bt_trigger_config cfg = self->triggers[i].cfg; /* the config's, not the file's */
        self->triggers[i] = st->triggers[i];
        self->triggers[i].cfg = cfg;
    }
    if (st->has_tuner) { /* the tuner's values and counters; its rules are the config's */
        bt_tuner_config cfg = self->tuner.cfg;
        self->tuner = st->tuner;
        self->tuner.cfg = cfg;
        double total = 0;
        for (int k = 0; k < cfg.n_sources; k++)
            total += self->tuner.weights[k];
        for (int k = 0; k < cfg.n_sources && !(total > 0); k++) /* saved before the mixture */
            self->tuner.weights[k] = cfg.start_weights[k];
    }
}

/*  Serves the workers until the checkpoint writer has no save in flight (a save of a large model
    can take longer than the workers wait for a word from the controller). */
static bt_status s_writer_wait(bt_controller_t *self) {
    while (bt_ckpt_writer_is_busy(self->writer))
        BT_TRY(s_turn(self));
    return BT_OK;
}

/*  Asks the trainer for its whole state (weights, AdamW moments, canary loss) and keeps it, with
    the controller's state, as the point a rollback returns to and a checkpoint writes. */
static bt_status s_snapshot(bt_controller_t *self) {
    for (int i = 0; i < S_MAX_EVALS; i++)
        if (self->evals[i].active && self->evals[i].version < self->version)
            BT_TRY(s_eval_wait(self, &self->evals[i]));
    s_job job = {.kind = "snapshot", .role = BT_ROLE_TRAINER};
    bt_status st = s_run_trainer(self, &job);
    double canary = NAN;
    if (st == BT_OK)
        st = bt_msg_get_double(job.result, "canary_loss", 0, 1e300, &canary);
    if (st != BT_OK) {
        s_jobs_release(&job, 1);
        return st;
    }
    if (self->writer) /* a save in flight may still read the old snapshot's tensors */
        BT_TRY(s_writer_wait(self));
    bt_msg_destroy(&self->snap);
    self->snap = job.result;
    job.result = NULL;
    s_state_capture(self, canary, &self->saved);
    bt_mixture_position pos = s_train_position(self);
    free(self->saved_data);
    self->saved_data = bt_mixture_to_json(self->mix, &pos);
    self->rollbacks = 0;
    return self->saved_data ? BT_OK : bt_fail(BT_ENOMEM, "controller: out of memory");
}

/*  Loads a trainer state (the in-memory snapshot, or one read from a checkpoint) as version, and
    checks the canary loss the trainer computes against the one recorded with it. */
static bt_status s_restore_trainer(bt_controller_t *self, const bt_msg_t *state, int64_t version,
                                   double canary) {
    s_job job = {.kind = "restore",
                 .role = BT_ROLE_TRAINER,
                 .publish = true,
                 .state = state,
                 .restore_version = version};
    bt_status st = s_run_trainer(self, &job);
    double got = NAN;
    if (st == BT_OK)
        st = bt_msg_get_double(job.result, "canary_loss", 0, 1e300, &got);
    s_jobs_release(&job, 1);
    BT_TRY(st);
    if (state && !(fabs(got - canary) <= 1e-9 * fmax(1.0, fabs(canary))))
        return bt_fail(BT_EINVAL,
                       "controller: the restored trainer's canary loss is %.17g, the checkpoint "
                       "recorded %.17g",
                       got, canary);
    return BT_OK;
}

/*  A diverged step: back to the last snapshot (at most S_ROLLBACK_EVERY steps ago), skipping the
    batches since, the offending one included. */
static bt_status s_rollback(bt_controller_t *self, const char *reason) {
    if (!self->snap)
        return bt_fail(BT_EIO, "controller: %s, and there is no snapshot to roll back to", reason);
    if (++self->rollbacks > S_MAX_ROLLBACKS)
        return bt_fail(BT_EIO, "controller: %s, after %d rollbacks to step %lld", reason,
                       S_MAX_ROLLBACKS, (long long)self->saved.step);
    int64_t from = self->step + 1;
    /* a fresh version number: evaluations may still hold the discarded ones */
    BT_TRY(s_restore_trainer(self, self->snap, self->version + 1, self->saved.canary_loss));
    uint64_t skipped_from = self->saved.cursor,
             skipped_to = bt_mixture_get_position(self->mix).draws;
    s_state_apply(self, &self->saved, false);
    s_rollouts_cancel(self); /* sampled by discarded versions: skipped too */
    bt_jsonl line;
    s_event_line(self, &line, "rollback");
    bt_jsonl_int(&line, "from_step", from);
    bt_jsonl_int(&line, "to_step", self->step);
    bt_jsonl_str(&line, "reason", reason);
    bt_jsonl_int(&line, "skipped_from", (int64_t)skipped_from);
    bt_jsonl_int(&line, "skipped_to", (int64_t)skipped_to);
    return bt_runlog_event(self->log, &line);
}

/*  Drops every evaluation in flight: their tasks are cancelled, their pinned weights released,
    and every eval worker is sent weights again before its next shard. */
static void s_evals_cancel(bt_controller_t *self) {
    for (int i = 0; i < S_MAX_EVALS; i++) {
        s_evaluation *ev = &self->evals[i];
        if (!ev->active)
            continue;
        s_jobs_cancel(self, ev->n_jobs, ev->first_task);
        s_jobs_release(ev->jobs, ev->n_jobs);
        s_weights_release(&ev->weights);
        ev->active = false;
    }
    for (int i = 0; i < S_TRACK; i++)
        self->worker_version[i] = -1;
}

/*  The trainer lost the training state (its process died, or a trainer that never held it took
    over): the trainer is restored from the in-memory snapshot (at most S_ROLLBACK_EVERY steps
    back) and the steps since are run again from there, with the same prompts and seeds, so the
    run writes exactly the metrics it would have written (metrics.jsonl is cut back to the
    snapshot, as on resume).  A `trainer_restored` event says from where and why. */
static bt_status s_recover(bt_controller_t *self, const char *why) {
    char reason[512];
    snprintf(reason, sizeof reason, "%s", why);
    if (!self->snap)
        return bt_fail(BT_ESTATE, "%s, and there is no snapshot to restore it from", reason);
    if (++self->recoveries > S_MAX_RECOVERIES)
        return bt_fail(BT_ESTATE, "%s, after %d restores of the trainer in this run", reason,
                       S_MAX_RECOVERIES);
    int64_t from = self->step;
    s_rollouts_cancel(self);
    s_evals_cancel(self);
    BT_TRY(s_restore_trainer(self, self->snap, self->saved.version, self->saved.canary_loss));
    s_state_apply(self, &self->saved, true);
    bt_mixture_position pos;
    BT_TRY(bt_mixture_from_json(self->mix, self->saved_data, "the snapshot", &pos));
    BT_TRY(bt_runlog_truncate_metrics(self->log, self->saved.metrics_size));
    self->launched = self->step;
    self->epoch_seen = s_epoch(self);
    self->full_owed = false;
    while (self->sc_n > 0 && self->sc_steps[self->sc_n - 1] > self->step)
        self->sc_n--;
    while (self->sc_record.n > 0 &&
           self->sc_record.entries[self->sc_record.n - 1].made_at > self->step)
        self->sc_record.n--;
    self->stats.restores++;
    bt_jsonl line;
    s_event_line(self, &line, "trainer_restored");
    bt_jsonl_str(&line, "from", "snapshot");
    bt_jsonl_int(&line, "step", self->step);
    bt_jsonl_int(&line, "lost_steps", from - self->step);
    bt_jsonl_str(&line, "reason", reason);
    const bt_worker_info *t = bt_registry_worker(self->reg, self->hub->trainer);
    if (t && !self->store)
        bt_jsonl_str(&line, "trainer", t->name);
    BT_TRY(bt_runlog_event(self->log, &line));
    bt_log(BT_LOG_WARN, "controller: %s: the trainer was restored from the snapshot of step %lld",
           reason, (long long)self->step);
    bt_status st = BT_OK;
    for (int i = 0; i < self->saved.n_pending && st == BT_OK; i++)
        if (self->saved.pending[i].dataset >= 0 &&
            self->saved.pending[i].dataset < self->cfg->eval.n_datasets)
            st = s_eval_start(self, self->saved.pending[i].dataset, "rl",
                              self->saved.pending[i].trigger, self->saved.pending[i].step, NULL);
    return st;
}

/*  Why the step's statistics call for a rollback, or NULL. */
static const char *s_diverged(bt_controller_t *self, const bt_trainer_stats *ts, char *buf,
                              size_t len) {
    if (!isfinite(ts->loss) || !isfinite(ts->grad_norm)) {
        snprintf(buf, len, "non-finite %s at step %lld", isfinite(ts->loss) ? "gradient" : "loss",
                 (long long)self->step + 1);
        return buf;
    }
    double f = self->cfg->checkpoint.spike_factor, a = fabs(ts->loss);
    if (f > 0 && self->loss_n >= 5 && self->loss_ema > 0 && a > f * self->loss_ema) {
        /* a mean of 0 (every group's rewards equal so far) gives no scale to judge a spike by */
        snprintf(buf, len, "loss %.4g at step %lld is %.1f times its running mean", ts->loss,
                 (long long)self->step + 1, a / self->loss_ema);
        return buf;
    }
    self->loss_ema = self->loss_n ? 0.9 * self->loss_ema + 0.1 * a : a;
    self->loss_n++;
    return NULL;
}

static void s_ckpt_reject(const char *folder, const char *reason, void *user) {
    bt_controller_t *self = user;
    bt_jsonl line;
    s_event_line(self, &line, "checkpoint_rejected");
    bt_jsonl_str(&line, "folder", folder);
    bt_jsonl_str(&line, "reason", reason);
    bt_runlog_event(self->log, &line);
}

/*  Writes the writer's finished saves as events. */
static void s_ckpt_poll(bt_controller_t *self) {
    bt_ckpt_result r;
    while (self->writer && bt_ckpt_writer_poll(self->writer, &r)) {
        bt_jsonl line;
        s_event_line(self, &line, r.status == BT_OK ? "checkpoint_saved" : "checkpoint_failed");
        bt_jsonl_int(&line, "step", r.step);
        bt_jsonl_str(&line, "kind", r.full ? "full" : "light");
        bt_jsonl_str(&line, r.status == BT_OK ? "folder" : "reason",
                     r.status == BT_OK ? r.path : r.error);
        bt_jsonl_num(&line, "seconds", r.seconds);
        bt_runlog_event(self->log, &line);
    }
}

/*  The model files of a checkpoint: config.json and model.safetensors (Hugging Face names) from
    tensors named prefix + NAME of msg. */
static bt_status s_ckpt_add_model(bt_ckpt_snapshot_t *snap, const bt_run_config *c,
                                  const bt_msg_t *msg, const char *prefix, bool borrow) {
    char *config = bt_model_config_to_json(&c->model);
    bt_status st = config ? bt_ckpt_snapshot_add_text(snap, "config.json", config) : BT_ENOMEM;
    free(config);
    int n = bt_msg_tensor_count(msg), k = 0;
    bt_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    if (!t)
        return BT_ENOMEM;
    size_t plen = strlen(prefix);
    for (int i = 0; i < n && st == BT_OK; i++) {
        bt_msg_tensor m = bt_msg_tensor_at(msg, i);
        if (strncmp(m.name, prefix, plen) != 0)
            continue;
        t[k] =
            (bt_st_tensor){.name = m.name + plen, .dtype = m.dtype, .ndim = m.ndim, .data = m.data};
        memcpy(t[k++].shape, m.shape, sizeof m.shape);
    }
    if (st == BT_OK)
        st = borrow ? bt_ckpt_snapshot_add_tensors_borrowed(snap, "model.safetensors", t, k)
                    : bt_ckpt_snapshot_add_tensors(snap, "model.safetensors", t, k);
    free(t);
    return st;
}

/*  A full checkpoint of the snapshot just taken: model (a Hugging Face folder), optimizer
    (moments and step count), state.json.  Handed to the background writer. */
static bt_status s_ckpt_full(bt_controller_t *self) {
    bt_ckpt_snapshot_t *snap = bt_ckpt_snapshot_new(self->saved.step, true);
    if (!snap)
        return BT_ENOMEM;
    /* the tensors stay in self->snap, which s_snapshot keeps until this save has finished */
    bt_status st = s_ckpt_add_model(snap, self->cfg, self->snap, "param.", true);
    int n = bt_msg_tensor_count(self->snap), k = 0;
    bt_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    int64_t steps = 0;
    if (!t)
        st = BT_ENOMEM;
    if (st == BT_OK)
        st = bt_msg_get_int(self->snap, "adam_steps", 0, BT_WIRE_INT_MAX, &steps);
    for (int i = 0; i < n && st == BT_OK; i++) {
        bt_msg_tensor m = bt_msg_tensor_at(self->snap, i);
        if (strncmp(m.name, "exp_avg", 7) != 0)
            continue;
        t[k] = (bt_st_tensor){.name = m.name, .dtype = m.dtype, .ndim = m.ndim, .data = m.data};
        memcpy(t[k++].shape, m.shape, sizeof m.shape);
    }
    self->snap_adam_steps = steps; /* borrowed too: lives as long as self->snap */
    t[k++] = (bt_st_tensor){
        .name = "adam_steps", .dtype = BT_I64, .ndim = 0, .data = &self->snap_adam_steps};
    if (st == BT_OK)
        st = bt_ckpt_snapshot_add_tensors_borrowed(snap, "optimizer.safetensors", t, k);
    k = 0; /* the KL reference, when the trainer keeps one */
    for (int i = 0; i < n && st == BT_OK; i++) {
        bt_msg_tensor m = bt_msg_tensor_at(self->snap, i);
        if (strncmp(m.name, "ref.", 4) != 0)
            continue;
        t[k] = (bt_st_tensor){.name = m.name, .dtype = m.dtype, .ndim = m.ndim, .data = m.data};
        memcpy(t[k++].shape, m.shape, sizeof m.shape);
    }
    if (st == BT_OK && k > 0)
        st = bt_ckpt_snapshot_add_tensors_borrowed(snap, "reference.safetensors", t, k);
    free(t);
    char *state = st == BT_OK ? bt_run_state_to_json(&self->saved) : NULL;
    if (st == BT_OK)
        st = state ? bt_ckpt_snapshot_add_text(snap, "state.json", state) : BT_ENOMEM;
    free(state);
    if (st == BT_OK) /* the data position and the curriculum at the same point */
        st = bt_ckpt_snapshot_add_text(snap, "data.json", self->saved_data);
    if (st == BT_OK)
        st = bt_ckpt_writer_submit(self->writer, &snap);
    bt_ckpt_snapshot_destroy(&snap); /* still ours when the writer was busy */
    return st;
}

/*  Light checkpoint: the latest published weights as a model folder. */
/*  A light checkpoint of this step's policy (a model folder; the tensors copied now).  When the
    writer is busy it is kept and submitted once the writer is free (a `checkpoint_deferred`
    event); one kept already is replaced by the newer (a `checkpoint_skipped` event). */
static bt_status s_ckpt_light(bt_controller_t *self) {
    if (!self->weights)
        return BT_OK;
    bt_ckpt_snapshot_t *snap = bt_ckpt_snapshot_new(self->step, false);
    bt_status st =
        snap ? s_ckpt_add_model(snap, self->cfg, self->weights->msg, "", false) : BT_ENOMEM;
    if (st == BT_OK && !bt_ckpt_writer_is_busy(self->writer)) {
        st = bt_ckpt_writer_submit(self->writer, &snap);
        bt_ckpt_snapshot_destroy(&snap);
        return st;
    }
    bt_jsonl line;
    if (st == BT_OK && self->light_pending) {
        s_event_line(self, &line, "checkpoint_skipped");
        bt_jsonl_str(&line, "kind", "light");
        bt_jsonl_int(&line, "step", bt_ckpt_snapshot_step(self->light_pending));
        bt_jsonl_int(&line, "superseded_by", self->step);
        st = bt_runlog_event(self->log, &line);
    }
    if (st == BT_OK) {
        s_event_line(self, &line, "checkpoint_deferred");
        bt_jsonl_str(&line, "kind", "light");
        bt_jsonl_int(&line, "step", self->step);
        st = bt_runlog_event(self->log, &line);
    }
    bt_ckpt_snapshot_destroy(&self->light_pending);
    self->light_pending = snap;
    return st;
}

/*  After a step: the in-memory snapshot every S_ROLLBACK_EVERY steps, and the checkpoints due.  A
    full checkpoint owed at the last step waits for the writer, so a finished run's last state is
    saved. */
static bt_status s_after_step_state(bt_controller_t *self, bool last) {
    const bt_run_config *c = self->cfg;
    double secs = s_train_seconds(self);
    /* epoch boundaries of the epoch source: an event each, and checkpoint.full_every_epochs */
    int64_t epoch = s_epoch(self), before = self->epoch_seen,
            every = c->checkpoint.full_every_epochs;
    self->epoch_seen = epoch;
    for (int64_t e = before + 1; e <= epoch && self->epoch_size; e++) {
        bt_jsonl line;
        s_event_line(self, &line, "epoch_end");
        bt_jsonl_int(&line, "epoch", e);
        bt_jsonl_int(&line, "step", self->step);
        bt_jsonl_str(&line, "source", bt_config_source_name(c, bt_config_epoch_source(c)));
        BT_TRY(bt_runlog_event(self->log, &line));
    }
    bool epoch_due = every > 0 && epoch / every > before / every;
    bool full =
        self->writer &&
        (epoch_due ||
         (c->checkpoint.full_every_steps > 0 && self->step % c->checkpoint.full_every_steps == 0) ||
         (c->checkpoint.full_every_secs > 0 &&
          secs - self->last_full_s >= c->checkpoint.full_every_secs) ||
         self->full_owed);
    bool light = self->writer && c->checkpoint.light_every_steps > 0 &&
                 self->step % c->checkpoint.light_every_steps == 0;
    if (full && last)
        BT_TRY(s_writer_wait(self));
    if (full && bt_ckpt_writer_is_busy(self->writer)) { /* at most one save in flight */
        self->full_owed = true;
        full = false;
    }
    if (full || self->step % S_ROLLBACK_EVERY == 0)
        BT_TRY(s_snapshot(self));
    if (full) {
        BT_TRY(s_ckpt_full(self));
        self->full_owed = false;
        self->last_full_s = secs;
    } else if (light) { /* a full checkpoint holds the policy too */
        BT_TRY(s_ckpt_light(self));
    }
    if (self->light_pending && last)
        BT_TRY(s_writer_wait(self));
    if (self->light_pending && !bt_ckpt_writer_is_busy(self->writer))
        BT_TRY(bt_ckpt_writer_submit(self->writer, &self->light_pending));
    s_ckpt_poll(self);
    return BT_OK;
}

/*  The trainer state a checkpoint folder holds, as a restore message, and its run state. */
static bt_status s_ckpt_read(const char *folder, bt_msg_t **state_out, bt_run_state *run) {
    char path[BT_CONFIG_PATH_MAX + 128], *text = NULL;
    snprintf(path, sizeof path, "%s/state.json", folder);
    BT_TRY(bt_file_read(path, 64 << 20, &text, NULL));
    bt_status st = bt_run_state_from_json(text, path, run);
    free(text);
    bt_msg_t *m = bt_msg_new(BT_MSG_TASK);
    bt_safetensors_t *files[3] = {NULL, NULL, NULL};
    const char *names[3] = {"model.safetensors", "optimizer.safetensors", "reference.safetensors"};
    for (int f = 0; f < 3 && st == BT_OK; f++) {
        snprintf(path, sizeof path, "%s/%s", folder, names[f]);
        if (f == 2 && access(path, F_OK) != 0)
            break; /* only with a KL reference */
        st = bt_safetensors_open(path, &files[f]);
    }
    for (int f = 0; f < 3 && files[f] && st == BT_OK; f++)
        for (int i = 0; i < bt_safetensors_count(files[f]) && st == BT_OK; i++) {
            const bt_st_entry *e = bt_safetensors_entry(files[f], i);
            char name[BT_WIRE_NAME_MAX];
            if (f == 1 && !strcmp(e->name, "adam_steps")) {
                int64_t steps;
                memcpy(&steps, e->data, sizeof steps);
                st = bt_msg_set_int(m, "adam_steps", steps);
                continue;
            }
            snprintf(name, sizeof name, "%s%s", f == 0 ? "param." : "", e->name);
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

/*  --resume: the newest verified checkpoint (or the one named), loaded into the trainer and the
    controller; metrics.jsonl cut back to the checkpoint; its pending evaluations started again. */
static bt_status s_resume(bt_controller_t *self) {
    char folder[BT_CONFIG_PATH_MAX];
    if (self->resume[0]) {
        snprintf(folder, sizeof folder, "%s", self->resume);
        BT_TRY(bt_ckpt_verify(folder));
    } else {
        BT_TRY(bt_ckpt_find_latest(bt_runlog_dir(self->log), s_ckpt_reject, self, folder,
                                   sizeof folder));
    }
    bt_msg_t *state = NULL;
    bt_run_state run;
    BT_TRY(s_ckpt_read(folder, &state, &run));
    bt_status st = s_restore_trainer(self, state, run.version, run.canary_loss);
    if (st == BT_OK)
        st = bt_runlog_truncate_metrics(self->log, run.metrics_size);
    if (st != BT_OK) {
        bt_msg_destroy(&state);
        return st;
    }
    bt_msg_destroy(&self->snap);
    self->snap = state;
    self->saved = run;
    s_state_apply(self, &run, true);
    char path[BT_CONFIG_PATH_MAX + 16], *data = NULL;
    snprintf(path, sizeof path, "%s/data.json", folder);
    if (access(path, F_OK) == 0) { /* absent in a checkpoint from before data.sources */
        bt_mixture_position pos;
        st = bt_file_read(path, SIZE_MAX, &data, NULL);
        if (st == BT_OK)
            st = bt_mixture_from_json(self->mix, data, path, &pos);
        free(data);
        if (st != BT_OK)
            return st;
    }
    free(self->saved_data);
    bt_mixture_position now = bt_mixture_get_position(self->mix);
    self->saved_data = bt_mixture_to_json(self->mix, &now);
    self->epoch_seen = s_epoch(self); /* its epoch_end events were written before */
    bt_train_clock_init(&self->clock, run.train_seconds);
    bt_train_clock_start(&self->clock, bt_now());
    self->last_full_s = run.train_seconds;
    bt_jsonl resumed; /* events of later steps, written before the kill, are superseded */
    s_event_line(self, &resumed, "resumed");
    bt_jsonl_str(&resumed, "folder", folder);
    bt_jsonl_int(&resumed, "step", run.step);
    bt_runlog_event(self->log, &resumed);
    for (int i = 0; i < run.n_pending && st == BT_OK; i++)
        if (run.pending[i].dataset >= 0 && run.pending[i].dataset < self->cfg->eval.n_datasets)
            st = s_eval_start(self, run.pending[i].dataset, "rl", run.pending[i].trigger,
                              run.pending[i].step, NULL);
    return st;
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
    bt_status st = s_rollout(self, &batch, &oldest);
    if (st == BT_OK)
        st = s_train(self, &batch, lr, &ts, &updated);
    if (st == BT_ESTATE) { /* the trainer lost its state: restore it and run the steps again */
        bt_rollout_batch_release(&batch);
        BT_TRY(s_recover(self, bt_last_error()));
        s_report(self, "rl", self->step, c->grpo.steps, NAN);
        return BT_OK;
    }
    char why[160];
    if (st == BT_OK && updated && s_diverged(self, &ts, why, sizeof why)) {
        bt_rollout_batch_release(&batch);
        BT_TRY(s_rollback(self, why));
        s_report(self, "rl", self->step, c->grpo.steps, NAN);
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
        bt_jsonl_int(&line, "epoch", s_epoch(self));
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
        BT_TRY(s_tuner_events(self, dec, nd));
    }
    bool last = self->step == c->grpo.steps;
    BT_TRY(s_eval_after_step(self, last));
    /* the plateau rule's evaluation decides the next step's learning rate: wait for it, so the
       decision lands at the same step whatever the timing (a resumed run must match) */
    for (int i = 0; i < S_MAX_EVALS && self->tuner.cfg.lr_plateau.enabled; i++)
        if (self->evals[i].active && self->evals[i].step == self->step &&
            !strcmp(c->eval.datasets[self->evals[i].ds].name, self->tuner.cfg.lr_plateau.dataset))
            BT_TRY(s_eval_wait(self, &self->evals[i]));
    st = s_after_step_state(self, last);
    if (st == BT_ESTATE) { /* lost while snapshotting: as above */
        BT_TRY(s_recover(self, bt_last_error()));
        s_report(self, "rl", self->step, c->grpo.steps, NAN);
        return BT_OK;
    }
    BT_TRY(st);
    if (last) { /* the run's results are complete when the last step returns */
        BT_TRY(s_eval_wait(self, NULL));
        if (self->writer)
            BT_TRY(s_writer_wait(self));
        s_ckpt_poll(self);
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
        s_event(self, "policy_saved", "dir", dir);
    }
    s_report(self, "rl", self->step, c->grpo.steps, tps);
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
    return s_eval_wait(self, NULL);
}

double bt_controller_predicted_loss(const bt_controller_t *self) {
    const bt_scaling_record *r = &self->sc_record;
    return r->n > 0 ? r->entries[r->n - 1].predicted : NAN;
}

bt_status bt_controller_stop_variant(bt_controller_t *self, double predicted, double best,
                                     double margin) {
    bt_jsonl line;
    s_event_line(self, &line, "variant_stopped");
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_int(&line, "step", self->step);
    bt_jsonl_num(&line, "predicted", predicted);
    bt_jsonl_num(&line, "best_predicted", best);
    bt_jsonl_num(&line, "margin", margin);
    return bt_runlog_event(self->log, &line);
}

double bt_controller_lr(const bt_controller_t *self) {
    return self->tuner.lr;
}

const char *bt_controller_variant_name(const bt_controller_t *self) {
    return self->variant_name;
}

bt_status bt_controller_pbt_exploit(bt_controller_t *self, bt_controller_t *top, double lr,
                                    const char *how) {
    double accuracy = self->last_accuracy, reward = self->last_reward, lr_before = self->tuner.lr;
    BT_TRY(s_snapshot(top)); /* top's whole trainer state, now */
    BT_TRY(s_restore_trainer(self, top->snap, self->version + 1, top->saved.canary_loss));
    self->tuner.kl_coef = top->tuner.kl_coef; /* top's tuned values, then the new rate */
    self->tuner.temperature = top->tuner.temperature;
    self->tuner.lr = lr;
    self->last_accuracy = top->last_accuracy;
    self->last_reward = top->last_reward;
    BT_TRY(s_snapshot(self)); /* a rollback now returns to the copy */
    bt_jsonl line;
    s_event_line(self, &line, "pbt");
    bt_jsonl_int(&line, "step", self->step);
    bt_jsonl_str(&line, "variant", self->variant_name);
    bt_jsonl_str(&line, "from", top->variant_name);
    bt_jsonl_num(&line, "accuracy", accuracy);
    bt_jsonl_num(&line, "from_accuracy", top->last_accuracy);
    bt_jsonl_num(&line, "reward", reward);
    bt_jsonl_num(&line, "from_reward", top->last_reward);
    bt_jsonl_num(&line, "lr_before", lr_before);
    bt_jsonl_num(&line, "from_lr", top->tuner.lr);
    bt_jsonl_num(&line, "lr_after", lr);
    bt_jsonl_str(&line, "explore", how);
    return bt_runlog_event(self->log, &line);
}

bt_status bt_controller_stop(bt_controller_t *self) {
    self->hub->stopping = true; /* a fatal failure is reported already: now the workers leave */
    bt_registry_cancel_pending(self->reg); /* nothing is handed out after the run */
    const bt_controller_stats *s = &self->stats;
    bt_jsonl counters; /* what the controller refused or recovered from (docs/protocol.md) */
    s_event_line(self, &counters, "counters");
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
        s_event_line(self, &line, "variant_share");
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
            s_send(self, &stop, w);
    }
    int64_t deadline = s_now_ms() + 10000;
    while (s_now_ms() < deadline) {
        int live = 0;
        for (int r = 0; r < BT_ROLE_COUNT; r++)
            live += bt_registry_live(self->reg, (bt_role)r);
        if (!live)
            break;
        BT_TRY(s_turn(self));
    }
    s_report(self, "done", self->step, self->cfg->grpo.steps, NAN);
    return BT_OK;
}
