/*  rooms.h — the controller's rooms and the state they share (internal to orchestrator/).
    Threading: owned by the controller thread.  Lifetime: one controller per run; its policies
    (one per strategy variant, one without variants) live as long as it does.

    controller.c  construction, the public API (controller.h), events and progress
    loop.c        the one poll: receiving and checking messages, handing out jobs, timers
    jobs.c        jobs: TASK building and RESULT checks (proto's specs), job sets that are polled
    group.c       who trains: the worker holding the training state, or the data-parallel group
    evals.c       evaluations: pinning, speed-sized shards, float64 sums, listeners
    recovery.c    snapshots, canary checks, divergence, rollback, recovery of a lost trainer
    saves.c       checkpoints, cut at the gate for every policy at once, and the resume
    policy.c      one variant's state machine: SFT warm start, training, the step
    rollouts.c    the asynchronous ring of a policy's rollouts
    population.c  the policies together: the step gate, PBT, early stop, the scaling-law fit

    Nothing here waits.  A room's poll function returns BT_PENDING (positive, not an error) while
    what it needs has not happened; the loop turns (loop.c) and polls again.  BT_TRY passes
    BT_PENDING up like an error, so a state that calls a sub-machine returns to the loop at once
    and calls it again on the next turn. */
#ifndef BATON_ORCHESTRATOR_ROOMS_H
#define BATON_ORCHESTRATOR_ROOMS_H
#define _POSIX_C_SOURCE 200809L
#include "baton/buf.h"
#include "baton/ckpt.h"
#include "baton/controller.h"
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/messages.h"
#include "baton/mixture.h"
#include "baton/msg.h"
#include "baton/prometheus.h"
#include "baton/proto.h"
#include "baton/registry.h"
#include "baton/rollout.h"
#include "baton/runstate.h"
#include "baton/safetensors.h"
#include "baton/scaling.h"
#include "baton/security.h"
#include "baton/shard.h"
#include "baton/spec.h"
#include "baton/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/*  A room is waiting: poll it again on a later turn. */
#define BT_PENDING 1

enum {
    S_MAX_DROPPED_LOGGED = 1024, /* prompt ids a "dropped" event lists, per step */
    S_MAX_ATTEMPTS = 4,
    S_MAX_EVALS = 16,        /* evaluations in flight at once, per policy */
    S_MAX_SHARDS = 64,       /* shards of one evaluation */
    S_MAX_ROLLOUT_JOBS = 64, /* rollout jobs of one step */
    S_TRACK = 1024,          /* workers whose weights version and speed are tracked */
    S_ROLLBACK_EVERY = 10,   /* steps between in-memory snapshots: the most a rollback loses */
    S_MAX_ROLLBACKS = 3,     /* rollbacks to one snapshot before the run gives up */
    S_MAX_RANKS = 64,        /* data-parallel trainer ranks */
    S_AHEAD = 17,         /* steps whose rollouts may be in flight: the current + max_staleness */
    S_MAX_POINTS = 4096,  /* held-out losses a scaling-law fit sees */
    S_MAX_RECOVERIES = 8, /* trainer state restores in one run before it gives up */
    S_MAX_REJECTED_LOGGED = 100, /* result_rejected events written, per run */
    S_MAX_LISTENERS = 8          /* consumers of finished evaluations */
};

/* ---- jobs (jobs.c) -----------------------------------------------------------------------------
 */

/*  What a job does: bt_job_kind, with its names, in proto.h. */

/*  A WEIGHTS message shared by a policy (its latest) and the evaluations pinned to it. */
typedef struct bt_pinned {
    bt_msg_t *msg;
    int64_t version;
    int refs;
} bt_pinned;

struct bt_policy;
struct bt_evaluation;

/*  One unit of work for a worker; the TASK message is built from it at each hand-out.  It lives
    in the room that queued it (a job set, an evaluation, a trainer run) until done or cancelled. */
