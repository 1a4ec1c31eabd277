/*  plan.h — the memory planner: the bytes each role of a run holds on its device (weights,
    gradients, optimizer state, KV cache, activations), computed from the config and the model's
    shape alone (no weights loaded), whether the run fits, and the largest grpo.micro_batch that
    does.  `baton plan` prints it; the trainer resolves grpo.micro_batch "auto" with it.
    Threading: pure functions on caller-owned values; any thread.  Lifetime: a bt_plan is a value
    with no heap parts.

    What it counts (docs/architecture.md, "Memory planner", has the reasons and the measured
    error): float32 master weights, float32 gradients, AdamW's two float32 moments, divided across
    the trainer ranks as workers.shard says; the tensors one micro-batch's forward pass keeps until
    its backward (every op's output lives in the pass's context until the micro-batch ends, plus
    what autograd saves inside an op), the largest transient of the backward pass; the frozen
    reference when grpo.kl_coef > 0; the decode slots of the KV cache of a rollout and an eval
    worker.  What it ignores: libtorch's code and arenas, the allocator's rounding and
    fragmentation, host-side buffers (batches, messages), the communication buffers of c10d. */
#ifndef BATON_PLAN_H
#define BATON_PLAN_H

#include "baton/config.h"
#include "baton/model.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  What the config does not say. */
typedef struct bt_plan_input {
    int64_t gpus;        /* devices of the run; 0: one per worker */
    double device_bytes; /* memory of one device; 0: unknown (fits and the largest micro-batch are
                            not judged) */
    int64_t prompt_len;  /* longest prompt in tokens; 0: the task's bound (bt_plan_prompt_bound) */
    int64_t micro_batch; /* grpo.micro_batch to plan for; 0: the config's ("auto": the largest
                            that fits, 1 when not judged) */
} bt_plan_input;

/*  One worker's bytes on its device. */
typedef struct bt_plan_role {
    double weights;     /* float32 parameters (the rank's share under workers.shard parameters, plus
                           one layer gathered), and the bf16 casts autocast caches */
    double grads;       /* float32 gradients, and the rank's shard buffer */
    double moments;     /* AdamW's exp_avg and exp_avg_sq, the rank's share */
    double reference;   /* the frozen KL reference (grpo.kl_coef > 0) */
    double kv_cache;    /* decode slots (slots, Hkv, max_len, D) per layer, k and v, and the shared
                           prompts' prefix store */
    double activations; /* trainer: one micro-batch's forward tensors and the backward's largest
                           transient; rollout and eval: one decode step's logits */
    double total;
} bt_plan_role;

typedef struct bt_plan {
    int64_t params;          /* parameter elements of the model */
    int64_t prompt_len;      /* the prompt bound used */
    int64_t micro_batch;     /* the micro-batch planned */
    int64_t rows, width;     /* the trainer's largest micro-batch: rows of width tokens */
    int64_t ranks;           /* data-parallel trainer ranks (workers.trainer) */
    bt_plan_role trainer;    /* one rank */
    bt_plan_role rollout;    /* one rollout worker */
    bt_plan_role eval;       /* one eval worker */
    double device_peak;      /* the most one device holds: the largest workers that share it */
    double trainer_device;   /* what a trainer rank's device holds: the rank's total when every
                                worker has a device of its own, else device_peak */
    bool judged;             /* device_bytes was given */
    bool fits;               /* judged and device_peak <= device_bytes */
    int64_t max_micro_batch; /* the largest grpo.micro_batch whose trainer_device fits; 0:
                                none; -1: not judged */
} bt_plan;

/*  The longest prompt, in tokens, the config allows: for the arithmetic task BOS + the two
    operands of task.digits digits, the operator and "=", plus the chat template and system prompt
    counted a token per byte (the byte tokenizer's bound); for a JSONL task, no bound is known:
    max_position_embeddings - grpo.max_new_tokens. */
int64_t bt_plan_prompt_bound(const bt_config *cfg, const bt_model_config *model);

/*  The plan of cfg for model (the config's model.* keys, or model.path's config.json).  BT_EINVAL
    with the reason in err for sizes that make no plan. */
bt_status bt_plan_make(const bt_config *cfg, const bt_model_config *model, const bt_plan_input *in,
                       bt_plan *out, char *err, size_t len);

/*  The trainer's bytes for one micro-batch shape, as bt_plan_make counts them: what the trainer
    and tests compare with measured peaks. */
double bt_plan_trainer_activations(const bt_config *cfg, const bt_model_config *model, int64_t rows,
                                   int64_t width);

#ifdef __cplusplus
}
#endif

#endif
