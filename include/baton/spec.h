/*  spec.h — one spec per TASK and RESULT kind: a plain struct per job kind, written into a message
    (to_msg) and read back with its field rules (from_msg), so the controller and the workers agree
    on one description of each job (reference: docs/protocol.md, "TASK and RESULT by kind").
    A TASK carries the job's data and, as one struct, the values the tuner steers (bt_hyper); the
    fixed settings a worker needs come once, in WELCOME's config, and never ride in a TASK.
    Threading: plain functions on caller-owned values.  Lifetime: a bt_spec_task or bt_spec_result
    read from a message holds heap arrays until its release function; borrowed pointers say so. */
#ifndef BATON_SPEC_H
#define BATON_SPEC_H

#include "baton/config.h"
#include "baton/messages.h"
#include "baton/msg.h"
#include "baton/proto.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  The values a policy's tuner (and PBT) steer, as the job uses them; every TASK carries all of
    them, as fields hyper.lr, hyper.kl_coef and hyper.temperature. */
typedef struct bt_hyper {
    double lr;          /* train, sft: the learning rate the update applies (schedule x peak);
                           [0, BT_CONFIG_LR_MAX] */
    double kl_coef;     /* train: beta of the KL penalty; [0, BT_CONFIG_KL_MAX] */
    double temperature; /* rollout: the sampling temperature; [0, BT_CONFIG_TEMPERATURE_MAX] */
    double clip_high;   /* train: the ratio's upper clip (DAPO's clip-higher), which PBT may
                           explore; [0, BT_CONFIG_CLIP_MAX] */
} bt_hyper;

/*  What a worker knows of its run when it reads a TASK (from WELCOME's config): the bounds of the
    fields that index into it. */
typedef struct bt_spec_limits {
    int n_variants;                         /* variant in [0, n_variants) */
    int n_datasets[BT_CONFIG_MAX_VARIANTS]; /* eval: dataset in [0, n_datasets[variant]) */
} bt_spec_limits;

/*  rollout: sample the group of each prompt. */
typedef struct bt_spec_rollout {
    int64_t seed;            /* [0, 2^53]: the job's key (BT_JOB_SEED_BITS, rollout.h) */
    int64_t n_prompts;       /* tensor prompts (n_prompts) I64 */
    const uint64_t *prompts; /* prompt ids (BT_PROMPT_ID); to_msg: borrowed; from_msg: owned */
} bt_spec_rollout;

/*  train: one GRPO update on a batch with its advantages. */
typedef struct bt_spec_train {
    bool publish;                  /* send WEIGHTS of the new version first */
    int64_t expect_version;        /* the trainer version it applies to; -1: any (field absent) */
    bool freeze_reference;         /* RL's first step: the KL anchor is the policy now */
    bool inject_nan;               /* debug.inject_nan_at_step */
    const bt_rollout_batch *batch; /* the batch's fields and tensors (bt_batch_to_msg); to_msg:
                                      borrowed; from_msg: owned */
    const double *adv; /* tensor adv (batch->n) F64; to_msg: borrowed; from_msg: owned */
} bt_spec_train;

/*  sft: one supervised step on training-stream examples start .. start + count - 1. */
typedef struct bt_spec_sft {
    bool publish;
    int64_t expect_version; /* -1: any */
    int64_t start;          /* [0, 2^53] */
    int64_t count;          /* [1, BT_CONFIG_TOKENS_MAX] */
} bt_spec_sft;

/*  eval: one shard (examples start .. start + count - 1) of one eval.datasets entry. */
typedef struct bt_spec_eval {
    int64_t dataset; /* [0, n_datasets of the variant) */
    int64_t start;   /* [0, 2^53] */
    int64_t count;   /* [0, 2^53] */
    int64_t seed;    /* [0, 2^53] */
    bool robustness; /* also the perturbed prompts (the dataset's setting, off for SFT's check) */
} bt_spec_eval;

/*  restore: load a trainer state (or build the initial one) as version restore_version. */
typedef struct bt_spec_restore {
    bool initial;            /* the state every trainer starts from: nothing else is read */
    int64_t restore_version; /* [0, 2^53]: the version the loaded weights get */
    int64_t adam_steps;      /* [0, 2^53]: AdamW's step count of the state */
    const bt_msg_t *state;   /* to_msg: borrowed, its tensors (bt_trainer_state_to_msg's) are
                                shared into the TASK; from_msg: NULL (the TASK itself holds them) */
} bt_spec_restore;

/*  snapshot: the trainer's whole state. */
typedef struct bt_spec_snapshot {
    int64_t expect_version; /* -1: any */
} bt_spec_snapshot;

/*  group: join a (re-)formed data-parallel trainer group. */
typedef struct bt_spec_group {
    int64_t rank;       /* [0, world) */
    int64_t world;      /* [1, 65536] */
    int64_t store_port; /* [1, 65535]: the controller's c10d store */
    char prefix[32];    /* the formation's store prefix, "gN" */
} bt_spec_group;