typedef struct bt_job {
    struct bt_policy *pol; /* the policy that queued it */
    bt_job_kind kind;
    bt_role role;
    int rank; /* group: this rank's number in the formation */
    int64_t start, count, seed;
    double lr;
    bool publish;
    const uint64_t *prompts;       /* rollout: training-stream indices [count] */
    const bt_rollout_batch *batch; /* train */
    const double *adv;             /* train: [batch->n] */
    bool inject_nan;               /* train: debug.inject_nan_at_step */
    const bt_msg_t *state;         /* restore: the trainer state to load; NULL: the initial one */
    int64_t restore_version;       /* restore: the version the loaded weights get */
    struct bt_evaluation *ev;      /* eval: the evaluation the shard belongs to */
    int64_t expect_version;        /* train, sft, snapshot: the trainer version it applies to */
    bt_msg_t *result;              /* owned once the task is done */
    double compute_s;              /* the worker's compute time for it */
    double done_s;                 /* when its RESULT came (bt_now) */
    int32_t worker;                /* who completed it */
    bt_status status;              /* a failure no retry mends (BT_ESTATE: restore the trainer) */
} bt_job;

/*  Jobs queued together and polled until every one is done (bt_jobs_poll). */
typedef struct bt_jobset {
    bt_job *jobs;
    int n;
    int64_t first;         /* the first one's task id (ids are dense); -1: not queued */
    int64_t stalled_since; /* when the last worker of a role they need was seen */
    double t0;             /* when they were queued */
} bt_jobset;

/* ---- the trainer (group.c) ------------------------------------------------------------------- */

typedef enum bt_trainer_state {
    BT_TRAINER_IDLE = 0,
    BT_TRAINER_ONE,    /* the job in flight on the one trainer */
    BT_TRAINER_NEXT,   /* a group: about to run the job on it, forming it first when broken */
    BT_TRAINER_SETTLE, /* a broken group: until no rank of the last formation is busy */
    BT_TRAINER_PICK,   /* choosing the ranks of a formation */
    BT_TRAINER_FORM,   /* the formation's group jobs in flight */
    BT_TRAINER_RANKS,  /* the job in flight on every rank */
    BT_TRAINER_DONE    /* job.result holds rank 0's result */
} bt_trainer_state;

/*  A trainer job on its way: on the one trainer, or on every rank of the data-parallel group,
    which is (re-)formed first when it is broken. */
typedef struct bt_trainer_run {
    bt_trainer_state state;
    bt_job job; /* what to run; its result lands here */
    bt_job ranks[S_MAX_RANKS];
    bt_jobset set;
    int attempt;      /* runs of the job on a group that broke */
    int form_attempt; /* formations that failed */
    int64_t settle_until, join_since;
    int64_t expected; /* the trainer version a formation must find */
    bool fresh;       /* the formation replaces a group whose every rank was lost */
} bt_trainer_run;

/* ---- evaluations (evals.c) ------------------------------------------------------------------- */

/*  One evaluation of one dataset at one policy version, running beside training. */
typedef struct bt_evaluation {
    bool active;
    int ds;              /* eval.datasets index */
    const char *phase;   /* "sft" or "rl" */
    char trigger[32];    /* "start", "steps", "epochs+seconds", "final", "sft" */
    int64_t step;        /* the training step it belongs to */
    int64_t global_step; /* the policy's global_step when it started (its last train line's) */
    bt_pinned *weights;  /* pinned; NULL: version 0 as every worker builds it */
    int64_t version;
    bt_job jobs[S_MAX_SHARDS];
    int n_jobs;
    int64_t first_task;
    double t_start;
} bt_evaluation;

/*  A finished evaluation, as its listeners see it. */
typedef struct bt_eval_done {
    struct bt_policy *pol;
    const bt_eval_dataset *dataset;
    int ds;
    const char *phase;
    int64_t step;
    int64_t global_step;
    const char *trigger;
    int64_t version;
    const bt_eval_metric *metrics;
    int n_metrics;
    double primary; /* the kind's headline metric (accuracy, NLL per token, ...) */
    double seconds; /* from start to finish */
    int shards;
    const char *shard_items; /* the speed-sized split, "150,50" */
} bt_eval_done;

/*  A consumer of finished evaluations (bt_evals_listen): the run log, triggers, tuner rules, the
    scaling fit.  Returns BT_OK or a run-ending error. */
