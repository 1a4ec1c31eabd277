/*  config.h — the run config: JSON parsed, checked and resolved into a plain struct before anything
    starts, plus the typed sub-configs the other modules take.  docs/config.md documents every key.
    Threading: plain functions on caller-owned values; any thread.  Lifetime: a bt_config is a
    value with no heap parts: copy it, keep it, drop it; nothing to release. */
#ifndef BATON_CONFIG_H
#define BATON_CONFIG_H

#include "baton/grpo.h"
#include "baton/model.h"
#include "baton/security.h"
#include "baton/source.h"
#include "baton/status.h"
#include "baton/tensor.h"
#include "baton/trigger.h"
#include "baton/tuner.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  Values appear in configs: append only. */
typedef enum bt_config_task_kind {
    BT_CONFIG_TASK_ARITHMETIC = 0, /* "arithmetic" */
    BT_CONFIG_TASK_JSONL = 1       /* "jsonl" */
} bt_config_task_kind;

/*  task.env: what answers the policy between the turns of an episode.  Values appear in configs:
    append only. */
typedef enum bt_config_env {
    BT_CONFIG_ENV_NONE = 0,       /* "": none (single-turn) */
    BT_CONFIG_ENV_CALCULATOR = 1, /* "calculator": the built-in <calc> tool (tools.h) */
    BT_CONFIG_ENV_PYTHON = 2,     /* "python": the built-in <python> tool */
    BT_CONFIG_ENV_TOOLS = 3,      /* "tools": both built-in tools */
    BT_CONFIG_ENV_SERVICE = 4     /* "service": an environment service at task.env_service */
} bt_config_env;

/*  The bounds of the episode keys.  They equal BT_MAX_TURNS (messages.h) and
    BT_EPISODE_TEMPLATE_MAX (episodes.h), headers of the floors above this one, which cannot be
    included here; workers/worker.c asserts both at compile time. */
#define BT_CONFIG_MAX_TURNS 64     /* task.max_turns */
#define BT_CONFIG_TEMPLATE_MAX 512 /* task.observation_template, bytes with the NUL */

typedef enum bt_config_phase { BT_CONFIG_PHASE_SFT = 0, BT_CONFIG_PHASE_GRPO = 1 } bt_config_phase;

/*  run.precision.  Values appear in configs: append only. */
typedef enum bt_config_precision {
    BT_CONFIG_PRECISION_FLOAT32 = 0, /* "float32" */
    BT_CONFIG_PRECISION_BF16 = 1     /* "bf16": forward passes under autocast to bfloat16 */
} bt_config_precision;

/*  model.save_dtype: the dtype of the model files a run writes (policy folders, the checkpoints'
    model.safetensors).  Values appear in configs: append only. */
typedef enum bt_config_save_dtype {
    BT_CONFIG_SAVE_DTYPE_AUTO = 0,    /* "auto": the dtype model.path's weights are stored in */
    BT_CONFIG_SAVE_DTYPE_FLOAT32 = 1, /* "float32" */
    BT_CONFIG_SAVE_DTYPE_BF16 = 2,    /* "bf16" */
    BT_CONFIG_SAVE_DTYPE_FLOAT16 = 3  /* "float16" */
} bt_config_save_dtype;

#define BT_CONFIG_NAME_MAX 64   /* run.name, run.device: bytes including the NUL */
#define BT_CONFIG_LISTEN_MAX 128 /* run.metrics_listen: bytes including the NUL */
#define BT_CONFIG_PATH_MAX 1024 /* model.path, task.train/eval, reward.service: with the NUL */
#define BT_CONFIG_MAX_VARIANTS 8
#define BT_CONFIG_MAX_VARIANT_SETS 16
#define BT_CONFIG_SET_MAX 256              /* one "key.path=value" of a variant, with the NUL */
#define BT_CONFIG_VARIANT_SOURCES_MAX 2048 /* a variant's data.sources, compact JSON + NUL */

#define BT_CONFIG_MAX_SOURCES 8 /* data.sources entries (= BT_TUNER_MAX_SOURCES) */

