/*  rooms.h — the controller's rooms and the state they share (internal to orchestrator/).
    Threading: owned by the controller thread.  Lifetime: one per run; a variant's controller
    lives as long as the run.
    controller.c  construction, the public API, events and progress
    loop.c        the socket: receiving, handing out, timers (the only zmq_poll)
    jobs.c        jobs: TASK building, RESULT checks, queueing and waiting
    group.c       who trains: the trainer holding the state, or the data-parallel group
    evals.c       evaluations: pinning, speed-sized shards, summing, listeners
    recovery.c    snapshots, canary, divergence, rollback, checkpoints, resume
    policy.c      one variant's GRPO schedule: SFT, rollouts, training, the step
    population.c  variants: PBT's exploit, early stop, the scaling-law fit */
#ifndef BATON_ORCHESTRATOR_ROOMS_H
#define BATON_ORCHESTRATOR_ROOMS_H
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
typedef struct bt_pinned {
    bt_msg_t *msg;
    int64_t version;
    int refs;
} bt_pinned;

struct bt_evaluation;

/*  One unit of work for a worker; the TASK message is built from it at each hand-out. */
typedef struct bt_job {
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
    struct bt_evaluation *ev;       /* eval: the evaluation the shard belongs to */
    int64_t expect_version;        /* train, sft, snapshot: the trainer version it applies to */
    bt_msg_t *result;              /* owned once the task is done */
    double compute_s;              /* the worker's compute time for it */
    int32_t worker;                /* who completed it */
    bt_status status;              /* a failure no retry mends (BT_ESTATE: restore the trainer) */
} bt_job;

/*  The rollouts of one GRPO step, in flight on the rollout workers: launched when the step comes
    (synchronous) or up to grpo.max_staleness steps before it (asynchronous). */
typedef struct bt_rollouts {
    bool active;
    int64_t step;                         /* the 0-based step it is for */
    bt_mixture_position before;           /* the data position before its prompts were drawn */
    int64_t dropped;                      /* prompts the curriculum dropped while drawing them */
    double weights[BT_TUNER_MAX_SOURCES]; /* the mixture weights they were drawn with */
    uint64_t *idx;                        /* its prompt ids, grouped by source */
    bt_job jobs[64];
    int n_jobs;
    int64_t first_task;
} bt_rollouts;

/*  One evaluation of one dataset at one policy version, running beside training. */
typedef struct bt_evaluation {
    bool active;
    int ds;             /* eval.datasets index */
    const char *phase;  /* "sft" or "rl" */
    char trigger[32];   /* "start", "steps", "epochs+seconds", "final", "sft" */
    int64_t step;       /* the training step it belongs to */
    bt_pinned *weights; /* pinned; NULL: version 0 as every worker builds it */
    int64_t version;
    bt_job jobs[S_MAX_SHARDS];
    int n_jobs;
    int64_t first_task;
    double t_start;
} bt_evaluation;

/*  The controllers of a run's strategy variants: one socket and registry (the first one's), one
    worker pool. */
typedef struct bt_hub {
    struct bt_controller *v[BT_CONFIG_MAX_VARIANTS];
    int n;
    /* a failure no retry can mend (out of memory: the same task needs the same memory); every
       turn then fails with it, until bt_controller_stop */
    char fatal[BT_WIRE_STR_MAX / 4];
    bt_status fatal_status;
    bool stopping;
    int32_t trainer;      /* without a trainer group: the worker holding the training state; -1
                             until the first trainer job is handed out */
    int64_t last_turn_ms; /* when bt_loop_turn last looked at the socket */
    int64_t last_ping_ms; /* when the workers were last sent PING */
    char last_fail[512];  /* the last FAIL's text, sanitised: a give-up names it */
    int64_t kind_ms[8];   /* the longest measured duration of each job kind (bt_jobs_kind_index) */
    int64_t rejected;     /* result_rejected events written */
    char run_id[96];      /* this invocation: messages stamped with another run's are refused */
    bt_controller_gone_fn *gone; /* the launcher: may a worker of a role still come? */
    void *gone_user;
} bt_hub;

struct bt_controller {
    const bt_run_config *cfg;
    int variant;              /* index in the hub; 0 without variants */
    const char *variant_name; /* "main" without variants */
    bt_hub *hub;               /* every variant's controller (this one alone without variants);
                                 owned by variant 0 */
    double worker_s;          /* worker compute spent on this variant's tasks */
    const char *config_json;
    bt_runlog_t *log;
    void *sock;
    bt_registry_t *reg;
    bt_controller_stats stats;
    bt_pinned *weights; /* the latest WEIGHTS, sent to (re)joining rollout workers */
    int64_t version;
    /* evaluation */
    bt_trigger triggers[BT_EVAL_MAX_DATASETS];
    bt_train_clock clock;
    int64_t ds_size[BT_EVAL_MAX_DATASETS]; /* items each dataset evaluates */
    uint64_t epoch_size;                   /* training-stream indices per epoch; 0: none */
    bt_evaluation evals[S_MAX_EVALS];
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
    double wait_since;         /* while bt_evals_wait waits: when it began; else NaN */
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
    bt_rollouts ahead[S_AHEAD];
    int64_t launched;
    /* the hyperparameters the next step uses (KL coefficient, temperature, learning rate) */
    bt_tuner tuner;
    /* scaling-law prediction (scaling.*): held-out losses by step, and every prediction made */
    int64_t sc_steps[S_MAX_POINTS];
    double sc_loss[S_MAX_POINTS];
    int sc_n;
    bt_scaling_record sc_record;
};