typedef bt_status(bt_eval_listener)(const bt_eval_done *done, void *user);

/*  An evaluation wait: the busiest eval worker's share of it counts as compute (stats). */
typedef struct bt_eval_wait {
    double since; /* NaN: not waiting */
    int64_t stalled_since;
} bt_eval_wait;

/* ---- the policy (policy.c) ------------------------------------------------------------------- */

/*  The rollouts of one GRPO step, in flight on the rollout workers: launched when the step comes
    (synchronous) or up to grpo.max_staleness steps before it (asynchronous). */
typedef struct bt_rollouts {
    bool active;
    int64_t step;                         /* the 0-based step it is for */
    bt_mixture_position before;           /* the data position before its prompts were drawn */
    int64_t dropped;                      /* prompts the curriculum dropped while drawing them */
    double weights[BT_TUNER_MAX_SOURCES]; /* the mixture weights they were drawn with */
    uint64_t *idx;                        /* its prompt ids, grouped by source */
    bt_job jobs[S_MAX_ROLLOUT_JOBS];
    int n_jobs;
    bt_jobset set;
} bt_rollouts;

/*  Where a policy stands.  Each state names what it waits for. */
typedef enum bt_policy_state {
    BT_POLICY_START = 0,  /* nothing done yet: resume, or the warm start */
    BT_POLICY_RESUME,     /* the checkpoint's trainer state being restored */
    BT_POLICY_SFT,        /* an SFT step's job */
    BT_POLICY_SFT_EVAL,   /* the evaluation that decides SFT's early stop */
    BT_POLICY_WARM_EVALS, /* starting the step-0 evaluations (a free slot) */
    BT_POLICY_WARM_SNAP,  /* the first snapshot */
    BT_POLICY_WARM_RESET, /* a trainer that lost its state during the warm start: reset */
    BT_POLICY_WARM_SHARE, /* the leader's first snapshot, then its restore: a shared warm start */
    BT_POLICY_GATE,       /* ready for the next step: the population opens the gate */
    BT_POLICY_ROLLOUT,    /* the step's rollouts */
    BT_POLICY_TRAIN,      /* the step's update */
    BT_POLICY_RECOVER,    /* the trainer restored from the snapshot after it lost its state */
    BT_POLICY_ROLLBACK,   /* the trainer restored from the snapshot after a diverged step */
    BT_POLICY_EVALS,      /* starting the evaluations the step's triggers fired (a free slot) */
    BT_POLICY_PLATEAU,    /* the evaluation the learning-rate plateau rule decides on */
    BT_POLICY_SAVE,       /* snapshot and checkpoints due after the step */
    BT_POLICY_FINAL,      /* the last step's evaluations, the writer, the saved policy */
    BT_POLICY_EXPLOIT,    /* PBT: taking another policy's state */
    BT_POLICY_DONE
} bt_policy_state;

typedef enum bt_snap_state {
    BT_SNAP_IDLE = 0,
    BT_SNAP_EVALS, /* evaluations pinned to older versions finishing */
    BT_SNAP_JOB,   /* the trainer's state on its way */
    BT_SNAP_WRITER /* a save in flight still reads the old snapshot's tensors */
} bt_snap_state;

struct bt_controller;

/*  One variant's lineage: weights version, optimizer (on the trainer), data cursor, triggers,
    tuner state, and where its schedule stands. */