/*  The ranges of the values that travel in a TASK, as the config checks them and a worker reading
    the TASK may: learning rates (grpo.lr, sft.lr, the tuner's) in [0, BT_CONFIG_LR_MAX], the KL
    coefficient in [0, BT_CONFIG_KL_MAX], sampling temperatures in [BT_CONFIG_TEMPERATURE_MIN,
    BT_CONFIG_TEMPERATURE_MAX] (evaluation: also 0, greedy), max_new_tokens and batch sizes up to
    BT_CONFIG_TOKENS_MAX.  Below the minimum temperature, logits / T leave float32 little room. */
#define BT_CONFIG_LR_MAX 1e3
#define BT_CONFIG_KL_MAX 1e6
#define BT_CONFIG_TEMPERATURE_MIN 1e-3
#define BT_CONFIG_TEMPERATURE_MAX 1e3
#define BT_CONFIG_TOKENS_MAX 1048576 /* 2^20 */
#define BT_CONFIG_CLIP_MAX 1e3       /* grpo.clip_low, grpo.clip_high */

/* ---- evaluation datasets and probes (eval.datasets, eval.probes) ---------------------------- */
#define BT_EVALUATOR_MAX_SAMPLES                                                                   \
    128 /* completions per example (eval.samples); the evaluator's                                 \
           sums hold a histogram of this size */
/*  Probes one evaluation scores: eval.probes, then the lines of eval.probes_source.  256 pair
    probes make an eval line of about 70 KB (four metrics each, BT_JSONL_MAX) and 1024+ named
    metrics: past a few hundred, a set is a benchmark to score as a whole (a "choices" or
    "perplexity" dataset), not probes each watched on its own. */
#define BT_EVAL_MAX_PROBES 256
#define BT_EVAL_CONFIG_PROBES 16 /* eval.probes entries in the config itself; more go in a file */
#define BT_EVAL_PROBE_MAX 256    /* bytes of a probe text, with the NUL */

/*  What a dataset measures.  Values appear in configs: append only. */
typedef enum bt_eval_kind {
    BT_EVAL_GENERATE = 0,   /* "generate": sample completions and score them with the verifier */
    BT_EVAL_PERPLEXITY = 1, /* "perplexity": NLL of held-out text under the policy */
    BT_EVAL_PROBES = 2,     /* "probes": eval.probes and eval.probes_source (bt_config_probes) */
    BT_EVAL_CHOICES = 3     /* "choices": multiple choice by log-likelihood (choices.h) */
} bt_eval_kind;

/*  One probability probe: a target probe (prompt, target) tracks log P(target | prompt); a pair
    (better, worse) tracks whether PPL(better) < PPL(worse).  Exactly one of the two forms is set.
 */
typedef struct bt_eval_probe {
    char name[32];
    char prompt[BT_EVAL_PROBE_MAX], target[BT_EVAL_PROBE_MAX];
    char better[BT_EVAL_PROBE_MAX], worse[BT_EVAL_PROBE_MAX];
} bt_eval_probe;

#define BT_EVAL_MAX_DATASETS 8  /* eval.datasets entries */
#define BT_EVAL_NAME_MAX 32     /* eval.datasets[i].name, eval.probes[i].name, with the NUL */
#define BT_EVAL_SOURCE_MAX 1024 /* eval.datasets[i].source, with the NUL */

/*  One entry of eval.datasets (docs/config.md, "Evaluation datasets").  After bt_config_parse every
    field is resolved (config.h): unset fields take the flat eval.* key of the same name. */
typedef struct bt_eval_dataset {
    char name[BT_EVAL_NAME_MAX];
    bt_eval_kind kind;
    char source[BT_EVAL_SOURCE_MAX]; /* "": the task's held-out set; a data.sources name: that
                                        source's; else a JSONL file */
    int64_t count;                   /* examples, texts or probes evaluated; 0: all */
    int64_t samples;                 /* completions per example (generate) */
    double temperature;              /* 0: greedy */
    int64_t max_new_tokens;
    int64_t stride;      /* perplexity: tokens each rolling window after the first scores; 0: the
                            context length (disjoint windows) */
    int64_t num_fewshot; /* generate, choices: exemplars before each prompt; 0: none */
    char fewshot_source[BT_EVAL_SOURCE_MAX]; /* their JSONL file; "": the dataset's other items */
    char fewshot_separator[32];              /* between exemplars ("\n\n") */
    char fewshot_delimiter[32];              /* between an exemplar's prompt and answer (" ") */
    bool choices_letters; /* choices: the context lists the choices, the answers are letters */
    bool shuffle_choices; /* choices: also scored in a seeded random order */
    bool robustness;      /* generate: also the task's perturbed prompts */
    int verifier; /* generate with a JSONL source: 0 ("task") scores it by task.verifier, else by
                     bt_source_verifier verifier - 1, locally (never by a reward service) */
    int64_t every_steps, every_epochs; /* 0: off */
    double every_seconds;              /* 0: off */
    double every_tokens;               /* completion tokens sampled for training; 0: off */
    int data_source; /* resolved, not a key: the data.sources entry `source` names (its held-out
                        set, scored by its verifier); -1: none */
} bt_eval_dataset;