/* ---- controller.c */
int64_t bt_ctl_now_ms(void);
void bt_ctl_event_line(const bt_controller_t *self, bt_jsonl *line, const char *event);
void bt_ctl_event(bt_controller_t *self, const char *event, const char *key, const char *value);
bt_status bt_ctl_tuner_events(bt_controller_t *self, const bt_tuner_decision *d, int n);
void bt_ctl_report(bt_controller_t *self, const char *phase, int64_t step, int64_t total,
                     double tokens_per_s);
/* ---- loop.c */
bt_pinned *bt_loop_weights_ref(bt_pinned *w);
void bt_loop_weights_release(bt_pinned **w_p);
bt_status bt_loop_send(bt_controller_t *self, bt_msg_t **msg, const bt_worker_info *w);
bt_msg_t *bt_loop_weights_copy(const bt_msg_t *src);
void bt_loop_send_weights(bt_controller_t *self, const bt_worker_info *w);
void bt_loop_sanitise(const char *in, char *out, size_t cap);
bt_status bt_loop_turn(bt_controller_t *self);
/* ---- jobs.c */
bt_status bt_jobs_pin_weights(bt_controller_t *self, const bt_evaluation *ev,
                               const bt_worker_info *w);
bt_status bt_jobs_build_task(bt_controller_t *self, const bt_job *j, int64_t id, bt_msg_t *m);
bt_status bt_jobs_check_result(const bt_job *job, const bt_msg_t *m);
int bt_jobs_kind_index(const char *kind);
bt_status bt_jobs_add(bt_controller_t *self, bt_job *jobs, int n, int64_t *first);
void bt_jobs_cancel(bt_controller_t *self, int n, int64_t first);
bt_status bt_jobs_unstaffed(bt_controller_t *self, bt_role role, int64_t since);
bt_status bt_jobs_wait(bt_controller_t *self, bt_job *jobs, int n, int64_t first);
bt_status bt_jobs_run(bt_controller_t *self, bt_job *jobs, int n);
bt_status bt_jobs_await_workers(bt_controller_t *self);
void bt_jobs_release(bt_job *jobs, int n);
/* ---- group.c */
bt_status bt_group_trainer_lost(bt_controller_t *self);
bt_status bt_group_run_trainer(bt_controller_t *self, bt_job *job);
/* ---- evals.c */
bt_status bt_evals_setup(bt_controller_t *self);
bt_status bt_evals_start(bt_controller_t *self, int ds, const char *phase, const char *trigger,
                              int64_t step, bt_evaluation **out);
void bt_evals_trigger_event(bt_controller_t *self, const char *dataset, const bt_trigger_event *e);
bt_status bt_evals_poll(bt_controller_t *self);
bt_status bt_evals_wait(bt_controller_t *self, const bt_evaluation *ev);
bt_status bt_evals_after_step(bt_controller_t *self, bool last);
int bt_evals_first_generate(const bt_run_config *c);
void bt_evals_cancel(bt_controller_t *self);
/* ---- recovery.c */
double bt_recovery_train_seconds(const bt_controller_t *self);
bt_status bt_recovery_writer_wait(bt_controller_t *self);
bt_status bt_recovery_snapshot(bt_controller_t *self);
bt_status bt_recovery_restore_trainer(bt_controller_t *self, const bt_msg_t *state, int64_t version,
                                   double canary);
bt_status bt_recovery_rollback(bt_controller_t *self, const char *reason);
bt_status bt_recovery_recover(bt_controller_t *self, const char *why);
const char *bt_recovery_diverged(bt_controller_t *self, const bt_trainer_stats *ts, char *buf,
                              size_t len);
void bt_recovery_ckpt_poll(bt_controller_t *self);
bt_status bt_recovery_after_step(bt_controller_t *self, bool last);
bt_status bt_recovery_resume(bt_controller_t *self);
/* ---- policy.c */
int64_t bt_policy_epoch(const bt_controller_t *self);
bt_status bt_policy_warm_start(bt_controller_t *self);
void bt_policy_rollouts_release(bt_rollouts *r);
void bt_policy_rollouts_cancel(bt_controller_t *self);
bt_mixture_position bt_policy_train_position(const bt_controller_t *self);
bt_status bt_policy_rollout(bt_controller_t *self, bt_rollout_batch *batch, int64_t *oldest);
int64_t bt_policy_select(const bt_run_config *c, const bt_rollout_batch *in, bt_rollout_batch *out,
                        bt_status *st);
bt_status bt_policy_train(bt_controller_t *self, const bt_rollout_batch *sampled, double lr,
                         bt_trainer_stats *out, bool *updated);
/* ---- population.c */
bt_status bt_population_scaling_observe(bt_controller_t *self, int64_t step, double loss);

#endif