typedef struct bt_policy {
    struct bt_controller *ctl;
    const bt_config *cfg;
    int variant;              /* index in the population; 0 without variants */
    const char *variant_name; /* "main" without variants */
    bt_policy_state state;
    double worker_s;    /* worker compute spent on this policy's jobs */
    bt_pinned *weights; /* the latest WEIGHTS, sent to (re)joining rollout workers */
    int64_t version;
    /* evaluation */
    bt_trigger triggers[BT_EVAL_MAX_DATASETS];
    bt_train_clock clock;
    int64_t ds_size[BT_EVAL_MAX_DATASETS]; /* items each dataset evaluates */
    bt_eval_suite suite; /* the datasets as loaded: what their metrics name (choices' subjects) */
    uint64_t epoch_size; /* training-stream indices per epoch; 0: none */
    bt_evaluation evals[S_MAX_EVALS];
    int64_t worker_version[S_TRACK];             /* eval workers: weights held; -1: unknown */
    double speed[S_TRACK][BT_EVAL_MAX_DATASETS]; /* eval workers: items per second (EMA) */
    double wait_busy[S_TRACK];                   /* eval worker compute inside an eval wait */
    bt_eval_wait eval_wait;
    bool evals_due[BT_EVAL_MAX_DATASETS]; /* fired by the step's triggers, not started yet */
    char due_trigger[BT_EVAL_MAX_DATASETS][32];
    /* the trainer */
    bt_trainer_run tr;
    int64_t trainer_version; /* the version the trainer holds after its last job */
    /* checkpoints and faults */
    bt_snap_state snap_state;
    bt_msg_t *snap_new;      /* a snapshot taken, kept here until the writer is idle */
    double snap_canary;      /* its canary loss */
    int save_stage;          /* BT_POLICY_SAVE: how far bt_recovery_after_step got */
    bool epoch_due;          /* checkpoint.full_every_epochs more epochs done: a full one is due */
    bt_msg_t *snap;          /* the trainer's state at saved.step (a snapshot or restore TASK) */
    int recoveries;          /* trainer state restores (a trainer lost with its state) */
    bt_runstate saved;       /* the controller's state at the same point */
    int64_t snap_adam_steps; /* its AdamW step count, which a full checkpoint borrows */
    int rollbacks;           /* rollbacks to the current snapshot */
    bool nan_injected;
    double loss_ema; /* |loss|, for spike detection */
    int64_t loss_n;
    char reason[512];       /* why the trainer is being restored (recover, rollback, warm reset) */
    int64_t lost_from;      /* the step a recovery or rollback started from */
    bt_msg_t *resume_state; /* the checkpoint's trainer state while it is restored */
    bt_runstate resume_run;
    char resume_folder[BT_CONFIG_PATH_MAX + BT_CONFIG_NAME_MAX + 2]; /* its files resumed from */
    /* the schedule */
    int64_t step;                 /* GRPO steps done */
    double tokens;                /* completion tokens sampled by those steps */
    int64_t sft_step;             /* SFT steps done in this warm start */
    double sft_lr;                /* the running SFT step's learning rate */
    bool sft_eval;                /* the running SFT step publishes for an evaluation */
    bt_evaluation *sft_ev;        /* the evaluation deciding SFT's early stop */
    bt_mixture_position warm_pos; /* the data position before the warm start */
    int64_t warm_metrics;         /* metrics.jsonl's size before it */
    /* a warm start shared by variants whose warm starts are the same (bt_config_same_warm_start):
       the first of them (the leader) runs it, the others (followers) restore its first snapshot */
    struct bt_policy *warm_from; /* the leader this policy takes its warm start from; NULL: none */
    int warm_followers;          /* policies that take this one's */
    bt_buf warm_lines;           /* its SFT metrics lines, each NUL-terminated, for them */
    double warm_accuracy;        /* last_accuracy when SFT ended */
    uint64_t warm_drawn;         /* demonstrations SFT drew from the first source */
    /* the running GRPO step */
    double step_t0, step_lr;
    int64_t step_oldest, step_version;
    bt_rollout_batch sampled; /* the step's groups */
    bt_rollout_batch batch;   /* those that train (dynamic sampling) */
    double *adv;              /* [batch.n] */
    bt_trainer_stats ts;
    int64_t micro_batch; /* the trainer's micro-batch at its last step (0: none yet), for the
                            micro_batch_auto event */
    bool updated;
    double step_tps; /* completion tokens per second of the last step */
    /* the training data: each source's task, the mixture's draws and curriculum (mixture.h) */
    bt_source_t *sources[BT_CONFIG_MAX_SOURCES];
    int n_sources;
    bool episodes; /* some source's task has an environment (task.env): train lines count turns */
    bt_mixture_t *mix;
    int64_t dropped_step; /* prompts the curriculum dropped while drawing the current step's */
    double step_weights[BT_TUNER_MAX_SOURCES]; /* the mixture weights that drew them */
    double padding;     /* the last update's share of trainer token slots that were padding */
    int64_t epoch_seen; /* the epoch source's completed epochs at the last step's end */
    char *saved_data;   /* data.json of the snapshot: the position and the curriculum then */
    double last_accuracy, last_reward, tokens_per_s;
    const char *phase; /* of the last report */
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
    double clip_high; /* the ratio's upper clip the next updates use (grpo.clip_high, or PBT's) */
    double step_kl_coef, step_temperature, step_clip_high; /* what the running step used */
    /* population: PBT's copy of another policy (BT_POLICY_EXPLOIT) */
    struct bt_policy *exploit_from;
    double exploit_lr;
    const char *exploit_how;
    double exploit_value[BT_PBT_KEY_COUNT]; /* the explored keys' new values (pbt.explore) */
    const char *exploit_hows[BT_PBT_KEY_COUNT];
    int exploit_stage;
    bt_jsonl exploit_line; /* its pbt event, written once the new snapshot is taken */
    bool stopped;          /* stopped early (scaling.stop_margin) */
    /* metrics.jsonl's global_step: the train and sft lines written so far, over SFT and RL, kept
       by checkpoints (bt_runstate) and by a rollback (the lines it skipped stay in the file) */
    int64_t global_step;
    /* the resource figures of the train lines (step.c, bt_policy_resources): the pool's figures
       at the policy's last train line, and the fan-outs' waits for their slowest worker since */
    double res_t;
    bt_registry_usage res_at[BT_ROLE_COUNT];
    double wait_slowest_s;
} bt_policy;