/*  One entry of data.sources: a prompt source drawn by weight, its task the task.* keys with the
    entry's own ("kind", "path", "heldout", "verifier", ...) stored as "task.key=value". */
typedef struct bt_config_source_spec {
    char name[BT_CONFIG_NAME_MAX];
    double weight; /* > 0; draws are proportional to it */
    int n_sets;
    char sets[BT_CONFIG_MAX_VARIANT_SETS][BT_CONFIG_SET_MAX];
} bt_config_source_spec;

/*  One entry of the top-level `variants` array: a policy trained beside the others, its config the
    base's with its own overrides. */
typedef struct bt_config_variant_spec {
    char name[BT_CONFIG_NAME_MAX];
    int n_sets;
    char sets[BT_CONFIG_MAX_VARIANT_SETS][BT_CONFIG_SET_MAX]; /* "key.path=value", as --set takes */
    char sources[BT_CONFIG_VARIANT_SOURCES_MAX]; /* its data.sources as compact JSON (an array,
                                                    applied before sets); "": the base's */
} bt_config_variant_spec;

/*  One field per key, under the key's name (docs/config.md has types, defaults and ranges).
    After bt_config_parse succeeds every value is in range and resolved: grpo.max_tokens,
    eval.max_new_tokens and model.num_key_value_heads are never 0. */
/*  The hyperparameters population-based training may explore (pbt.explore), in the order a
    round draws them. */
typedef enum bt_pbt_key {
    BT_PBT_LR = 0,
    BT_PBT_KL_COEF = 1,
    BT_PBT_TEMPERATURE = 2,
    BT_PBT_CLIP_HIGH = 3,
    BT_PBT_KEY_COUNT
} bt_pbt_key;

/*  "grpo.lr", "grpo.kl_coef", "grpo.temperature", "grpo.clip_high". */
const char *bt_pbt_key_name(bt_pbt_key key);