/*  One TASK: fields task, kind, variant, version, hyper.*, then the kind's own. */
typedef struct bt_spec_task {
    int64_t task; /* [0, 2^53]: the id its RESULT or FAIL names */
    bt_job_kind kind;
    int64_t variant; /* [0, n_variants): which policy; absent reads as 0 */
    int64_t version; /* [0, 2^53]: the policy version it runs at (eval: the pinned one) */
    bt_hyper hyper;
    union {
        bt_spec_rollout rollout;
        bt_spec_train train;
        bt_spec_sft sft;
        bt_spec_eval eval;
        bt_spec_restore restore;
        bt_spec_snapshot snapshot;
        bt_spec_group group;
    } u;
} bt_spec_task;

/*  Writes t into m (a TASK).  BT_EINVAL when a field is out of its range (named), BT_ENOMEM. */
bt_status bt_spec_task_to_msg(const bt_spec_task *t, bt_msg_t *m);
/*  Reads m, checking every field of its kind against the rules above and lim; BT_EFORMAT naming
    the first field out of range or missing, e.g.
    TASK: field 'hyper.kl_coef': expected a number in [0, 1000000], got -1
    Fills *out (release with bt_spec_task_release), empty on error.  Pointers into m are not kept:
    what out holds is its own. */
bt_status bt_spec_task_from_msg(const bt_msg_t *m, const bt_spec_limits *lim, bt_spec_task *out);
/*  Frees what a from_msg filled in; NULL-safe, idempotent.  Not for a struct built for to_msg. */
void bt_spec_task_release(bt_spec_task *t);

/*  What a worker has used, as each of its RESULTs reports it (fields usage.*, every one optional;
    docs/protocol.md, "TASK and RESULT fields per kind"): running totals since the worker started,
    and levels at the RESULT.  NaN: not reported (an older worker; the CUDA figures on the CPU). */
typedef struct bt_usage {
    double cpu_s;       /* CPU seconds so far: its process's CPU clock, or, for a worker that
                           shares the controller's process (inproc://), its own threads' */
    double weights_s;   /* seconds so far spent exporting and sending (trainer) or loading
                           (rollout, eval) WEIGHTS */
    double peak_rss_mb; /* its process's peak resident memory (VmHWM), MiB */
    double cuda_allocated_mb, cuda_reserved_mb; /* its device's caching allocator now, MiB */
} bt_usage;

/*  Every figure NaN: nothing reported. */
void bt_usage_init(bt_usage *u);
/*  Writes u's finite figures into m as usage.cpu_s, usage.weights_s, usage.peak_rss_mb,
    usage.cuda_allocated_mb, usage.cuda_reserved_mb.  BT_ENOMEM. */
bt_status bt_usage_to_msg(const bt_usage *u, bt_msg_t *m);
/*  Reads the usage.* fields of m; an absent one is NaN.  BT_EFORMAT naming a field that is not a
    number in [0, 1e12]. */
bt_status bt_usage_from_msg(const bt_msg_t *m, bt_usage *out);

/*  One RESULT: fields task and compute_s, trainer_version for the trainer's kinds, the worker's
    usage, then the kind's own (docs/protocol.md). */
typedef struct bt_spec_result {
    int64_t task;            /* [0, 2^53] */
    bt_job_kind kind;        /* not on the wire: the job it answers says */
    double compute_s;        /* >= 0: the worker's compute time for it */
    int64_t trainer_version; /* train, sft, restore, snapshot, group: [0, 2^53], the version the
                                trainer holds now */
    bt_rollout_batch batch;  /* rollout: its completions (bt_batch_to_msg) */
    bt_trainer_stats stats;  /* train: every statistic (bt_trainer_stats_to_msg); sft: the same
                                fields, of which the controller needs stats.loss */
    bt_evaluator_sums sums;  /* eval (bt_sums_to_msg) */
    double canary_loss;      /* snapshot, restore: [0, 1e300], the fixed batch's SFT loss */
    bt_usage usage;          /* any kind: what the worker has used so far */
} bt_spec_result;

/*  An empty result of kind (batch initialised, trainer_version -1). */
void bt_spec_result_init(bt_spec_result *r, bt_job_kind kind);
void bt_spec_result_release(bt_spec_result *r);
/*  Writes r's fields for its kind into m (a RESULT); the snapshot's state tensors are added by
    the trainer (bt_trainer_state_to_msg).  BT_ENOMEM, BT_EINVAL. */
bt_status bt_spec_result_to_msg(const bt_spec_result *r, bt_msg_t *m);
/*  Reads a RESULT of a job of kind: every field the schedule reads later, in range, so a
    malformed one is refused at the door.  BT_EFORMAT naming the field.  Fills *out (release it). */
bt_status bt_spec_result_from_msg(const bt_msg_t *m, bt_job_kind kind, bt_spec_result *out);

#ifdef __cplusplus
}
#endif
#endif