/* ---- the population (population.c) ----------------------------------------------------------- */

typedef enum bt_population_state {
    BT_POPULATION_RUNNING = 0,
    BT_POPULATION_PBT_EVALS, /* every policy's evaluations finishing before the ranking */
    BT_POPULATION_PBT_COPY   /* the bottom policies taking the top ones' states */
} bt_population_state;

/* ---- the controller (controller.c) ----------------------------------------------------------- */

struct bt_controller {
    const bt_config *cfg; /* the run's (variant 0's); each policy has its own */
    const char *config_json;
    bt_runlog_t *log;
    void *sock;
    bt_registry_t *reg;
    bt_controller_stats stats;
    bt_policy *pol[BT_CONFIG_MAX_VARIANTS];
    int n_pol;
    double t0;
    /* a failure no retry can mend (out of memory: the same task needs the same memory); every
       turn then fails with it, until bt_controller_stop */
    char fatal[BT_WIRE_STR_MAX / 4];
    bt_status fatal_status;
    bool stopping;
    int32_t trainer;      /* without a trainer group: the worker holding the training state; -1
                             until the first trainer job is handed out */
    int64_t last_turn_ms; /* when the loop last looked at the socket */
    int64_t last_ping_ms; /* when the workers were last sent PING */
    char last_fail[512];  /* the last FAIL's text, sanitised: a give-up names it */
    int64_t kind_ms[BT_JOB_KIND_COUNT]; /* the longest measured duration of each job kind */
    int64_t rejected;                   /* result_rejected events written */
    char run_id[96]; /* this invocation: messages stamped with another run's are refused */
    bt_controller_gone_fn *gone; /* the launcher: may a worker of a role still come? */
    void *gone_user;
    char start_error[700]; /* a worker that could not build its state said why (BYE {error}) */
    bool joined;           /* the configured workers joined once */
    int64_t join_deadline;
    bt_ckpt_writer_t *writer;        /* when checkpoints are configured */
    char resume[BT_CONFIG_PATH_MAX]; /* with resuming: "" = LATEST, else a checkpoint folder */
    bool resuming;
    /* checkpoints (saves.c) */
    char resume_folder[BT_CONFIG_PATH_MAX]; /* the checkpoint resumed from, once found */
    bt_runstate_population resume_pop;      /* its population.json (with variants) */
    bt_runstate resume_first; /* the first policy's state.json: every policy's holds its sizes */
    bool resume_first_read;
    bool resume_cut; /* the logs were cut back to it: once for the population, by the first
                        policy restored (a later cut would delete the lines of the policies
                        restored before it, their pending evaluations') */
    int64_t cut_step;                       /* the last step whose checkpoints were decided */
    int cut_stage;                          /* how far bt_saves_cut got with the next */
    bool cut_full, cut_light;               /* what it cuts */
    double cut_secs;                        /* the run's training seconds when it was planned */
    bool full_owed;                         /* a full checkpoint was due but the writer was busy */
    double last_full_s;                     /* training seconds at the last full checkpoint */
    bt_ckpt_snapshot_t *light_pending;      /* a light checkpoint that fell due during a save */
    bt_progress_fn *progress;
    void *progress_user;
    /* finished evaluations go to these, in order */
    bt_eval_listener *listeners[S_MAX_LISTENERS];
    void *listener_user[S_MAX_LISTENERS];
    int n_listeners;
    /* the population */
    bt_population_state pop_state;
    int64_t pbt_step; /* the step of the last PBT round */
    int pbt_next;     /* the next bottom policy to copy, in pbt_order */
    int pbt_order[BT_CONFIG_MAX_VARIANTS];
    double pbt_score[BT_CONFIG_MAX_VARIANTS];
    uint64_t pbt_rng;
    int64_t steps_done;    /* policy steps completed, all policies together */
    int64_t early_checked; /* steps_done when early stopping last looked */
    bool all_started;      /* every policy finished its warm start (or resume) once */
    bt_prometheus_t *prom; /* run.metrics_listen's endpoint, fed each turn; NULL: none */
};