typedef struct bt_config {
    struct {
        char name[BT_CONFIG_NAME_MAX];
        int64_t seed;
        int64_t threads; /* 0: libtorch's default */
        char device[BT_CONFIG_NAME_MAX];
        bt_config_precision precision;
        int64_t log_every;
        char metrics_listen[BT_CONFIG_LISTEN_MAX]; /* the Prometheus endpoint; "": none */
        bool tensorboard; /* TensorBoard event files under RUN_DIR/tb/ */
    } run;
    bt_model_config model; /* the model.* keys but model.path */
    char model_path[BT_CONFIG_PATH_MAX];
    bt_config_save_dtype save_dtype; /* model.save_dtype */
    bt_lora_config lora; /* model.lora.*: rank 0 (off), alpha 8, dropout 0, every target */
    struct {
        bt_config_task_kind kind;
        int64_t seed;
        int64_t digits;
        char operators[8];
        int64_t heldout_size;
        double format_reward;
        char train[BT_CONFIG_PATH_MAX];
        char chat_template[512]; /* "" none; "chatml", "llama3", or a text with {prompt} */
        char system_prompt[1024];
        char eval[BT_CONFIG_PATH_MAX];
        bt_source_verifier verifier;
        int64_t epoch_size;
        double code_timeout_s; /* the code verifier's limits per program */
        int64_t code_memory_mb;
        char demonstration_key[128]; /* "": SFT demonstrates the answer; else a JSONL key
                                        (bt_source_jsonl_config.demonstration_key) */
        /* multi-turn episodes (docs/config.md, "Multi-turn episodes"; bt_config_episode) */
        int64_t max_turns;          /* model turns per episode, [1, BT_CONFIG_MAX_TURNS] */
        int64_t max_episode_tokens; /* an episode's completion width (model and observation
                                       tokens); resolved: 0 becomes 2 x max_turns x
                                       grpo.max_new_tokens (with data.sources, per source) */
        bt_config_env env;          /* what answers between the turns */
        char env_service[BT_CONFIG_PATH_MAX]; /* env "service": its endpoint */
        char env_server_key[BT_KEY_LEN + 1];  /* "" or the service's CURVE public key (Z85) */
        bool env_insecure;                    /* a plain tcp:// env_service */
        int64_t env_timeout_ms;
        int64_t env_retries;
        int env_reward; /* bt_episode_reward (episodes.h): 0 "sum", 1 "final", 2 "env" */
        bool turn_rewards;
        int64_t interleave; /* decode steps from a turn's end to its answer's use; 0: synchronous */
        char observation_template[BT_CONFIG_TEMPLATE_MAX]; /* "" or a text with {observation} */
    } task;
    struct {
        char service[BT_CONFIG_PATH_MAX]; /* "": the task's verifier */
        int64_t timeout_ms;
        int64_t retries;
    } reward;
    struct {
        int64_t steps;
        int64_t batch_size;
        double lr;
        int64_t warmup_steps;
        int64_t eval_every;
        double stop_accuracy;
    } sft;
    struct {
        int64_t steps;
        int64_t group_size;
        int64_t prompts_per_step;
        double temperature;
        int64_t top_k;
        double top_p;
        int64_t max_new_tokens;
        double clip_low;
        double clip_high;
        double kl_coef;
        bt_kl_estimator kl_estimator;
        double entropy_coef;
        bt_loss_agg loss_agg;
        bt_adv_norm adv_norm;
        int64_t max_tokens;
        double lr;
        bt_lr_kind lr_schedule;
        int64_t warmup_steps;
        double min_lr;
        int64_t decay_steps;
        double weight_decay;
        double beta1;
        double beta2;
        double max_grad_norm;
        int64_t micro_batch;
        bt_batching batching; /* how sequences share micro-batches (pad, bucket, pack) */
        int64_t pack_tokens;  /* "pack": token slots per micro-batch; 0: micro_batch rows */
        bool share_prefix;    /* a group's prompt computed once per pass (bt_trainer_config) */
        int activation_checkpointing; /* 0 "none"; 1 "layer": each decoder layer recomputed in
                                         backward (bt_model_set_activation_checkpointing) */
        bool dynamic_sampling;
        int64_t max_staleness;   /* 0: synchronous; eta > 0: rollouts run up to eta steps ahead */
        int async_objective;     /* 0 "ppo": clip pi_theta / pi_behav; 1 "decoupled" (AReaL) */
        double behav_weight_cap; /* asynchronous: the decoupled objective's importance cap */
        double tis_cap;          /* truncated importance sampling cap (grpo.h); 0: off */
        double turn_gamma; /* per-turn advantages: the discount of later turns' rewards (grpo.h) */
    } grpo;
    struct {
        int64_t every_steps;
        int64_t every_epochs;
        double every_seconds;
        double every_tokens;
        int64_t heldout_count;
        int64_t samples;
        double temperature;
        int64_t max_new_tokens;
        bool adaptive;
        int64_t adaptive_floor;
        int64_t adaptive_ceiling;
        double adaptive_fast;
        double adaptive_plateau;
        double adaptive_drop;
        double adaptive_ema;
        int n_datasets; /* >= 1 after parsing */
        bt_eval_dataset datasets[BT_EVAL_MAX_DATASETS];
        int n_probes;
        bt_eval_probe probes[BT_EVAL_CONFIG_PROBES];
        char probes_source[BT_CONFIG_PATH_MAX]; /* JSONL of more probes, after these; "": none */
    } eval;
    struct { /* the tuner.* keys; lr_plateau.dataset "" resolves to eval.datasets[0]'s name */
        bt_tuner_kl_config kl;
        bt_tuner_lr_kl_config lr_kl;
        bt_tuner_plateau_config lr_plateau;
        bt_tuner_temperature_config temperature;
        bt_tuner_mixture_config mixture;
    } tuner;
    struct { /* the data.* keys: prompt sources and their mixture */
        char epoch_source[BT_CONFIG_NAME_MAX]; /* whose epochs count; "": the first source */
        struct {
            int64_t window;   /* skip a prompt whose last `window` groups were all solved (or
                                 all failed); 0: off */
            bool skip_solved; /* skip the always-solved */
            bool skip_failed; /* skip the always-failed */
        } curriculum;
        int n_sources; /* 0: one source, the task.* keys */
        bt_config_source_spec sources[BT_CONFIG_MAX_SOURCES];
    } data;
    struct {
        int64_t rollout;
        int64_t trainer;
        int64_t eval;
        int64_t heartbeat_ms;
        int64_t expiry_ms;
        int64_t collective_timeout_ms;
        bt_shard shard;                /* workers.shard (grpo.h) */
        int64_t standby_trainers;      /* trainers started beyond workers.trainer, idle until one
                                          is lost; then one takes over from the snapshot */
        int64_t controller_timeout_ms; /* a worker leaves when its controller is silent this long */
        int64_t deadline_floor_ms;     /* a job's deadline: deadline_factor x the longest */
        int64_t deadline_factor;       /* measured job of its kind, that at least floor_ms */
        int64_t join_timeout_s;        /* a run fails when a role it waits for has had no live
                                          worker this long (at start and after losing them) */
    } workers;
    struct {
        int64_t light_every_steps;
        int64_t full_every_steps;
        double full_every_secs;
        int64_t full_every_epochs; /* at the end of every N-th epoch of the epoch source */
        int64_t keep_last;
        int64_t keep_every;
        char mirror_dir[BT_CONFIG_PATH_MAX];
        double spike_factor;
    } checkpoint;
    struct { /* scaling-law prediction of the held-out loss (eval/scaling.c) */
        bool enabled;
        char dataset[BT_CONFIG_NAME_MAX]; /* a perplexity dataset; "" resolves to the first */
        int64_t min_points;               /* evaluations before the first fit */
        double stop_margin;               /* variants: stop one predicted worse than the best by
                                             more than this, relative; 0: never */
    } scaling;
    struct { /* population-based training over the variants (Jaderberg et al. 2017) */
        bool enabled;
        int64_t ready_steps;         /* steps between rankings */
        int metric;                  /* 0 "accuracy": the latest held-out accuracy; 1 "reward" */
        double quantile;             /* the bottom (and top) fraction of the variants */
        double resample_probability; /* explore by a fresh draw instead of x0.8 / x1.2 */
        double lr_min, lr_max;       /* the learning rate's range (draws: log-uniform) */
        char explore[BT_CONFIG_NAME_MAX];        /* the keys explored: "grpo.lr,grpo.kl_coef,..." */
        int explore_mask;                        /* 1 << bt_pbt_key of each (resolved) */
        double kl_coef_min, kl_coef_max;         /* log-uniform draws */
        double temperature_min, temperature_max; /* uniform draws */
        double clip_high_min, clip_high_max;     /* uniform draws */
    } pbt;
    struct {
        int64_t inject_nan_at_step;
        int64_t save_pause_ms;
        int64_t kill_rollout_at_task;
        bool log_prompts;
    } debug;
    int n_variants; /* 0: no variants: one policy, named "main" */
    bt_config_variant_spec variants[BT_CONFIG_MAX_VARIANTS];
} bt_config;