/* ---- controller.c ---------------------------------------------------------------------------- */
int64_t bt_ctl_now_ms(void);
void bt_ctl_event_line(const bt_controller_t *self, bt_jsonl *line, const char *event);
void bt_ctl_event(bt_controller_t *self, const char *event, const char *key, const char *value);
void bt_ctl_report(bt_policy *p, const char *phase, int64_t step, int64_t total,
                   double tokens_per_s);
bt_status bt_ctl_tuner_events(bt_policy *p, const bt_tuner_decision *d, int n);
/*  Writes the latest published policy of p to RUN_DIR/model (RUN_DIR/variants/NAME/model with
    variants) and says so in a policy_saved event. */
bt_status bt_ctl_save_final(bt_policy *p);

/* ---- loop.c ---------------------------------------------------------------------------------- */
bt_pinned *bt_loop_weights_ref(bt_pinned *w);
void bt_loop_weights_release(bt_pinned **w_p);
bt_msg_t *bt_loop_weights_copy(const bt_msg_t *src);
bt_status bt_loop_send(bt_controller_t *self, bt_msg_t **msg, const bt_worker_info *w);
void bt_loop_send_weights(bt_policy *p, const bt_worker_info *w);
void bt_loop_sanitise(const char *in, char *out, size_t cap);
/*  One turn: hands out what can be handed out, waits at most a heartbeat for messages, handles
    them, runs the timers (PINGs, expiry, deadlines).  The only zmq_poll. */
bt_status bt_loop_turn(bt_controller_t *self);
/*  The run's fatal failure, if a worker reported one. */
bt_status bt_loop_fatal(const bt_controller_t *self);

/* ---- jobs.c ---------------------------------------------------------------------------------- */
bt_status bt_jobs_pin_weights(bt_policy *p, const bt_evaluation *ev, const bt_worker_info *w);
bt_status bt_jobs_build_task(bt_policy *p, const bt_job *j, int64_t id, bt_msg_t *m);
bt_status bt_jobs_check_result(const bt_job *job, const bt_msg_t *m);
/*  Queues the n jobs (which must stay where they are until done or cancelled) as one set.  A
    trainer job without a trainer group goes to the worker holding the training state alone. */
bt_status bt_jobs_submit(bt_policy *p, bt_jobset *set, bt_job *jobs, int n);
/*  BT_OK once every job of the set is done; BT_PENDING before; an error when a job failed for
    good or no worker of a role it needs will come (the set is then cancelled). */
bt_status bt_jobs_poll(bt_policy *p, bt_jobset *set);
/*  A set whose jobs are all done (longest: the longest compute_s among them), counted in the
    overhead stats as one batch of parallel tasks, and in p->wait_slowest_s by how long its
    slowest job kept the others' results waiting. */