/*  Data sources: data.n_sources, or 1 (the task.* keys) without data.sources. */
int bt_config_n_sources(const bt_config *cfg);
/*  Source k's config: cfg with the source's task keys applied (k 0 without data.sources is cfg).
    Errors name "data.sources[k].KEY". */
bt_status bt_config_source(const bt_config *cfg, int k, bt_config *out);
/*  The widest completion any source's rollouts give, in tokens after the prompt:
    grpo.max_new_tokens, or task.max_episode_tokens for a source with an environment (an episode's
    model and observation tokens).  What grpo.max_tokens 0 resolves to and the memory plan sizes. */
int64_t bt_config_completion_width(const bt_config *cfg);
/*  Source k's name: data.sources[k].name, or "task" without data.sources. */
const char *bt_config_source_name(const bt_config *cfg, int k);
/*  The index of the source whose epochs count (data.epoch_source). */
int bt_config_epoch_source(const bt_config *cfg);

/*  Every key at its default (unresolved: grpo.max_tokens, eval.max_new_tokens and
    model.num_key_value_heads are 0). */
void bt_config_init(bt_config *cfg);

/*  Parses text (source names it in messages, e.g. a file name): YAML when source ends in ".yaml"
    or ".yml" (yaml.h: the same keys, as the JSON they map to), else JSON; then applies overrides
    in order, then checks the keys against each other and resolves the 0 = "follow another key"
    values.  An override is "key.path=value" as given to `--set`: the value is parsed as JSON, or
    taken as a plain string when it is not valid JSON; string keys always take the text as it is
    (quotes optional).  An array key (eval.datasets, eval.probes, data.sources, variants) takes a
    JSON array that replaces it whole, a section ("grpo", "tuner.kl") a JSON object of its keys.
    Errors are one line, BT_EFORMAT for JSON or YAML syntax and BT_EINVAL otherwise; a YAML
    file's name the line of the key (or of the nearest node above a missing one):
      "arith.json: grpo.group_size: expected an integer >= 2, got 1"
      "arith.yaml:12: grpo.group_size: expected an integer >= 2, got 1"
      "arith.json: grpo.gropu_size: unknown key (did you mean grpo.group_size?)"
      "arith.json:3:14: invalid JSON"
      "--set grpo.stepz=50: unknown key (did you mean grpo.steps?)"
      "--set: eval.datasets[0].knd: unknown key"
    On error *out holds partial values: do not use it. */
bt_status bt_config_parse(const char *text, const char *source, const char *const *overrides,
                          int n_overrides, bt_config *out);
/*  bt_config_parse of the file at path, with path as the source.  Also BT_EIO when it cannot be
    read, BT_EFORMAT when it holds a NUL byte or more than 1 MiB. */
bt_status bt_config_load(const char *path, const char *const *overrides, int n_overrides,
                         bt_config *out);

/*  The files a parsed config names exist, checked before anything is created: model.path is a
    folder with config.json and model.safetensors (or its index), the JSONL files of a "jsonl" task
    or data source (task.train, task.eval, data.sources[k].path and .heldout) and each eval
    dataset's source file are readable regular files; with model.path, prompt and completion fit
    its config.json's max_position_embeddings (as bt_config_parse checks model.* without it).  No
    dataset is read, but eval.probes_source is (bt_config_probes), so that a bad line stops the
    run before it starts.  BT_EINVAL naming the key and the path, source first:
      "arith.json: task.train: "data/train.jsonl": no such file" */
bt_status bt_config_check_files(const bt_config *cfg, const char *source);

/*  The probes a probes dataset evaluates: eval.probes, then one per non-blank line of the JSONL
    file eval.probes_source, each an object of the eval.probes keys: {"name", "prompt", "target"}
    or {"name", "better", "worse"} ("name" defaults to "p<index in the whole list>").  Names are
    unique across both.  BT_EIO when the file cannot be read; BT_EINVAL "PATH:LINE: ..." for a
    line that is not such an object, a name used before (saying where) or the probe past
    BT_EVAL_MAX_PROBES, and "PATH: no probes" for a file without any.  Caller owns *out (NULL
    when there are none): free() it. */
bt_status bt_config_probes(const bt_config *cfg, bt_eval_probe **out, int64_t *n);

/*  Variant k's config (0 <= k < base->n_variants): base with variant k's sets applied in order (as
    --set overrides, over the base's own) and the checks between keys run again; n_variants and
    variants are copied unchanged.  Values the base already resolved stay resolved (grpo.max_tokens,
    the eval lengths, the datasets).  A parsed config does not keep its source, so messages start
    with the variant: "variants[1].set.grpo.lr: expected a number >= 0, got -1",
    "variants[1]: grpo: lr schedule: ..."; bt_config_parse has already run this for every variant
    and prefixed its source to any error, so on a parsed base it does not fail.  On error *out holds
    partial values: do not use it.  A variant that sets data.sources replaces the base's sources
    with its own (applied first); the datasets stay the base's, and one that names a base source
    evaluates the variant's source of that name, which it must have. */
bt_status bt_config_variant(const bt_config *base, int k, bt_config *out);

/*  Whether two configs' SFT warm starts give the same trainer state and metrics (docs/config.md,
    "variants"): both run SFT (sft.steps > 0) and agree on every key it depends on (sft.*,
    model.*, run.seed, run.precision, the AdamW and batching keys of the trainer, whether it keeps
    a KL reference, the eval.* keys) and on what the demonstrations, the canary and the early-stop
    evaluation read: the first source's task and the first generate dataset with its source. */