void bt_jobs_count_done(bt_policy *p, const bt_jobset *set, double longest);
/*  Cancels the set's jobs that are not done and frees their results. */
void bt_jobs_abort(bt_policy *p, bt_jobset *set);
void bt_jobs_cancel(bt_controller_t *self, int n, int64_t first);
void bt_jobs_release(bt_job *jobs, int n);
/*  While no worker of role is live: BT_OK as long as one may still come, else why none will. */
bt_status bt_jobs_unstaffed(bt_controller_t *self, bt_role role, int64_t since);
/*  BT_OK once the configured workers have joined (BT_PENDING before). */
bt_status bt_jobs_joined(bt_controller_t *self);

/* ---- group.c --------------------------------------------------------------------------------- */
bt_status bt_group_trainer_lost(bt_policy *p);
/*  Starts job on the trainer, or on every rank of the group (a snapshot on rank 0 alone), which
    is re-formed first when broken; the trainer version it applies to is set here.  p->tr must be
    idle. */
void bt_group_begin(bt_policy *p, const bt_job *job);
/*  BT_PENDING while the job runs; BT_OK once p->tr.job.result holds (rank 0's) result, which the
    caller reads before bt_group_release; an error (the trainer run is then idle again). */
bt_status bt_group_poll(bt_policy *p);
void bt_group_release(bt_policy *p);
/*  Cancels a trainer job in flight. */
void bt_group_abort(bt_policy *p);

/* ---- evals.c --------------------------------------------------------------------------------- */
bt_status bt_evals_setup(bt_policy *p);
/*  Queues evaluation of dataset ds at p's version; BT_PENDING while every slot is taken. */
bt_status bt_evals_start(bt_policy *p, int ds, const char *phase, const char *trigger, int64_t step,
                         bt_evaluation **out);
void bt_evals_trigger_event(bt_policy *p, const char *dataset, const bt_trigger_event *e);
/*  Finishes the evaluations whose shards are all done (their listeners run). */
bt_status bt_evals_poll(bt_policy *p);
/*  BT_OK once ev (NULL: every evaluation of p) has finished; BT_PENDING before. */
bt_status bt_evals_wait(bt_policy *p, const bt_evaluation *ev);
/*  Where p's training stands for its triggers: step, epoch, training seconds, tokens. */
bt_trigger_at bt_evals_trigger_at(const bt_policy *p);
/*  Marks the datasets whose triggers fire after the step (every one on the last step). */
void bt_evals_after_step(bt_policy *p, bool last);
/*  Starts the marked evaluations; BT_PENDING while a slot is missing. */
bt_status bt_evals_start_due(bt_policy *p);
int bt_evals_first_generate(const bt_config *c);
void bt_evals_cancel(bt_policy *p);
/*  Adds a consumer of finished evaluations (called in the order added). */
void bt_evals_listen(bt_controller_t *self, bt_eval_listener *fn, void *user);
/*  The listeners every run has: the metrics line, the policy's progress, triggers, the tuner. */
void bt_evals_listen_defaults(bt_controller_t *self);

/* ---- recovery.c ------------------------------------------------------------------------------ */
double bt_recovery_train_seconds(const bt_policy *p);
/*  BT_OK once the checkpoint writer has no save in flight. */
bt_status bt_recovery_writer_idle(bt_controller_t *self);
/*  The snapshot sub-machine: the trainer's whole state and the policy's, kept as the point a
    rollback returns to; BT_PENDING until it is taken. */
bt_status bt_recovery_snapshot(bt_policy *p);
/*  Restores the trainer from state (NULL: the initial state) as version, checking the canary. */
bt_status bt_recovery_restore(bt_policy *p, const bt_msg_t *state, int64_t version, double canary);
/*  Starts a rollback (BT_POLICY_ROLLBACK) or a recovery (BT_POLICY_RECOVER) for reason. */
bt_status bt_recovery_begin(bt_policy *p, bt_policy_state kind, const char *reason);
/*  Polls the restore of a rollback or recovery; BT_OK when the policy can go on. */
bt_status bt_recovery_poll(bt_policy *p);
const char *bt_recovery_diverged(bt_policy *p, const bt_trainer_stats *ts, char *buf, size_t len);
/*  Epoch events and the snapshot due after the step (BT_POLICY_SAVE). */
bt_status bt_recovery_after_step(bt_policy *p);
/*  p's controller state now into p->saved and p->saved_data (the snapshot's trainer state is
    p->snap's). */