bool bt_config_same_warm_start(const bt_config *a, const bt_config *b);

/*  The resolved config: every key with its value, pretty-printed JSON that parses back to the same
    struct.  Caller owns the result; free() it.  NULL when out of memory. */
char *bt_config_to_json(const bt_config *cfg);

/*  The keys whose values differ between a and b, in the table's order: their paths (static strings)
    into keys[0 .. max), each array as a whole ("eval.datasets", "eval.probes", "data.sources",
    "variants").  Returns how many differ, which may exceed max. */
int bt_config_diff(const bt_config *a, const bt_config *b, const char **keys, int max);
/*  The value of key path as the resolved config writes it ("16", "\"cosine\"", "true") into buf,
    also of a key of an eval dataset ("eval.datasets[1].kind"); false for a path that is not one
    key (an array, a dataset past eval.n_datasets) or out of memory. */
bool bt_config_value_text(const bt_config *cfg, const char *path, char *buf, size_t len);

/*  The schema's key paths in order ("run.name", "run.seed", ...); NULL when i is out of range.
    Static strings. */
const char *bt_config_key(int i);

/*  Typed sub-configs of a parsed config.  String fields are borrowed: valid while cfg lives. */
void bt_config_grpo(const bt_config *cfg, bt_grpo_config *out);
struct bt_episode_config;
/*  The episode keys of a one-task config (a source's: bt_config_source): task.max_turns,
    task.max_episode_tokens, task.interleave, task.env_reward, task.turn_rewards,
    task.chat_template and task.observation_template (pointers into cfg's strings).  (A
    bt_config_ function defined in workers/worker.c: bt_episode_config (episodes.h) belongs to a
    floor above the config layer.) */
void bt_config_episode(const bt_config *cfg, struct bt_episode_config *out);
/*  SFT: "warmup" when sft.warmup_steps > 0, else "constant", over sft.steps.  GRPO: the
    grpo.lr_schedule over grpo.steps. */
void bt_config_lr(const bt_config *cfg, bt_config_phase phase, bt_lr_schedule *out);
/*  AdamW of both phases: grpo.beta1, grpo.beta2, grpo.weight_decay, eps 1e-8. */
void bt_config_adamw(const bt_config *cfg, bt_adamw_config *out);
/*  The dtype of the models' forward passes (bt_model_set_precision): BT_F32, or BT_BF16 for
    run.precision "bf16". */
bt_dtype bt_config_precision_dtype(const bt_config *cfg);
/*  The dtype model files are written in (model.save_dtype): BT_F32, BT_BF16 or BT_F16, or for
    "auto" source, the dtype the model's weights were loaded from (bt_model_save_dtype of a freshly
    loaded or built model: BT_F32 without model.path). */
bt_dtype bt_config_resolve_save_dtype(const bt_config *cfg, bt_dtype source);
void bt_config_task_arith(const bt_config *cfg, bt_source_arith_config *out);
/*  heldout_path is NULL when task.eval is empty. */
void bt_config_task_jsonl(const bt_config *cfg, bt_source_jsonl_config *out);
/*  The run's task (arithmetic or JSONL) as the config describes it.  Caller owns *out. */
bt_status bt_config_new_task(const bt_config *cfg, bt_source_t **out);
/*  Data source k's task (bt_config_source, then bt_config_new_task); *epoch_size (may be NULL)
    gets its records per epoch: the source's task.epoch_size, else the task's own (0: none).
    Caller owns *out. */
bt_status bt_config_new_source(const bt_config *cfg, int k, bt_source_t **out,
                               uint64_t *epoch_size);
/*  The seed of shard `shard` of dataset ds evaluated at step, from run.seed. */
uint64_t bt_config_eval_seed(const bt_config *cfg, int ds, int64_t step, int shard);
/*  The tuner's rules (tuner.*) with their start values grpo.kl_coef, grpo.lr, grpo.temperature. */
void bt_config_tuner(const bt_config *cfg, bt_tuner_config *out);
/*  The trigger of dataset i (eval.datasets[i].every_* with the eval.adaptive* keys). */
void bt_config_trigger(const bt_config *cfg, int i, bt_trigger_config *out);

#ifdef __cplusplus
}
#endif
#endif