bt_status bt_recovery_capture(bt_policy *p);
/*  Puts p back to a captured state; the data cursor only with restore_cursor. */
void bt_recovery_apply(bt_policy *p, const bt_runstate *st, bool restore_cursor);
/*  Starts again the evaluations run listed as in flight. */
bt_status bt_recovery_pending_evals(bt_policy *p, const bt_runstate *run);

/* ---- saves.c --------------------------------------------------------------------------------- */
/*  Writes the checkpoint writer's finished saves as events. */
void bt_saves_poll(bt_controller_t *self);
/*  At the gate, every live policy standing at step (last: every one at its last step): the
    checkpoints step calls for, cut once; BT_PENDING while snapshots or the writer are awaited. */
bt_status bt_saves_cut(bt_controller_t *self, int64_t step, bool last);
/*  A policy went back to step (rollback, recovery): the checkpoints after it are decided again. */
void bt_saves_rewind(bt_controller_t *self, int64_t step);
/*  Reads p's part of the checkpoint to resume from (found once for the run); BT_POLICY_RESUME,
    or BT_POLICY_DONE for a policy the checkpoint says stopped early. */
bt_status bt_saves_resume_read(bt_policy *p);
/*  Polls the restore of a resume; BT_OK once p stands where the checkpoint was taken. */
bt_status bt_saves_resume_poll(bt_policy *p);

/* ---- policy.c -------------------------------------------------------------------------------- */
bt_policy *bt_policy_new(bt_controller_t *ctl, const bt_config *cfg, int k);
void bt_policy_destroy(bt_policy **self_p);
/*  Advances p as far as it can go without waiting: BT_OK when it reached the gate or the end,
    BT_PENDING while it waits, or a run-ending error. */
bt_status bt_policy_advance(bt_policy *p);
/*  Starts the next step (p is at the gate). */
void bt_policy_open_gate(bt_policy *p);
/*  The step's record (step.c): the train line, the tuner's decisions, the evaluations due; then
    BT_POLICY_EVALS.  The step's sampled groups are released. */
bt_status bt_policy_record(bt_policy *p);
int64_t bt_policy_epoch(const bt_policy *p);
/*  Appends a metrics line of p's SFT phase (its steps, the early-stop evaluations), kept for the
    policies that share p's warm start. */
bt_status bt_policy_sft_metric(bt_policy *p, const bt_jsonl *line);
/*  Adds a train line's resource figures (docs/architecture.md, "Resource figures") over the
    interval since p's previous train line (or bt_policy_resources_mark), and starts the next
    interval. */
void bt_policy_resources(bt_policy *p, bt_jsonl *line);
/*  Starts p's first interval now. */
void bt_policy_resources_mark(bt_policy *p);

/* ---- rollouts.c ------------------------------------------------------------------------------ */
/*  Launches the rollouts of the steps up to grpo.max_staleness ahead not in flight yet. */
bt_status bt_rollouts_launch_ahead(bt_policy *p);
bt_status bt_rollouts_collect(bt_policy *p, bt_rollout_batch *batch, int64_t *oldest);
void bt_rollouts_cancel(bt_policy *p);
void bt_rollouts_release(bt_rollouts *r);
bt_mixture_position bt_rollouts_train_position(const bt_policy *p);

/* ---- population.c ---------------------------------------------------------------------------- */
/*  Opens the gate of the policies that may take their next step, runs PBT and early stop between
    steps; BT_PENDING while a PBT round is in progress. */
bt_status bt_population_advance(bt_controller_t *self);
/*  The scaling-law listener (registered by bt_evals_listen_defaults). */
bt_status bt_population_scaling_observe(bt_policy *p, int64_t step, double loss);
/*  Polls a policy's PBT copy (BT_POLICY_EXPLOIT); BT_OK when done. */
bt_status bt_population_exploit_poll(bt_policy *p);

#endif
