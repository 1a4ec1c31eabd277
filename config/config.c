/*  config.c — the run config.  One table of keys drives the defaults, the parser, the range checks
    and the resolved-config writer; cross-field checks reuse the validators of model.h and grpo.h.
    cJSON stays in this file: parse, check, copy into bt_config, delete. */
#include "baton/config.h"

#include "baton/buf.h"
#include "baton/fileio.h"
#include "baton/jsonl.h"
#include "baton/yaml.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum { S_INT, S_NUM, S_BOOL, S_STR, S_ENUM, S_LIST } s_type;
enum { S_LO_OPEN = 1, S_HI_OPEN = 2 };

/*  Integers must be exact in a double, as cJSON holds them: |x| < 2^53. */
#define S_INT_LIMIT 9007199254740992.0

typedef struct s_key {
    const char *path;
    s_type type;
    size_t offset, size; /* the field in bt_config */
    double def;          /* S_INT, S_NUM, S_BOOL, S_ENUM (a value), S_LIST (a mask); NAN: model's */
    const char *def_str; /* S_STR */
    double lo, hi;       /* S_INT, S_NUM: the allowed range */
    int open;            /* S_LO_OPEN, S_HI_OPEN: a bound itself is excluded */
    const char *const *names;     /* S_ENUM (values 0, 1, ...), S_LIST (bits): names; NULL-ended */
    bool (*valid)(const char *s); /* S_STR: what the value must also satisfy, or NULL */
    const char *what;             /* S_STR: valid() in words */
    const char *word;             /* S_INT: a string also taken, stored as 0 ("auto"), or NULL */
} s_key;

static bool s_is_name(const char *s) {
    size_t n = strlen(s);
    return n > 0 && s[0] != '.' &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

static bool s_is_device(const char *s) {
    bt_device device;
    return bt_device_parse(s, &device) == BT_OK;
}

static bool s_is_operators(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        if (!strchr("+-*", s[i]) || strchr(s + i + 1, s[i]))
            return false;
    return n > 0;
}

static const char *const s_pbt_key_names[BT_PBT_KEY_COUNT] = {"grpo.lr", "grpo.kl_coef",
                                                              "grpo.temperature", "grpo.clip_high"};

const char *bt_pbt_key_name(bt_pbt_key key) {
    return key >= 0 && key < BT_PBT_KEY_COUNT ? s_pbt_key_names[key] : "?";
}

/*  pbt.explore's keys as a mask of 1 << bt_pbt_key; -1 when one is unknown, repeated or empty. */
static int s_pbt_mask(const char *s) {
    int mask = 0;
    const char *p = s;
    while (*p) {
        size_t n = strcspn(p, ",");
        int k = 0;
        while (k < BT_PBT_KEY_COUNT &&
               !(strlen(s_pbt_key_names[k]) == n && !strncmp(p, s_pbt_key_names[k], n)))
            k++;
        if (k == BT_PBT_KEY_COUNT || (mask & (1 << k)))
            return -1;
        mask |= 1 << k;
        p += n + (p[n] == ',');
    }
    return mask ? mask : -1;
}

static bool s_is_pbt_keys(const char *s) {
    return s_pbt_mask(s) > 0;
}

/*  "" (no service) or a ZeroMQ endpoint another process can serve: tcp:// or ipc://. */
/*  "" or a JSONL key other than the record's own "prompt" and "answer". */
static bool s_is_demonstration_key(const char *s) {
    return strcmp(s, "prompt") && strcmp(s, "answer");
}

static bool s_is_endpoint(const char *s) {
    return !s[0] || ((!strncmp(s, "tcp://", 6) || !strncmp(s, "ipc://", 6)) && s[6]);
}

/*  "" or a CURVE key as bt_key_is_valid takes it. */
static bool s_is_key_or_empty(const char *s) {
    return !s[0] || bt_key_is_valid(s);
}

/*  "" (off) or "HOST:PORT": a host name or IPv4 address ([A-Za-z0-9.-]), or an IPv6 address in
    brackets ("[::1]:9464"), and a port in 1..65535 written in decimal. */
static bool s_is_listen(const char *s) {
    if (!s[0])
        return true;
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return false;
    size_t host = (size_t)(colon - s);
    bool bracketed = s[0] == '[' && host >= 3 && s[host - 1] == ']' &&
                     strspn(s + 1, "0123456789abcdefABCDEF:.") == host - 2;
    bool named =
        strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == host;
    if (!bracketed && !named)
        return false;
    const char *port = colon + 1;
    size_t digits = strspn(port, "0123456789");
    if (digits == 0 || digits > 5 || port[digits] != '\0')
        return false;
    long n = strtol(port, NULL, 10);
    return n >= 1 && n <= 65535;
}

/*  "" or a name as s_is_name takes it. */
static bool s_is_name_or_empty(const char *s) {
    return !s[0] || s_is_name(s);
}

/*  A metric of an eval line: "accuracy", "pass@8", "probe.sum.logp". */
static bool s_is_metric(const char *s) {
    size_t n = strlen(s);
    return n > 0 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@-") == n;
}

static const char *const s_task_kinds[] = {"arithmetic", "jsonl", NULL};
static const char *const s_verifiers[] = {"exact", "numeric", "math", "code", NULL};
static const char *const s_envs[] = {"", "calculator", "python", "tools", "service", NULL};
static const char *const s_env_rewards[] = {"sum", "final", "env", NULL}; /* bt_episode_reward */
static const char *const s_kl_estimators[] = {"k1", "k3", NULL};
static const char *const s_loss_aggs[] = {"token_mean", "seq_mean", "token_sum_norm", NULL};
static const char *const s_adv_norms[] = {"std", "none", NULL};
static const char *const s_async_objectives[] = {"ppo", "decoupled", NULL};
static const char *const s_batchings[] = {"pad", "bucket", "pack", NULL};
static const char *const s_checkpointings[] = {"none", "layer", NULL};
static const char *const s_shards[] = {"none", "optimizer", "gradients", "parameters", NULL};
static const char *const s_pbt_metrics[] = {"accuracy", "reward", NULL};
static const char *const s_lr_kinds[] = {"constant", "warmup", "cosine", "wsd", NULL};
static const char *const s_tuner_modes[] = {"max", "min", NULL};
static const char *const s_precisions[] = {"float32", "bf16", NULL};
static const char *const s_save_dtypes[] = {"auto", "float32", "bf16", "float16", NULL};
static const char *const s_mixture_metrics[] = {"accuracy", "reward_variance", NULL};

#define S_FIELD(f) .offset = offsetof(bt_config, f), .size = sizeof(((bt_config *)0)->f)
#define S_INT_KEY(p, f, d, l, h)                                                                   \
    { .path = p, .type = S_INT, S_FIELD(f), .def = d, .lo = l, .hi = h }
#define S_NUM_KEY(p, f, d, l, h, o)                                                                \
    { .path = p, .type = S_NUM, S_FIELD(f), .def = d, .lo = l, .hi = h, .open = o }
#define S_BOOL_KEY(p, f, d)                                                                        \
    { .path = p, .type = S_BOOL, S_FIELD(f), .def = d }
#define S_STR_KEY(p, f, d, v, w)                                                                   \
    { .path = p, .type = S_STR, S_FIELD(f), .def_str = d, .valid = v, .what = w }
#define S_ENUM_KEY(p, f, d, n)                                                                     \
    { .path = p, .type = S_ENUM, S_FIELD(f), .def = d, .names = n }
#define S_LIST_KEY(p, f, d, n)                                                                     \
    { .path = p, .type = S_LIST, S_FIELD(f), .def = d, .names = n }
#define S_INF INFINITY

/*  A finite bound for every number: the workers' where they check one (config.h's
    BT_CONFIG_*_MAX), and elsewhere one large enough for any real use, so that no product of two
    keys overflows.  docs/config.md lists the range of every key. */
#define S_LR_MAX BT_CONFIG_LR_MAX
#define S_KL_MAX BT_CONFIG_KL_MAX
#define S_TEMP_MIN BT_CONFIG_TEMPERATURE_MIN
#define S_TEMP_MAX BT_CONFIG_TEMPERATURE_MAX
#define S_TOKENS_MAX BT_CONFIG_TOKENS_MAX
#define S_COEF_MAX BT_CONFIG_CLIP_MAX
#define S_TOKENS_COUNT_MAX 1e15 /* every_tokens: a count a double holds exactly */
#define S_WEIGHT_MAX 1e6
#define S_SECONDS_MAX 1e9 /* about 31 years */

/*  Sections are contiguous and in the order the writer prints them. */
static const s_key s_keys[] = {
    S_STR_KEY("run.name", run.name, "arith", s_is_name,
              "a name of letters, digits, '.', '_' or '-', not starting with '.'"),
    S_INT_KEY("run.seed", run.seed, 0, 0, S_INF),
    S_INT_KEY("run.threads", run.threads, 0, 0, 4096),
    S_STR_KEY("run.device", run.device, "cpu", s_is_device, "\"cpu\", \"cuda\" or \"cuda:N\""),
    S_ENUM_KEY("run.precision", run.precision, BT_CONFIG_PRECISION_FLOAT32, s_precisions),
    S_INT_KEY("run.log_every", run.log_every, 1, 1, S_INF),
    S_STR_KEY("run.metrics_listen", run.metrics_listen, "", s_is_listen,
              "\"\" (off) or \"HOST:PORT\" with a port in 1..65535 (\"127.0.0.1:9464\")"),
    S_BOOL_KEY("run.tensorboard", run.tensorboard, false),

    S_INT_KEY("model.vocab_size", model.vocab_size, NAN, 1, 16777216),
    S_INT_KEY("model.hidden_size", model.hidden_size, NAN, 1, 65536),
    S_INT_KEY("model.intermediate_size", model.intermediate_size, NAN, 1, 262144),
    S_INT_KEY("model.num_hidden_layers", model.num_hidden_layers, NAN, 1, 1024),
    S_INT_KEY("model.num_attention_heads", model.num_attention_heads, NAN, 1, 1024),
    S_INT_KEY("model.num_key_value_heads", model.num_key_value_heads, 0, 1, 1024),
    S_NUM_KEY("model.rms_norm_eps", model.rms_norm_eps, NAN, 0, 1, S_LO_OPEN),
    S_NUM_KEY("model.rope_theta", model.rope_theta, NAN, 0, 1e12, S_LO_OPEN),
    S_INT_KEY("model.max_position_embeddings", model.max_position_embeddings, NAN, 1, S_TOKENS_MAX),
    S_BOOL_KEY("model.tie_word_embeddings", model.tie_word_embeddings, NAN),
    S_INT_KEY("model.bos_token_id", model.bos_token_id, NAN, -1, 16777215),
    S_INT_KEY("model.eos_token_id", model.eos_token_id, NAN, -1, 16777215),
    S_INT_KEY("model.pad_token_id", model.pad_token_id, NAN, -1, 16777215),
    S_STR_KEY("model.path", model_path, "", NULL, NULL),
    S_ENUM_KEY("model.save_dtype", save_dtype, BT_CONFIG_SAVE_DTYPE_AUTO, s_save_dtypes),
    S_INT_KEY("model.lora.rank", lora.rank, 0, 0, 65536),
    S_NUM_KEY("model.lora.alpha", lora.alpha, 8, 0, 1e6, S_LO_OPEN),
    S_NUM_KEY("model.lora.dropout", lora.dropout, 0, 0, 1, S_HI_OPEN),
    S_LIST_KEY("model.lora.targets", lora.targets, 127, bt_lora_target_names),

    S_ENUM_KEY("task.kind", task.kind, BT_CONFIG_TASK_ARITHMETIC, s_task_kinds),
    S_INT_KEY("task.seed", task.seed, 0, 0, S_INF),
    S_INT_KEY("task.digits", task.digits, 2, 1, 9),
    S_STR_KEY("task.operators", task.operators, "+", s_is_operators,
              "one or more of the operators \"+\", \"-\", \"*\", each at most once"),
    S_INT_KEY("task.heldout_size", task.heldout_size, 200, 0, 1000000),
    S_NUM_KEY("task.format_reward", task.format_reward, 0, 0, S_COEF_MAX, 0),
    S_STR_KEY("task.train", task.train, "", NULL, NULL),
    S_STR_KEY("task.chat_template", task.chat_template, "", NULL, NULL),
    S_STR_KEY("task.system_prompt", task.system_prompt, "", NULL, NULL),
    S_STR_KEY("task.eval", task.eval, "", NULL, NULL),
    S_ENUM_KEY("task.verifier", task.verifier, BT_SOURCE_VERIFY_EXACT, s_verifiers),
    S_INT_KEY("task.epoch_size", task.epoch_size, 0, 0, S_INF),
    S_NUM_KEY("task.code_timeout_s", task.code_timeout_s, 10, 0, 3600, S_LO_OPEN),
    S_INT_KEY("task.code_memory_mb", task.code_memory_mb, 512, 64, 1048576),
    S_STR_KEY("task.demonstration_key", task.demonstration_key, "", s_is_demonstration_key,
              "\"\" (the answer) or a JSONL key other than \"prompt\" and \"answer\""),
    S_INT_KEY("task.max_turns", task.max_turns, 1, 1, BT_CONFIG_MAX_TURNS),
    S_INT_KEY("task.max_episode_tokens", task.max_episode_tokens, 0, 0, S_TOKENS_MAX),
    S_ENUM_KEY("task.env", task.env, BT_CONFIG_ENV_NONE, s_envs),
    S_STR_KEY("task.env_service", task.env_service, "", s_is_endpoint,
              "\"\" or an endpoint \"tcp://HOST:PORT\" or \"ipc://PATH\""),
    S_STR_KEY("task.env_server_key", task.env_server_key, "", s_is_key_or_empty,
              "\"\" or a CURVE public key: the 40 Z85 characters of a NAME.pub file of "
              "`baton keygen`"),
    S_BOOL_KEY("task.env_insecure", task.env_insecure, false),
    S_INT_KEY("task.env_timeout_ms", task.env_timeout_ms, 10000, 1, 3600000),
    S_INT_KEY("task.env_retries", task.env_retries, 2, 0, 100),
    S_ENUM_KEY("task.env_reward", task.env_reward, 0, s_env_rewards),
    S_BOOL_KEY("task.turn_rewards", task.turn_rewards, false),
    S_INT_KEY("task.interleave", task.interleave, 0, 0, 1048576),
    S_STR_KEY("task.observation_template", task.observation_template, "", NULL, NULL),

    S_STR_KEY("reward.service", reward.service, "", s_is_endpoint,
              "\"\" or an endpoint \"tcp://HOST:PORT\" or \"ipc://PATH\""),
    S_INT_KEY("reward.timeout_ms", reward.timeout_ms, 30000, 1, 3600000),
    S_INT_KEY("reward.retries", reward.retries, 0, 0, 100),

    S_INT_KEY("sft.steps", sft.steps, 0, 0, S_INF),
    S_INT_KEY("sft.batch_size", sft.batch_size, 64, 1, S_TOKENS_MAX),
    S_NUM_KEY("sft.lr", sft.lr, 1e-3, 0, S_LR_MAX, 0),
    S_INT_KEY("sft.warmup_steps", sft.warmup_steps, 0, 0, S_INF),
    S_INT_KEY("sft.eval_every", sft.eval_every, 0, 0, S_INF),
    S_NUM_KEY("sft.stop_accuracy", sft.stop_accuracy, 1.0, 0, 1, 0),

    S_INT_KEY("grpo.steps", grpo.steps, 100, 0, S_INF),
    S_INT_KEY("grpo.group_size", grpo.group_size, 8, 2, 4096),
    S_INT_KEY("grpo.prompts_per_step", grpo.prompts_per_step, 16, 1, 65536),
    S_NUM_KEY("grpo.temperature", grpo.temperature, 1.0, S_TEMP_MIN, S_TEMP_MAX, 0),
    S_INT_KEY("grpo.top_k", grpo.top_k, 0, 0, 1073741824),
    S_NUM_KEY("grpo.top_p", grpo.top_p, 1.0, 0, 1, S_LO_OPEN),
    S_INT_KEY("grpo.max_new_tokens", grpo.max_new_tokens, 8, 1, S_TOKENS_MAX),
    S_NUM_KEY("grpo.clip_low", grpo.clip_low, 0.2, 0, 1, S_HI_OPEN),
    S_NUM_KEY("grpo.clip_high", grpo.clip_high, 0.28, 0, S_COEF_MAX, 0),
    S_NUM_KEY("grpo.kl_coef", grpo.kl_coef, 0.0, 0, S_KL_MAX, 0),
    S_ENUM_KEY("grpo.kl_estimator", grpo.kl_estimator, BT_KL_K3, s_kl_estimators),
    S_NUM_KEY("grpo.entropy_coef", grpo.entropy_coef, 0.0, -S_COEF_MAX, S_COEF_MAX, 0),
    S_ENUM_KEY("grpo.loss_agg", grpo.loss_agg, BT_LOSS_AGG_TOKEN_MEAN, s_loss_aggs),
    S_ENUM_KEY("grpo.adv_norm", grpo.adv_norm, BT_ADV_NORM_STD, s_adv_norms),
    S_INT_KEY("grpo.max_tokens", grpo.max_tokens, 0, 0, S_TOKENS_MAX),
    S_NUM_KEY("grpo.lr", grpo.lr, 1e-4, 0, S_LR_MAX, 0),
    S_ENUM_KEY("grpo.lr_schedule", grpo.lr_schedule, BT_LR_CONSTANT, s_lr_kinds),
    S_INT_KEY("grpo.warmup_steps", grpo.warmup_steps, 0, 0, S_INF),
    S_NUM_KEY("grpo.min_lr", grpo.min_lr, 0.0, 0, S_LR_MAX, 0),
    S_INT_KEY("grpo.decay_steps", grpo.decay_steps, 0, 0, S_INF),
    S_NUM_KEY("grpo.weight_decay", grpo.weight_decay, 0.0, 0, S_COEF_MAX, 0),
    S_NUM_KEY("grpo.beta1", grpo.beta1, 0.9, 0, 1, S_HI_OPEN),
    S_NUM_KEY("grpo.beta2", grpo.beta2, 0.999, 0, 1, S_HI_OPEN),
    S_NUM_KEY("grpo.max_grad_norm", grpo.max_grad_norm, 1.0, 0, 1e6, S_LO_OPEN),
    {.path = "grpo.micro_batch",
     .type = S_INT,
     S_FIELD(grpo.micro_batch),
     .def = 64,
     .lo = 1,
     .hi = S_INF,
     .word = "auto"}, /* 0: "auto", the planner's at trainer start (plan.h) */
    S_ENUM_KEY("grpo.batching", grpo.batching, BT_BATCHING_BUCKET, s_batchings),
    S_INT_KEY("grpo.pack_tokens", grpo.pack_tokens, 0, 0, S_INF),
    S_BOOL_KEY("grpo.share_prefix", grpo.share_prefix, true),
    S_ENUM_KEY("grpo.activation_checkpointing", grpo.activation_checkpointing, 0, s_checkpointings),
    S_BOOL_KEY("grpo.dynamic_sampling", grpo.dynamic_sampling, false),
    S_INT_KEY("grpo.max_staleness", grpo.max_staleness, 0, 0, 16),
    S_ENUM_KEY("grpo.async_objective", grpo.async_objective, 0, s_async_objectives),
    S_NUM_KEY("grpo.behav_weight_cap", grpo.behav_weight_cap, 5.0, 0, S_COEF_MAX, 0),
    S_NUM_KEY("grpo.tis_cap", grpo.tis_cap, 0.0, 0, S_COEF_MAX, 0),
    S_NUM_KEY("grpo.turn_gamma", grpo.turn_gamma, 1.0, 0, 1, 0),

    S_INT_KEY("eval.every_steps", eval.every_steps, 10, 0, S_INF),
    S_INT_KEY("eval.every_epochs", eval.every_epochs, 0, 0, S_INF),
    S_NUM_KEY("eval.every_seconds", eval.every_seconds, 0, 0, S_SECONDS_MAX, 0),
    S_NUM_KEY("eval.every_tokens", eval.every_tokens, 0, 0, S_TOKENS_COUNT_MAX, 0),
    S_INT_KEY("eval.heldout_count", eval.heldout_count, 200, 1, S_INF),
    S_INT_KEY("eval.samples", eval.samples, 1, 1, BT_EVALUATOR_MAX_SAMPLES),
    S_NUM_KEY("eval.temperature", eval.temperature, 0.0, 0, S_TEMP_MAX, 0),
    S_INT_KEY("eval.max_new_tokens", eval.max_new_tokens, 0, 0, S_TOKENS_MAX),
    S_BOOL_KEY("eval.adaptive", eval.adaptive, false),
    S_INT_KEY("eval.adaptive_floor", eval.adaptive_floor, 1, 1, S_INF),
    S_INT_KEY("eval.adaptive_ceiling", eval.adaptive_ceiling, 0, 0, S_INF),
    S_NUM_KEY("eval.adaptive_fast", eval.adaptive_fast, 0.01, 0, S_COEF_MAX, S_LO_OPEN),
    S_NUM_KEY("eval.adaptive_plateau", eval.adaptive_plateau, 0.001, 0, S_COEF_MAX, 0),
    S_NUM_KEY("eval.adaptive_drop", eval.adaptive_drop, 0.05, 0, S_COEF_MAX, S_LO_OPEN),
    S_NUM_KEY("eval.adaptive_ema", eval.adaptive_ema, 0.5, 0, 1, S_LO_OPEN),
    S_STR_KEY("eval.probes_source", eval.probes_source, "", NULL, NULL),

    S_BOOL_KEY("tuner.kl.enabled", tuner.kl.enabled, false),
    S_NUM_KEY("tuner.kl.target", tuner.kl.target, 0.01, 0, S_COEF_MAX, S_LO_OPEN),
    S_NUM_KEY("tuner.kl.horizon", tuner.kl.horizon, 10000, 0, 1e12, S_LO_OPEN),
    S_NUM_KEY("tuner.kl.min", tuner.kl.min, 1e-4, 0, S_KL_MAX, S_LO_OPEN),
    S_NUM_KEY("tuner.kl.max", tuner.kl.max, 1.0, 0, S_KL_MAX, S_LO_OPEN),
    S_BOOL_KEY("tuner.lr_kl.enabled", tuner.lr_kl.enabled, false),
    S_NUM_KEY("tuner.lr_kl.target", tuner.lr_kl.target, 0.01, 0, S_COEF_MAX, S_LO_OPEN),
    S_NUM_KEY("tuner.lr_kl.factor", tuner.lr_kl.factor, 1.5, 1, S_COEF_MAX, S_LO_OPEN),
    S_NUM_KEY("tuner.lr_kl.min_lr", tuner.lr_kl.min_lr, 1e-5, 0, S_LR_MAX, 0),
    S_NUM_KEY("tuner.lr_kl.max_lr", tuner.lr_kl.max_lr, 1e-2, 0, S_LR_MAX, 0),
    S_BOOL_KEY("scaling.enabled", scaling.enabled, false),
    S_STR_KEY("scaling.dataset", scaling.dataset, "", s_is_name_or_empty,
              "\"\" or a name of letters, digits, '.', '_' or '-', not starting with '.'"),
    S_INT_KEY("scaling.min_points", scaling.min_points, 4, 4, 4096),
    S_NUM_KEY("scaling.stop_margin", scaling.stop_margin, 0, 0, S_COEF_MAX, 0),
    S_BOOL_KEY("pbt.enabled", pbt.enabled, false),
    S_INT_KEY("pbt.ready_steps", pbt.ready_steps, 10, 1, S_INF),
    S_ENUM_KEY("pbt.metric", pbt.metric, 0, s_pbt_metrics),
    S_NUM_KEY("pbt.quantile", pbt.quantile, 0.25, 0, 0.5, S_LO_OPEN),
    S_NUM_KEY("pbt.resample_probability", pbt.resample_probability, 0.25, 0, 1, 0),
    S_NUM_KEY("pbt.lr_min", pbt.lr_min, 1e-6, 0, S_LR_MAX, S_LO_OPEN),
    S_NUM_KEY("pbt.lr_max", pbt.lr_max, 1e-2, 0, S_LR_MAX, S_LO_OPEN),
    S_STR_KEY("pbt.explore", pbt.explore, "grpo.lr", s_is_pbt_keys,
              "a comma-separated list of grpo.lr, grpo.kl_coef, grpo.temperature, grpo.clip_high"),
    S_NUM_KEY("pbt.kl_coef_min", pbt.kl_coef_min, 1e-4, 0, S_KL_MAX, S_LO_OPEN),
    S_NUM_KEY("pbt.kl_coef_max", pbt.kl_coef_max, 1.0, 0, S_KL_MAX, S_LO_OPEN),
    S_NUM_KEY("pbt.temperature_min", pbt.temperature_min, 0.5, S_TEMP_MIN, S_TEMP_MAX, 0),
    S_NUM_KEY("pbt.temperature_max", pbt.temperature_max, 1.5, S_TEMP_MIN, S_TEMP_MAX, 0),
    S_NUM_KEY("pbt.clip_high_min", pbt.clip_high_min, 0.2, 0, S_COEF_MAX, 0),
    S_NUM_KEY("pbt.clip_high_max", pbt.clip_high_max, 0.4, 0, S_COEF_MAX, 0),
    S_BOOL_KEY("tuner.lr_plateau.enabled", tuner.lr_plateau.enabled, false),
    S_STR_KEY("tuner.lr_plateau.dataset", tuner.lr_plateau.dataset, "", s_is_name_or_empty,
              "\"\" or a name of letters, digits, '.', '_' or '-', not starting with '.'"),
    S_STR_KEY("tuner.lr_plateau.metric", tuner.lr_plateau.metric, "accuracy", s_is_metric,
              "a metric name of letters, digits, '.', '_', '@' or '-'"),
    S_ENUM_KEY("tuner.lr_plateau.mode", tuner.lr_plateau.mode, BT_TUNER_MAX, s_tuner_modes),
    S_INT_KEY("tuner.lr_plateau.patience", tuner.lr_plateau.patience, 3, 1, S_INF),
    S_NUM_KEY("tuner.lr_plateau.factor", tuner.lr_plateau.factor, 0.5, 0, 1, S_LO_OPEN | S_HI_OPEN),
    S_NUM_KEY("tuner.lr_plateau.min_delta", tuner.lr_plateau.min_delta, 0, 0, 1e6, 0),
    S_NUM_KEY("tuner.lr_plateau.min_lr", tuner.lr_plateau.min_lr, 1e-6, 0, S_LR_MAX, 0),
    S_BOOL_KEY("tuner.mixture.enabled", tuner.mixture.enabled, false),
    S_ENUM_KEY("tuner.mixture.metric", tuner.mixture.metric, BT_TUNER_MIXTURE_ACCURACY,
               s_mixture_metrics),
    S_INT_KEY("tuner.mixture.every_steps", tuner.mixture.every_steps, 10, 1, S_INF),
    S_NUM_KEY("tuner.mixture.rate", tuner.mixture.rate, 1.0, 0, S_COEF_MAX, S_LO_OPEN),
    S_NUM_KEY("tuner.mixture.min_weight", tuner.mixture.min_weight, 0.05, 0, S_WEIGHT_MAX,
              S_LO_OPEN),
    S_NUM_KEY("tuner.mixture.max_weight", tuner.mixture.max_weight, 20.0, 0, S_WEIGHT_MAX,
              S_LO_OPEN),
    S_BOOL_KEY("tuner.temperature.enabled", tuner.temperature.enabled, false),
    S_NUM_KEY("tuner.temperature.entropy_low", tuner.temperature.entropy_low, 0.2, 0, S_COEF_MAX,
              0),
    S_NUM_KEY("tuner.temperature.entropy_high", tuner.temperature.entropy_high, 2.0, 0, S_COEF_MAX,
              S_LO_OPEN),
    S_NUM_KEY("tuner.temperature.step", tuner.temperature.step, 0.05, 0, S_TEMP_MAX, S_LO_OPEN),
    S_NUM_KEY("tuner.temperature.min", tuner.temperature.min, 0.5, S_TEMP_MIN, S_TEMP_MAX, 0),
    S_NUM_KEY("tuner.temperature.max", tuner.temperature.max, 1.5, S_TEMP_MIN, S_TEMP_MAX, 0),

    S_INT_KEY("workers.rollout", workers.rollout, 1, 1, S_INF),
    S_INT_KEY("workers.trainer", workers.trainer, 1, 1, 65536),
    S_INT_KEY("workers.eval", workers.eval, 1, 0, S_INF),
    S_INT_KEY("workers.heartbeat_ms", workers.heartbeat_ms, 500, 1, 3600000),
    S_INT_KEY("workers.expiry_ms", workers.expiry_ms, 5000, 1, S_INF),
    S_INT_KEY("workers.collective_timeout_ms", workers.collective_timeout_ms, 60000, 100, S_INF),
    S_ENUM_KEY("workers.shard", workers.shard, BT_SHARD_NONE, s_shards),
    S_INT_KEY("workers.standby_trainers", workers.standby_trainers, 0, 0, 64),
    S_INT_KEY("workers.controller_timeout_ms", workers.controller_timeout_ms, 60000, 100, S_INF),
    S_INT_KEY("workers.deadline_floor_ms", workers.deadline_floor_ms, 30000, 1, S_INF),
    S_INT_KEY("workers.deadline_factor", workers.deadline_factor, 10, 1, 1000),
    S_INT_KEY("workers.join_timeout_s", workers.join_timeout_s, 60, 1, 86400),

    S_INT_KEY("checkpoint.light_every_steps", checkpoint.light_every_steps, 0, 0, S_INF),
    S_INT_KEY("checkpoint.full_every_steps", checkpoint.full_every_steps, 0, 0, S_INF),
    S_NUM_KEY("checkpoint.full_every_secs", checkpoint.full_every_secs, 0, 0, S_SECONDS_MAX, 0),
    S_INT_KEY("checkpoint.full_every_epochs", checkpoint.full_every_epochs, 0, 0, S_INF),
    S_INT_KEY("checkpoint.keep_last", checkpoint.keep_last, 3, 1, S_INF),
    S_INT_KEY("checkpoint.keep_every", checkpoint.keep_every, 0, 0, S_INF),
    S_STR_KEY("checkpoint.mirror_dir", checkpoint.mirror_dir, "", NULL, NULL),
    S_NUM_KEY("checkpoint.spike_factor", checkpoint.spike_factor, 0, 0, S_COEF_MAX, 0),

    S_STR_KEY("data.epoch_source", data.epoch_source, "", s_is_name_or_empty,
              "a data.sources name, or \"\" for the first"),
    S_INT_KEY("data.curriculum.window", data.curriculum.window, 0, 0, 1000),
    S_BOOL_KEY("data.curriculum.skip_solved", data.curriculum.skip_solved, true),
    S_BOOL_KEY("data.curriculum.skip_failed", data.curriculum.skip_failed, true),
    S_INT_KEY("debug.inject_nan_at_step", debug.inject_nan_at_step, 0, 0, S_INF),
    S_INT_KEY("debug.save_pause_ms", debug.save_pause_ms, 0, 0, 600000),
    S_INT_KEY("debug.kill_rollout_at_task", debug.kill_rollout_at_task, 0, 0, S_INF),
    S_BOOL_KEY("debug.log_prompts", debug.log_prompts, false),
};
enum { S_NKEYS = sizeof s_keys / sizeof s_keys[0] };

/*  The keys of one eval.datasets entry and one eval.probes entry: offsets within the entry.  An
    unset dataset field (-1, NaN) takes the flat eval.* key of the same name. */
static const char *const s_ds_verifiers[] = {"task", "exact", "numeric", "math", "code", NULL};
static const char *const s_eval_kinds[] = {"generate", "perplexity", "probes", "choices", NULL};
#define S_DS(f) .offset = offsetof(bt_eval_dataset, f), .size = sizeof(((bt_eval_dataset *)0)->f)
#define S_PR(f) .offset = offsetof(bt_eval_probe, f), .size = sizeof(((bt_eval_probe *)0)->f)
static const s_key s_dataset_keys[] = {
    {.path = "name",
     .type = S_STR,
     S_DS(name),
     .def_str = "",
     .valid = s_is_name,
     .what = "a name of letters, digits, '.', '_' or '-', not starting with '.'"},
    {.path = "kind", .type = S_ENUM, S_DS(kind), .def = BT_EVAL_GENERATE, .names = s_eval_kinds},
    {.path = "source", .type = S_STR, S_DS(source), .def_str = ""},
    {.path = "count", .type = S_INT, S_DS(count), .def = -1, .lo = 0, .hi = S_INF},
    {.path = "samples",
     .type = S_INT,
     S_DS(samples),
     .def = -1,
     .lo = 1,
     .hi = BT_EVALUATOR_MAX_SAMPLES},
    {.path = "temperature",
     .type = S_NUM,
     S_DS(temperature),
     .def = NAN,
     .lo = 0,
     .hi = S_TEMP_MAX},
    {.path = "max_new_tokens",
     .type = S_INT,
     S_DS(max_new_tokens),
     .def = -1,
     .lo = 0,
     .hi = S_TOKENS_MAX},
    {.path = "robustness", .type = S_BOOL, S_DS(robustness), .def = 0},
    {.path = "verifier", .type = S_ENUM, S_DS(verifier), .def = 0, .names = s_ds_verifiers},
    {.path = "stride", .type = S_INT, S_DS(stride), .def = 0, .lo = 0, .hi = S_INF},
    {.path = "num_fewshot", .type = S_INT, S_DS(num_fewshot), .def = 0, .lo = 0, .hi = 64},
    {.path = "fewshot_source", .type = S_STR, S_DS(fewshot_source), .def_str = ""},
    {.path = "fewshot_separator", .type = S_STR, S_DS(fewshot_separator), .def_str = "\n\n"},
    {.path = "fewshot_delimiter", .type = S_STR, S_DS(fewshot_delimiter), .def_str = " "},
    {.path = "choices_letters", .type = S_BOOL, S_DS(choices_letters), .def = 0},
    {.path = "shuffle_choices", .type = S_BOOL, S_DS(shuffle_choices), .def = 0},
    {.path = "every_steps", .type = S_INT, S_DS(every_steps), .def = -1, .lo = 0, .hi = S_INF},
    {.path = "every_epochs", .type = S_INT, S_DS(every_epochs), .def = -1, .lo = 0, .hi = S_INF},
    {.path = "every_seconds",
     .type = S_NUM,
     S_DS(every_seconds),
     .def = NAN,
     .lo = 0,
     .hi = S_SECONDS_MAX},
    {.path = "every_tokens",
     .type = S_NUM,
     S_DS(every_tokens),
     .def = NAN,
     .lo = 0,
     .hi = S_TOKENS_COUNT_MAX},
};
static const s_key s_probe_keys[] = {
    {.path = "name",
     .type = S_STR,
     S_PR(name),
     .def_str = "",
     .valid = s_is_name,
     .what = "a name of letters, digits, '.', '_' or '-', not starting with '.'"},
    {.path = "prompt", .type = S_STR, S_PR(prompt), .def_str = ""},
    {.path = "target", .type = S_STR, S_PR(target), .def_str = ""},
    {.path = "better", .type = S_STR, S_PR(better), .def_str = ""},
    {.path = "worse", .type = S_STR, S_PR(worse), .def_str = ""},
};
enum {
    S_NDATASET_KEYS = sizeof s_dataset_keys / sizeof s_dataset_keys[0],
    S_NPROBE_KEYS = sizeof s_probe_keys / sizeof s_probe_keys[0]
};

const char *bt_config_key(int i) {
    return i >= 0 && i < S_NKEYS ? s_keys[i].path : NULL;
}

static cJSON *s_to_item(const s_key *k, const bt_config *cfg);

/*  The key of keys[0, n) named path; NULL when none. */
static const s_key *s_find_in(const s_key *keys, int n, const char *path) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i].path, path) == 0)
            return &keys[i];
    return NULL;
}

static const s_key *s_find(const char *path) {
    return s_find_in(s_keys, S_NKEYS, path);
}

static bool s_is_section(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < S_NKEYS; i++)
        if (strncmp(s_keys[i].path, name, n) == 0 && s_keys[i].path[n] == '.')
            return true;
    return false;
}

/* ---- values --------------------------------------------------------------------------------- */

/*  Shortest text that reads back as exactly x; integers without an exponent up to 1e17. */
static void s_format_number(double x, char *buf, size_t len) {
    char text[BT_BUF_NUMBER_LEN];
    bool integer = x == floor(x) && fabs(x) < 1e17; /* all 17 digits: no exponent */
    snprintf(buf, len, "%s", bt_buf_format_number(text, x, integer ? 17 : 1));
}

static bt_status s_expected(const char *where, const char *what, const cJSON *found) {
    char got[64];
    bt_jsonl_describe(found, got, sizeof got);
    return bt_fail(BT_EINVAL, "%s: expected %s, got %s", where, what, got);
}

/*  "an integer >= 2", "a number in (0, 1]", ... */
static void s_range_text(const s_key *k, char *buf, size_t len) {
    const char *noun = k->type == S_INT ? "an integer" : "a number";
    char lo[32], hi[32];
    s_format_number(k->lo, lo, sizeof lo);
    s_format_number(k->hi, hi, sizeof hi);
    if (isfinite(k->lo) && isfinite(k->hi))
        snprintf(buf, len, "%s in %c%s, %s%c", noun, k->open & S_LO_OPEN ? '(' : '[', lo, hi,
                 k->open & S_HI_OPEN ? ')' : ']');
    else if (isfinite(k->lo))
        snprintf(buf, len, "%s %s %s", noun, k->open & S_LO_OPEN ? ">" : ">=", lo);
    else
        snprintf(buf, len, "%s", noun);
    if (k->word) {
        size_t used = strlen(buf);
        if (used < len)
            snprintf(buf + used, len - used, " or \"%s\"", k->word);
    }
}

/*  The field of k in the struct at base: a bt_config, or for an array entry's keys moved to 0, a
    standalone entry (a probe of eval.probes_source). */
static void *s_field(const s_key *k, void *base) {
    return (char *)base + k->offset;
}
static const void *s_cfield(const s_key *k, const bt_config *cfg) {
    return (const char *)cfg + k->offset;
}

/*  Stores a value already checked against k (an enum as its index). */
static void s_store(const s_key *k, void *base, double x) {
    void *p = s_field(k, base);
    if (k->type == S_INT)
        *(int64_t *)p = (int64_t)x;
    else if (k->type == S_NUM)
        *(double *)p = x;
    else if (k->type == S_BOOL)
        *(bool *)p = x != 0;
    else if (k->type == S_LIST) {
        BT_ASSERT(k->size == sizeof(uint32_t));
        *(uint32_t *)p = (uint32_t)x;
    } else {
        BT_ASSERT(k->type == S_ENUM && k->size == sizeof(int));
        *(int *)p = (int)x;
    }
}

/*  "a non-empty list of distinct names of \"a\", \"b\"" for an S_LIST key. */
static void s_list_text(const s_key *k, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "a non-empty list of distinct names of");
    for (int i = 0; k->names[i] && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s \"%s\"", i ? "," : "", k->names[i]);
}

/*  A JSON array of k's names, each once, as a mask. */
static bt_status s_set_list(const s_key *k, const cJSON *v, const char *where, void *cfg) {
    char what[256];
    s_list_text(k, what, sizeof what);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return s_expected(where, what, v);
    uint32_t mask = 0;
    for (const cJSON *e = v->child; e; e = e->next) {
        const char *s = cJSON_GetStringValue(e);
        int i = 0;
        while (k->names[i] && !(s && strcmp(s, k->names[i]) == 0))
            i++;
        if (!k->names[i] || (mask & (1u << i)))
            return s_expected(where, what, e);
        mask |= 1u << i;
    }
    s_store(k, cfg, mask);
    return BT_OK;
}

/*  Checks v against k and stores it; errors start with where ("SOURCE: key.path"). */
static bt_status s_set(const s_key *k, const cJSON *v, const char *where, void *cfg) {
    char what[160];
    if (k->type == S_BOOL) {
        if (!cJSON_IsBool(v))
            return s_expected(where, "true or false", v);
        s_store(k, cfg, cJSON_IsTrue(v));
    } else if (k->type == S_STR) {
        const char *s = cJSON_GetStringValue(v);
        if (!s)
            return s_expected(where, "a string", v);
        if (k->valid && !k->valid(s))
            return s_expected(where, k->what, v);
        size_t n = strlen(s);
        if (n >= k->size) {
            snprintf(what, sizeof what, "a string of at most %zu bytes", k->size - 1);
            return s_expected(where, what, v);
        }
        memset(s_field(k, cfg), 0, k->size);
        memcpy(s_field(k, cfg), s, n);
    } else if (k->type == S_LIST) {
        return s_set_list(k, v, where, cfg);
    } else if (k->type == S_ENUM) {
        const char *s = cJSON_GetStringValue(v);
        size_t used = (size_t)snprintf(what, sizeof what, "one of");
        for (int i = 0; k->names[i]; i++) {
            if (s && strcmp(s, k->names[i]) == 0) {
                s_store(k, cfg, i);
                return BT_OK;
            }
            if (used < sizeof what)
                used += (size_t)snprintf(what + used, sizeof what - used, "%s \"%s\"", i ? "," : "",
                                         k->names[i]);
        }
        return s_expected(where, what, v);
    } else {
        if (k->word && cJSON_IsString(v) && strcmp(v->valuestring, k->word) == 0) {
            s_store(k, cfg, 0);
            return BT_OK;
        }
        if (k->word && !cJSON_IsNumber(v)) {
            s_range_text(k, what, sizeof what);
            return s_expected(where, what, v);
        }
        double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (isnan(x) || (k->type == S_INT && x != floor(x)))
            return s_expected(where, k->type == S_INT ? "an integer" : "a number", v);
        if (k->type == S_INT && fabs(x) >= S_INT_LIMIT)
            return s_expected(where, "an integer in (-2^53, 2^53)", v);
        if (!isfinite(x))
            return s_expected(where, "a finite number", v);
        bool below = k->open & S_LO_OPEN ? x <= k->lo : x < k->lo;
        bool above = k->open & S_HI_OPEN ? x >= k->hi : x > k->hi;
        if (below || above) {
            s_range_text(k, what, sizeof what);
            return s_expected(where, what, v);
        }
        s_store(k, cfg, x);
    }
    return BT_OK;
}

/* ---- unknown keys --------------------------------------------------------------------------- */

/*  Optimal string alignment distance: edits, with a swap of neighbours counting as one. */
static int s_distance(const char *a, const char *b) {
    enum { N = 48 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= N || m >= N)
        return N;
    int d[N][N];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            best = d[i - 1][j] + 1 < best ? d[i - 1][j] + 1 : best;
            best = d[i][j - 1] + 1 < best ? d[i][j - 1] + 1 : best;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

/*  "where: unknown key", with the closest key or section when path looks like a typo of it. */
static bt_status s_unknown(const char *where, const char *path) {
    char best[64] = "", candidate[64];
    int best_d = 3; /* suggest at distance 1 or 2 only */
    for (int i = 0; i < S_NKEYS; i++) {
        /* the key, then each section it lies in: "tuner.kl.min", "tuner", "tuner.kl" */
        const char *key = s_keys[i].path;
        size_t n = strlen(key);
        for (size_t end = 0; end <= n; end++) {
            size_t len = end == 0 ? n : end; /* the whole key first */
            if (end > 0 && key[end] != '.')
                continue;
            snprintf(candidate, sizeof candidate, "%.*s", (int)len, key);
            int d = s_distance(path, candidate);
            if (d > 0 && d < best_d && 3 * d <= (int)strlen(candidate)) {
                best_d = d;
                snprintf(best, sizeof best, "%s", candidate);
            }
        }
    }
    if (best[0])
        return bt_fail(BT_EINVAL, "%s: unknown key (did you mean %s?)", where, best);
    return bt_fail(BT_EINVAL, "%s: unknown key", where);
}

/* ---- parsing -------------------------------------------------------------------------------- */

static bool s_is_duplicate(const cJSON *object, const cJSON *item) {
    return cJSON_GetObjectItemCaseSensitive(object, item->string) != item;
}

/*  k, moved to an array entry at base bytes into bt_config. */
static s_key s_at(const s_key *k, size_t base) {
    s_key moved = *k;
    moved.offset += base;
    return moved;
}

/*  Every field of an array entry at its default. */
static void s_entry_init(const s_key *keys, int n, size_t base, void *cfg) {
    for (int i = 0; i < n; i++) {
        s_key k = s_at(&keys[i], base);
        if (k.type == S_STR)
            snprintf(s_field(&k, cfg), k.size, "%s", k.def_str);
        else
            s_store(&k, cfg, k.def);
    }
}

/*  The members of one array entry (an object), each a key of keys[], into the entry at `at` bytes
    into base; errors start with where, the entry ("SOURCE: eval.probes[2]"), then sep. */
static bt_status s_apply_entry(const cJSON *entry, const char *where, const char *sep,
                               const s_key *keys, int n_keys, size_t at, void *base) {
    char key[512];
    s_entry_init(keys, n_keys, at, base);
    for (const cJSON *item = entry->child; item; item = item->next) {
        snprintf(key, sizeof key, "%s%s%s", where, sep, item->string);
        const s_key *k = s_find_in(keys, n_keys, item->string);
        if (!k)
            return bt_fail(BT_EINVAL, "%s: unknown key", key);
        if (s_is_duplicate(entry, item))
            return bt_fail(BT_EINVAL, "%s: duplicate key", key);
        s_key moved = s_at(k, at);
        BT_TRY(s_set(&moved, item, key, base));
    }
    return BT_OK;
}

/*  eval.datasets or eval.probes: an array of objects whose keys come from keys[]. */
static bt_status s_apply_array(const cJSON *arr, const char *src, const char *path,
                               const s_key *keys, int n_keys, size_t base, size_t stride, int max,
                               int *count, bt_config *cfg) {
    char where[256];
    snprintf(where, sizeof where, "%s: %s", src, path);
    if (!cJSON_IsArray(arr))
        return s_expected(where, "an array of objects", arr);
    if (cJSON_GetArraySize(arr) > max) {
        char what[96];
        snprintf(what, sizeof what, "at most %d entries%s", max,
                 keys == s_probe_keys ? " (more probes go in an eval.probes_source file)" : "");
        return bt_fail(BT_EINVAL, "%s: expected %s, got %d", where, what, cJSON_GetArraySize(arr));
    }
    *count = 0;
    memset((char *)cfg + base, 0, stride * (size_t)max); /* an array replaced by --set: whole */
    for (const cJSON *entry = arr->child; entry; entry = entry->next, (*count)++) {
        size_t at = base + (size_t)*count * stride;
        snprintf(where, sizeof where, "%s: %s[%d]", src, path, *count);
        if (!cJSON_IsObject(entry))
            return s_expected(where, "an object", entry);
        BT_TRY(s_apply_entry(entry, where, ".", keys, n_keys, at, cfg));
    }
    return BT_OK;
}

static bt_status s_apply_eval_array(const cJSON *item, bool datasets, const char *src,
                                    bt_config *cfg) {
    if (datasets)
        return s_apply_array(item, src, "eval.datasets", s_dataset_keys, S_NDATASET_KEYS,
                             offsetof(bt_config, eval.datasets), sizeof(bt_eval_dataset),
                             BT_EVAL_MAX_DATASETS, &cfg->eval.n_datasets, cfg);
    return s_apply_array(item, src, "eval.probes", s_probe_keys, S_NPROBE_KEYS,
                         offsetof(bt_config, eval.probes), sizeof(bt_eval_probe),
                         BT_EVAL_CONFIG_PROBES, &cfg->eval.n_probes, cfg);
}

static bt_status s_apply_sources(const cJSON *arr, const char *src, bt_config *cfg);

/*  The members of obj, the section or subsection at prefix ("grpo", "tuner.kl"): keys, or objects
    holding the keys of a subsection. */
static bt_status s_apply_section(const cJSON *obj, const char *prefix, const char *src,
                                 bt_config *cfg) {
    char where[256], path[128];
    for (const cJSON *item = obj->child; item; item = item->next) {
        snprintf(path, sizeof path, "%s.%s", prefix, item->string);
        snprintf(where, sizeof where, "%s: %s", src, path);
        if (!strcmp(path, "eval.datasets") || !strcmp(path, "eval.probes")) {
            if (s_is_duplicate(obj, item))
                return bt_fail(BT_EINVAL, "%s: duplicate key", where);
            BT_TRY(s_apply_eval_array(item, !strcmp(path, "eval.datasets"), src, cfg));
            continue;
        }
        if (!strcmp(path, "data.sources")) {
            if (s_is_duplicate(obj, item))
                return bt_fail(BT_EINVAL, "%s: duplicate key", where);
            BT_TRY(s_apply_sources(item, src, cfg));
            continue;
        }
        const s_key *k = s_find(path);
        bool sub = !k && s_is_section(path);
        if (!k && !sub)
            return s_unknown(where, path);
        if (s_is_duplicate(obj, item))
            return bt_fail(BT_EINVAL, "%s: duplicate key", where);
        if (sub && !cJSON_IsObject(item))
            return s_expected(where, "an object", item);
        BT_TRY(sub ? s_apply_section(item, path, src, cfg) : s_set(k, item, where, cfg));
    }
    return BT_OK;
}

/*  The keys a variant may set: what one policy's training does, not the run's shared parts. */
static bool s_is_variant_key(const char *path) {
    const char *const prefixes[] = {"grpo.", "sft.", "tuner.", "scaling.", "data."};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(path, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return strcmp(path, "run.seed") == 0;
}

/*  Checks that item suits key k as the file gives it ("50" is no integer) without changing cfg,
    then stores "path=value" (the value as --set reads it back) in sets[*n_sets]. */
static bt_status s_store_set(const s_key *k, const cJSON *item, const char *path, const char *where,
                             bt_config *cfg, char (*sets)[BT_CONFIG_SET_MAX], int *n_sets) {
    char saved[BT_CONFIG_PATH_MAX];
    BT_ASSERT(k->size <= sizeof saved);
    memcpy(saved, s_cfield(k, cfg), k->size);
    bt_status st = s_set(k, item, where, cfg);
    memcpy(s_field(k, cfg), saved, k->size);
    BT_TRY(st);
    char value[BT_CONFIG_SET_MAX];
    if (cJSON_IsNumber(item))
        s_format_number(item->valuedouble, value, sizeof value);
    else if (cJSON_IsBool(item))
        snprintf(value, sizeof value, "%s", cJSON_IsTrue(item) ? "true" : "false");
    else if (item->valuestring[0] != '"') /* --set takes a string key's text as it is */
        snprintf(value, sizeof value, "%s", item->valuestring);
    else { /* ... unless it starts with a quote: then it reads JSON */
        char *json = cJSON_PrintUnformatted(item);
        if (!json)
            return bt_fail(BT_ENOMEM, "%s: out of memory", where);
        snprintf(value, sizeof value, "%s", json);
        cJSON_free(json);
    }
    int n = snprintf(sets[*n_sets], BT_CONFIG_SET_MAX, "%s=%s", path, value);
    if (n < 0 || n >= BT_CONFIG_SET_MAX || strlen(value) >= sizeof value - 1)
        return bt_fail(BT_EINVAL, "%s: expected \"key.path=value\" of at most %d bytes", where,
                       BT_CONFIG_SET_MAX - 1);
    (*n_sets)++;
    return BT_OK;
}

/*  A variant's data.sources array, kept as its compact JSON in v->sources; bt_config_variant
    applies it (and bt_config_parse checks it there, with the variant's other keys). */
static bt_status s_store_sources(const cJSON *item, const char *where, bt_config_variant_spec *v) {
    if (!cJSON_IsArray(item))
        return s_expected(where, "an array of 1 or more objects", item);
    char *json = cJSON_PrintUnformatted(item);
    if (!json)
        return bt_fail(BT_EINVAL, "%s: out of memory", where);
    size_t n = strlen(json);
    if (n < sizeof v->sources)
        memcpy(v->sources, json, n + 1);
    cJSON_free(json);
    if (n >= sizeof v->sources)
        return bt_fail(BT_EINVAL, "%s: expected at most %d bytes of compact JSON, got %zu", where,
                       BT_CONFIG_VARIANT_SOURCES_MAX - 1, n);
    return BT_OK;
}

/*  Variant e's `set` object: each member a key a variant may set and a value the key takes,
    stored as "key.path=value" with the value as --set reads it back. */
static bt_status s_apply_variant_sets(const cJSON *set, const char *src, int e, bt_config *cfg) {
    char where[256];
    bt_config_variant_spec *v = &cfg->variants[e];
    snprintf(where, sizeof where, "%s: variants[%d].set", src, e);
    if (!cJSON_IsObject(set))
        return s_expected(where, "an object of key paths and values", set);
    if (cJSON_GetArraySize(set) > BT_CONFIG_MAX_VARIANT_SETS)
        return bt_fail(BT_EINVAL, "%s: expected at most %d keys, got %d", where,
                       BT_CONFIG_MAX_VARIANT_SETS, cJSON_GetArraySize(set));
    for (const cJSON *item = set->child; item; item = item->next) {
        snprintf(where, sizeof where, "%s: variants[%d].set.%s", src, e, item->string);
        if (strcmp(item->string, "data.sources") == 0) { /* an array: kept as its JSON */
            if (s_is_duplicate(set, item))
                return bt_fail(BT_EINVAL, "%s: duplicate key", where);
            BT_TRY(s_store_sources(item, where, v));
            continue;
        }
        const s_key *k = s_find(item->string);
        if (!k)
            return s_unknown(where, item->string);
        if (s_is_duplicate(set, item))
            return bt_fail(BT_EINVAL, "%s: duplicate key", where);
        if (!s_is_variant_key(item->string))
            return bt_fail(BT_EINVAL,
                           "%s: not a per-variant key (a variant may set grpo.*, sft.*, tuner.*, "
                           "scaling.*, data.* and run.seed)",
                           where);
        BT_TRY(s_store_set(k, item, item->string, where, cfg, v->sets, &v->n_sets));
    }
    return BT_OK;
}

/*  A "name" member of an array entry (a variant, a data source) into field, inside cfg. */
static bt_status s_set_name(bt_config *cfg, char *field, size_t size, const cJSON *item,
                            const char *where) {
    s_key k = {.path = "name",
               .type = S_STR,
               .offset = (size_t)(field - (char *)cfg),
               .size = size,
               .valid = s_is_name,
               .what = "a name of letters, digits, '.', '_' or '-', not starting with '.'"};
    return s_set(&k, item, where, cfg);
}

/*  The keys of a data.sources entry besides "name" and "weight": each stands for a task.* key. */
static const struct {
    const char *key, *task_key;
} s_source_keys[] = {
    {"kind", "task.kind"},
    {"path", "task.train"},
    {"heldout", "task.eval"},
    {"verifier", "task.verifier"},
    {"seed", "task.seed"},
    {"digits", "task.digits"},
    {"operators", "task.operators"},
    {"heldout_size", "task.heldout_size"},
    {"format_reward", "task.format_reward"},
    {"chat_template", "task.chat_template"},
    {"system_prompt", "task.system_prompt"},
    {"epoch_size", "task.epoch_size"},
    {"code_timeout_s", "task.code_timeout_s"},
    {"code_memory_mb", "task.code_memory_mb"},
    {"demonstration_key", "task.demonstration_key"},
    {"max_turns", "task.max_turns"},
    {"max_episode_tokens", "task.max_episode_tokens"},
    {"env", "task.env"},
    {"env_service", "task.env_service"},
    {"env_server_key", "task.env_server_key"},
    {"env_insecure", "task.env_insecure"},
    {"env_timeout_ms", "task.env_timeout_ms"},
    {"env_retries", "task.env_retries"},
    {"env_reward", "task.env_reward"},
    {"turn_rewards", "task.turn_rewards"},
    {"interleave", "task.interleave"},
    {"observation_template", "task.observation_template"},
};
#define S_N_SOURCE_KEYS ((int)(sizeof s_source_keys / sizeof s_source_keys[0]))

/*  The source key ("path") of a stored set ("task.train=..."), or NULL. */
static const char *s_source_key(const char *set) {
    size_t n = strcspn(set, "=");
    for (int j = 0; j < S_N_SOURCE_KEYS; j++)
        if (strncmp(s_source_keys[j].task_key, set, n) == 0 && s_source_keys[j].task_key[n] == '\0')
            return s_source_keys[j].key;
    return NULL;
}

/*  data.sources: objects with a unique "name", a "weight" and task keys (s_source_keys). */
static bt_status s_apply_sources(const cJSON *arr, const char *src, bt_config *cfg) {
    char where[256];
    snprintf(where, sizeof where, "%s: data.sources", src);
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1)
        return s_expected(where, "an array of 1 or more objects", arr);
    if (cJSON_GetArraySize(arr) > BT_CONFIG_MAX_SOURCES)
        return bt_fail(BT_EINVAL, "%s: expected at most %d entries, got %d", where,
                       BT_CONFIG_MAX_SOURCES, cJSON_GetArraySize(arr));
    memset(cfg->data.sources, 0, sizeof cfg->data.sources);
    cfg->data.n_sources = 0;
    for (const cJSON *entry = arr->child; entry; entry = entry->next) {
        int e = cfg->data.n_sources++;
        bt_config_source_spec *v = &cfg->data.sources[e];
        v->weight = 1.0;
        snprintf(where, sizeof where, "%s: data.sources[%d]", src, e);
        if (!cJSON_IsObject(entry))
            return s_expected(where, "an object", entry);
        for (const cJSON *item = entry->child; item; item = item->next) {
            snprintf(where, sizeof where, "%s: data.sources[%d].%s", src, e, item->string);
            if (s_is_duplicate(entry, item))
                return bt_fail(BT_EINVAL, "%s: duplicate key", where);
            if (strcmp(item->string, "name") == 0) {
                BT_TRY(s_set_name(cfg, v->name, sizeof v->name, item, where));
                continue;
            }
            if (strcmp(item->string, "weight") == 0) {
                s_key k = {.path = "weight",
                           .type = S_NUM,
                           .offset = (size_t)((char *)&v->weight - (char *)cfg),
                           .size = sizeof v->weight,
                           .lo = 0,
                           .hi = S_WEIGHT_MAX,
                           .open = S_LO_OPEN};
                BT_TRY(s_set(&k, item, where, cfg));
                continue;
            }
            const char *task_key = NULL;
            for (int i = 0; i < S_N_SOURCE_KEYS && !task_key; i++)
                task_key = strcmp(item->string, s_source_keys[i].key) == 0
                               ? s_source_keys[i].task_key
                               : NULL;
            if (!task_key)
                return bt_fail(BT_EINVAL,
                               "%s: unknown key (a source has name, weight, kind, path, heldout, "
                               "verifier, seed, digits, operators, heldout_size, format_reward, "
                               "chat_template, system_prompt, epoch_size, code_timeout_s, "
                               "code_memory_mb, demonstration_key and the episode keys max_turns, "
                               "max_episode_tokens, env, env_service, env_server_key, "
                               "env_insecure, env_timeout_ms, env_retries, env_reward, "
                               "turn_rewards, interleave, observation_template)",
                               where);
            BT_TRY(s_store_set(s_find(task_key), item, task_key, where, cfg, v->sets, &v->n_sets));
        }
        snprintf(where, sizeof where, "%s: data.sources[%d].name", src, e);
        if (!v->name[0])
            return bt_fail(BT_EINVAL, "%s: expected a name, got nothing", where);
        for (int j = 0; j < e; j++)
            if (strcmp(cfg->data.sources[j].name, v->name) == 0)
                return bt_fail(BT_EINVAL, "%s: \"%s\" is already the name of data.sources[%d]",
                               where, v->name, j);
    }
    return BT_OK;
}

/*  The top-level `variants` array: objects with a unique "name" and an optional "set". */
static bt_status s_apply_variants(const cJSON *arr, const char *src, bt_config *cfg) {
    char where[256];
    snprintf(where, sizeof where, "%s: variants", src);
    if (!cJSON_IsArray(arr))
        return s_expected(where, "an array of objects", arr);
    if (cJSON_GetArraySize(arr) > BT_CONFIG_MAX_VARIANTS)
        return bt_fail(BT_EINVAL, "%s: expected at most %d entries, got %d", where,
                       BT_CONFIG_MAX_VARIANTS, cJSON_GetArraySize(arr));
    memset(cfg->variants, 0, sizeof cfg->variants);
    cfg->n_variants = 0;
    for (const cJSON *entry = arr->child; entry; entry = entry->next) {
        int e = cfg->n_variants++;
        bt_config_variant_spec *v = &cfg->variants[e];
        snprintf(where, sizeof where, "%s: variants[%d]", src, e);
        if (!cJSON_IsObject(entry))
            return s_expected(where, "an object", entry);
        for (const cJSON *item = entry->child; item; item = item->next) {
            snprintf(where, sizeof where, "%s: variants[%d].%s", src, e, item->string);
            bool is_name = strcmp(item->string, "name") == 0;
            if (!is_name && strcmp(item->string, "set") != 0)
                return bt_fail(BT_EINVAL, "%s: unknown key (a variant has \"name\" and \"set\")",
                               where);
            if (s_is_duplicate(entry, item))
                return bt_fail(BT_EINVAL, "%s: duplicate key", where);
            if (is_name) {
                BT_TRY(s_set_name(cfg, v->name, sizeof v->name, item, where));
            } else {
                BT_TRY(s_apply_variant_sets(item, src, e, cfg));
            }
        }
        snprintf(where, sizeof where, "%s: variants[%d].name", src, e);
        if (!v->name[0])
            return bt_fail(BT_EINVAL, "%s: expected a name, got nothing", where);
        for (int j = 0; j < e; j++)
            if (strcmp(cfg->variants[j].name, v->name) == 0)
                return bt_fail(BT_EINVAL, "%s: \"%s\" is already the name of variants[%d]", where,
                               v->name, j);
    }
    return BT_OK;
}

static bt_status s_apply_json(const cJSON *root, const char *src, bt_config *cfg) {
    char where[256];
    if (!cJSON_IsObject(root))
        return s_expected(src, "an object at the top level", root);
    for (const cJSON *sec = root->child; sec; sec = sec->next) {
        snprintf(where, sizeof where, "%s: %s", src, sec->string);
        bool variants = strcmp(sec->string, "variants") == 0;
        if (!variants && !s_is_section(sec->string))
            return s_unknown(where, sec->string);
        if (s_is_duplicate(root, sec))
            return bt_fail(BT_EINVAL, "%s: duplicate key", where);
        if (variants) {
            BT_TRY(s_apply_variants(sec, src, cfg));
            continue;
        }
        if (!cJSON_IsObject(sec))
            return s_expected(where, "an object", sec);
        BT_TRY(s_apply_section(sec, sec->string, src, cfg));
    }
    return BT_OK;
}

/*  --set of an array (eval.datasets, eval.probes, data.sources, variants) or a section ("grpo",
    "tuner.kl") to the JSON value text: the array replaced whole, the section's keys set as the
    file sets them.  Errors start with "--set", then the key as the file's would ("--set:
    eval.datasets[0].kind: ..."). */
static bt_status s_apply_json_override(const char *path, const char *text, const char *where,
                                       bt_config *cfg) {
    bool section = strcmp(path, "eval.datasets") && strcmp(path, "eval.probes") &&
                   strcmp(path, "data.sources") && strcmp(path, "variants");
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithOpts(text, &end, true);
    if (!v)
        return bt_fail(BT_EINVAL, "%s: expected %s as JSON, got invalid JSON at column %d", where,
                       section ? "an object" : "an array", (int)(end ? end - text + 1 : 1));
    bt_status st;
    if (section && !cJSON_IsObject(v))
        st = s_expected(where, "an object of the section's keys", v);
    else if (section)
        st = s_apply_section(v, path, "--set", cfg);
    else if (strcmp(path, "data.sources") == 0)
        st = s_apply_sources(v, "--set", cfg);
    else if (strcmp(path, "variants") == 0)
        st = s_apply_variants(v, "--set", cfg);
    else
        st = s_apply_eval_array(v, strcmp(path, "eval.datasets") == 0, "--set", cfg);
    cJSON_Delete(v);
    return st;
}

/*  "key.path=value" as --set gives it; errors start with where ("--set key.path=value"). */
static bt_status s_apply_override(const char *text, const char *where, bt_config *cfg) {
    char path[128];
    const char *eq = strchr(text, '=');
    if (!eq)
        return bt_fail(BT_EINVAL, "%s: expected key.path=value", where);
    snprintf(path, sizeof path, "%.*s", (int)(eq - text), text);
    const char *value = eq + 1;
    static const char *const arrays[] = {"eval.datasets", "eval.probes", "data.sources",
                                         "variants"};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        size_t n = strlen(arrays[i]);
        if (strcmp(path, arrays[i]) == 0)
            return s_apply_json_override(path, value, where, cfg);
        if (strncmp(path, arrays[i], n) == 0 && (path[n] == '[' || path[n] == '.'))
            return bt_fail(BT_EINVAL,
                           "%s: %s is an array: --set replaces it whole (--set '%s=[...]', the "
                           "entries as JSON)",
                           where, arrays[i], arrays[i]);
    }
    const s_key *k = s_find(path);
    if (!k && s_is_section(path))
        return s_apply_json_override(path, value, where, cfg);
    if (!k)
        return s_unknown(where, path);
    bool as_text = (k->type == S_STR || k->type == S_ENUM) && value[0] != '"';
    cJSON *v = as_text ? NULL : cJSON_ParseWithOpts(value, NULL, true);
    if (!v)
        v = cJSON_CreateString(value);
    if (!v)
        return bt_fail(BT_ENOMEM, "%s: out of memory", where);
    bt_status st = s_set(k, v, where, cfg);
    cJSON_Delete(v);
    return st;
}

/*  Re-raises a sub-config validator's last error as "src: prefix<message without strip>". */
static bt_status s_reraise(const char *src, const char *prefix, const char *strip) {
    char msg[512];
    const char *e = bt_last_error();
    size_t n = strlen(strip);
    snprintf(msg, sizeof msg, "%s", strncmp(e, strip, n) == 0 ? e + n : e);
    return bt_fail(BT_EINVAL, "%s: %s%s", src, prefix, msg);
}

/*  Fills a dataset's unset fields from the flat eval.* keys and checks it. */
static bt_status s_check_dataset(bt_config *cfg, int i, const char *src) {
    bt_eval_dataset *d = &cfg->eval.datasets[i];
    char where[256];
    snprintf(where, sizeof where, "%s: eval.datasets[%d]", src, i);
    d->data_source = -1;
    for (int k = 0; k < cfg->data.n_sources && d->source[0]; k++)
        if (strcmp(cfg->data.sources[k].name, d->source) == 0)
            d->data_source = k;
    bool from_task = d->source[0] == '\0' || d->data_source >= 0;
    if (d->count < 0)
        d->count = from_task && d->kind != BT_EVAL_PROBES ? cfg->eval.heldout_count : 0;
    if (d->samples < 0)
        d->samples = d->kind == BT_EVAL_GENERATE ? cfg->eval.samples : 1;
    if (isnan(d->temperature))
        d->temperature = d->kind == BT_EVAL_GENERATE ? cfg->eval.temperature : 0.0;
    if (d->max_new_tokens < 0)
        d->max_new_tokens = cfg->eval.max_new_tokens;
    if (d->max_new_tokens == 0)
        d->max_new_tokens = cfg->grpo.max_new_tokens;
    if (d->every_steps < 0)
        d->every_steps = cfg->eval.every_steps;
    if (d->every_epochs < 0)
        d->every_epochs = cfg->eval.every_epochs;
    if (isnan(d->every_seconds))
        d->every_seconds = cfg->eval.every_seconds;
    if (isnan(d->every_tokens))
        d->every_tokens = cfg->eval.every_tokens;
    if (!d->name[0])
        return bt_fail(BT_EINVAL, "%s.name: expected a name, got \"\"", where);
    for (int j = 0; j < i; j++)
        if (strcmp(cfg->eval.datasets[j].name, d->name) == 0)
            return bt_fail(BT_EINVAL, "%s.name: \"%s\" is already the name of eval.datasets[%d]",
                           where, d->name, j);
    if (d->temperature != 0 && d->temperature < S_TEMP_MIN)
        return bt_fail(BT_EINVAL,
                       "%s.temperature: expected 0 (greedy) or a number in [%g, %g], got %g", where,
                       S_TEMP_MIN, S_TEMP_MAX, d->temperature);
    if (d->kind == BT_EVAL_GENERATE && d->samples > 1 && d->temperature == 0)
        return bt_fail(BT_EINVAL, "%s.temperature: expected a number > 0 when samples > 1, got 0",
                       where);
    if (d->kind != BT_EVAL_GENERATE && (d->samples != 1 || d->robustness))
        return bt_fail(BT_EINVAL, "%s: samples and robustness apply to kind \"generate\" only",
                       where);
    if (d->kind == BT_EVAL_PROBES && cfg->eval.n_probes == 0 && !cfg->eval.probes_source[0])
        return bt_fail(BT_EINVAL,
                       "%s.kind: \"probes\" needs eval.probes or eval.probes_source, and both are "
                       "empty",
                       where);
    if (d->kind == BT_EVAL_PROBES && !from_task)
        return bt_fail(BT_EINVAL,
                       "%s.source: probes come from eval.probes and eval.probes_source, expected "
                       "\"\"",
                       where);
    if (d->kind == BT_EVAL_CHOICES && (from_task || d->data_source >= 0))
        return bt_fail(BT_EINVAL,
                       "%s.source: \"choices\" reads a JSONL file of {\"context\", \"choices\", "
                       "\"answer\"} lines, got \"%s\"",
                       where, d->source);
    if (d->num_fewshot > 0 && d->kind != BT_EVAL_GENERATE && d->kind != BT_EVAL_CHOICES)
        return bt_fail(BT_EINVAL,
                       "%s.num_fewshot: few-shot prompts are for generate and choices datasets, "
                       "expected 0, got %lld",
                       where, (long long)d->num_fewshot);
    if (d->verifier && (d->kind != BT_EVAL_GENERATE || from_task))
        return bt_fail(BT_EINVAL,
                       "%s.verifier: a verifier of its own is for a generate dataset with a JSONL "
                       "source (a data source or the task's held-out set has its verifier)",
                       where);
    if (d->verifier - 1 == BT_SOURCE_VERIFY_CODE && (d->num_fewshot > 0 || d->robustness))
        return bt_fail(BT_EINVAL,
                       "%s: a code record's answer is its tests, so num_fewshot and robustness do "
                       "not apply to the code verifier",
                       where);
    if (d->kind == BT_EVAL_PERPLEXITY && d->data_source >= 0)
        return bt_fail(BT_EINVAL,
                       "%s.source: perplexity of a data source is not supported, "
                       "expected a {\"text\"} JSONL file",
                       where);
    if (from_task && d->data_source < 0 && d->kind != BT_EVAL_PROBES && cfg->data.n_sources == 0 &&
        cfg->task.kind == BT_CONFIG_TASK_ARITHMETIC &&
        (d->count == 0 || d->count > cfg->task.heldout_size))
        return bt_fail(BT_EINVAL,
                       "%s.count: expected an integer in [1, task.heldout_size (%" PRId64
                       ")], got %" PRId64,
                       where, cfg->task.heldout_size, d->count);
    if (d->every_epochs > 0 && cfg->data.n_sources == 0 &&
        cfg->task.kind == BT_CONFIG_TASK_ARITHMETIC && cfg->task.epoch_size == 0)
        return bt_fail(BT_EINVAL,
                       "%s.every_epochs: the arithmetic stream has no epochs: set "
                       "task.epoch_size too",
                       where);
    bt_trigger_config tc;
    bt_config_trigger(cfg, i, &tc);
    if (bt_trigger_config_validate(&tc) != BT_OK)
        return s_reraise(where, "trigger: ", "");
    return BT_OK;
}

/*  A probe has one of the two forms: (prompt, non-empty target) or non-empty (better, worse). */
static bool s_is_probe(const bt_eval_probe *p) {
    bool target = p->prompt[0] || p->target[0], pair = p->better[0] || p->worse[0];
    return target != pair && (!target || p->target[0]) && (!pair || (p->better[0] && p->worse[0]));
}
#define S_PROBE_FORMS                                                                              \
    "either \"prompt\" and a non-empty \"target\", or non-empty \"better\" and \"worse\""

static bt_status s_check_eval(bt_config *cfg, const char *src) {
    for (int i = 0; i < cfg->eval.n_probes; i++) {
        bt_eval_probe *p = &cfg->eval.probes[i];
        if (!s_is_probe(p))
            return bt_fail(BT_EINVAL, "%s: eval.probes[%d]: expected " S_PROBE_FORMS, src, i);
        if (!p->name[0])
            snprintf(p->name, sizeof p->name, "p%d", i);
        for (int j = 0; j < i; j++)
            if (strcmp(cfg->eval.probes[j].name, p->name) == 0)
                return bt_fail(BT_EINVAL, "%s: eval.probes[%d].name: \"%s\" is used twice", src, i,
                               p->name);
    }
    bool probes = false;
    for (int i = 0; i < cfg->eval.n_datasets; i++)
        probes |= cfg->eval.datasets[i].kind == BT_EVAL_PROBES;
    size_t base = offsetof(bt_config, eval.datasets);
    if (cfg->eval.n_datasets == 0 && cfg->data.n_sources == 0) { /* the flat keys: one dataset */
        s_entry_init(s_dataset_keys, S_NDATASET_KEYS, base, cfg);
        snprintf(cfg->eval.datasets[0].name, BT_EVAL_NAME_MAX, "heldout");
        cfg->eval.n_datasets = 1;
    }
    for (int k = 0; cfg->eval.n_datasets == 0 && k < cfg->data.n_sources; k++) {
        /* with data.sources: one held-out dataset per source, named after it */
        if (strlen(cfg->data.sources[k].name) >= BT_EVAL_NAME_MAX)
            return bt_fail(BT_EINVAL,
                           "%s: data.sources[%d].name: at most %d bytes, to name its held-out "
                           "dataset, got \"%s\"",
                           src, k, BT_EVAL_NAME_MAX - 1, cfg->data.sources[k].name);
        s_entry_init(s_dataset_keys, S_NDATASET_KEYS, base + (size_t)k * sizeof(bt_eval_dataset),
                     cfg);
        bt_eval_dataset *d = &cfg->eval.datasets[k];
        snprintf(d->name, BT_EVAL_NAME_MAX, "%s", cfg->data.sources[k].name);
        snprintf(d->source, sizeof d->source, "%s", cfg->data.sources[k].name);
        if (k == cfg->data.n_sources - 1)
            cfg->eval.n_datasets = cfg->data.n_sources;
    }
    if ((cfg->eval.n_probes > 0 || cfg->eval.probes_source[0]) && !probes) {
        int i = cfg->eval.n_datasets;
        if (i == BT_EVAL_MAX_DATASETS)
            return bt_fail(BT_EINVAL,
                           "%s: eval.datasets: no room for the probes dataset (%d at most)", src,
                           BT_EVAL_MAX_DATASETS);
        s_entry_init(s_dataset_keys, S_NDATASET_KEYS, base + (size_t)i * sizeof(bt_eval_dataset),
                     cfg);
        snprintf(cfg->eval.datasets[i].name, BT_EVAL_NAME_MAX, "probes");
        cfg->eval.datasets[i].kind = BT_EVAL_PROBES;
        cfg->eval.n_datasets++;
    }
    for (int i = 0; i < cfg->eval.n_datasets; i++)
        BT_TRY(s_check_dataset(cfg, i, src));
    return BT_OK;
}

/*  Resolves tuner.lr_plateau.dataset "" to the first dataset, then checks the enabled rules. */
static bt_status s_check_tuner(bt_config *cfg, const char *src) {
    bt_tuner_plateau_config *pl = &cfg->tuner.lr_plateau;
    if (!pl->dataset[0])
        snprintf(pl->dataset, sizeof pl->dataset, "%s", cfg->eval.datasets[0].name);
    bool found = false;
    for (int i = 0; i < cfg->eval.n_datasets; i++)
        found |= strcmp(cfg->eval.datasets[i].name, pl->dataset) == 0;
    if (pl->enabled && !found)
        return bt_fail(BT_EINVAL,
                       "%s: tuner.lr_plateau.dataset: expected the name of an eval.datasets "
                       "entry, got \"%s\"",
                       src, pl->dataset);
    bt_tuner_config tc;
    bt_config_tuner(cfg, &tc);
    if (bt_tuner_config_validate(&tc) != BT_OK)
        return s_reraise(src, "", "");
    return BT_OK;
}

/*  Resolves scaling.dataset "" to the first perplexity dataset; with scaling on, it must name one.
 */
static bt_status s_check_scaling(bt_config *cfg, const char *src) {
    char *name = cfg->scaling.dataset;
    bool found = false;
    for (int i = 0; i < cfg->eval.n_datasets && !found; i++) {
        const bt_eval_dataset *d = &cfg->eval.datasets[i];
        if (d->kind == BT_EVAL_PERPLEXITY && (!name[0] || !strcmp(d->name, name))) {
            snprintf(name, sizeof cfg->scaling.dataset, "%s", d->name);
            found = true;
        }
    }
    if (cfg->scaling.enabled && !found)
        return bt_fail(BT_EINVAL,
                       "%s: scaling.dataset: expected the name of a perplexity eval.datasets "
                       "entry, got \"%s\"",
                       src, name);
    return BT_OK;
}

/*  The completion width of a one-task config's sequences, in tokens: an episode's (model and
    observation tokens) when it has an environment, else one completion's. */
static int64_t s_completion_width(const bt_config *one) {
    return one->task.env != BT_CONFIG_ENV_NONE ? one->task.max_episode_tokens
                                               : one->grpo.max_new_tokens;
}

/*  The episode keys of a one-task config (the task without data.sources, or one source's) against
    each other; then task.max_episode_tokens 0 resolved to 2 x max_turns x grpo.max_new_tokens, at
    most BT_CONFIG_TOKENS_MAX. */
static bt_status s_check_episode(bt_config *cfg, const char *src) {
    const char *env = s_envs[cfg->task.env];
    bool service = cfg->task.env == BT_CONFIG_ENV_SERVICE;
    if (cfg->task.max_turns > 1 && cfg->task.env == BT_CONFIG_ENV_NONE)
        return bt_fail(BT_EINVAL,
                       "%s: task.max_turns: expected 1 without task.env (an episode of more "
                       "turns needs an environment to answer between them: set task.env), got "
                       "%" PRId64,
                       src, cfg->task.max_turns);
    if (!strcmp(s_env_rewards[cfg->task.env_reward], "env") && cfg->task.env == BT_CONFIG_ENV_NONE)
        return bt_fail(BT_EINVAL,
                       "%s: task.env_reward: expected \"sum\" or \"final\" without task.env (no "
                       "environment gives rewards), got \"env\"",
                       src);
    if (service && !cfg->task.env_service[0])
        return bt_fail(BT_EINVAL,
                       "%s: task.env_service: expected an endpoint \"tcp://HOST:PORT\" or "
                       "\"ipc://PATH\" when task.env is \"service\", got \"\"",
                       src);
    if (!service && cfg->task.env_service[0])
        return bt_fail(BT_EINVAL,
                       "%s: task.env_service: expected \"\" unless task.env is \"service\" (it is "
                       "\"%s\"), got \"%s\"",
                       src, env, cfg->task.env_service);
    if (!service && cfg->task.env_server_key[0])
        return bt_fail(BT_EINVAL,
                       "%s: task.env_server_key: expected \"\" unless task.env is \"service\" (it "
                       "is \"%s\"), got a key",
                       src, env);
    if (cfg->task.env_server_key[0] && cfg->task.env_insecure)
        return bt_fail(BT_EINVAL,
                       "%s: task.env_insecure: expected false with task.env_server_key (CURVE), "
                       "got true",
                       src);
    if (service && !strncmp(cfg->task.env_service, "tcp://", 6) && !cfg->task.env_server_key[0] &&
        !cfg->task.env_insecure)
        return bt_fail(BT_EINVAL,
                       "%s: task.env_service: \"%s\": a tcp:// endpoint needs CURVE: "
                       "task.env_server_key (the service's public key, from `baton keygen`) or, "
                       "on a trusted network, task.env_insecure: true",
                       src, cfg->task.env_service);
    if (cfg->task.max_episode_tokens == 0) {
        double width = 2.0 * (double)cfg->task.max_turns * (double)cfg->grpo.max_new_tokens;
        cfg->task.max_episode_tokens = width < S_TOKENS_MAX ? (int64_t)width : S_TOKENS_MAX;
    }
    if (cfg->task.env != BT_CONFIG_ENV_NONE &&
        cfg->task.max_episode_tokens < cfg->grpo.max_new_tokens)
        return bt_fail(BT_EINVAL,
                       "%s: task.max_episode_tokens: expected 0 or an integer in "
                       "[grpo.max_new_tokens (%" PRId64 "), %d] (an episode holds at least one "
                       "model turn), got %" PRId64,
                       src, cfg->grpo.max_new_tokens, BT_CONFIG_TOKENS_MAX,
                       cfg->task.max_episode_tokens);
    if (cfg->task.observation_template[0]) { /* a template that cannot apply fails now, by name */
        char *probe = NULL;
        size_t len = 0;
        if (bt_chat_observation(cfg->task.chat_template, cfg->task.observation_template, "", 0,
                                &probe, &len) != BT_OK)
            return s_reraise(src, "task.observation_template: ", "observation template: ");
        free(probe);
    }
    if (cfg->task.demonstration_key[0] && cfg->task.kind != BT_CONFIG_TASK_JSONL)
        return bt_fail(BT_EINVAL,
                       "%s: task.demonstration_key: \"%s\": only a JSONL task (task.kind "
                       "\"jsonl\") has records to demonstrate; an arithmetic task demonstrates "
                       "its answers",
                       src, cfg->task.demonstration_key);
    return BT_OK;
}

/*  Checks between keys, then resolves the 0 = "follow another key" values. */
bt_status bt_config_source(const bt_config *cfg, int k, bt_config *out);

int64_t bt_config_completion_width(const bt_config *cfg) {
    if (cfg->data.n_sources == 0)
        return s_completion_width(cfg);
    bt_config *one = malloc(sizeof *one);
    int64_t widest = 0;
    for (int k = 0; one && k < cfg->data.n_sources; k++)
        if (bt_config_source(cfg, k, one) == BT_OK && s_completion_width(one) > widest)
            widest = s_completion_width(one);
    free(one);
    return widest > 0 ? widest : cfg->grpo.max_new_tokens;
}

/*  Every source resolves to a valid single-task config; data.epoch_source names one. */
static bt_status s_check_sources(const bt_config *cfg, const char *src) {
    if (cfg->data.n_sources == 0) {
        if (cfg->data.epoch_source[0])
            return bt_fail(BT_EINVAL,
                           "%s: data.epoch_source: \"%s\" names no source (there is no "
                           "data.sources)",
                           src, cfg->data.epoch_source);
        return BT_OK;
    }
    bool found = !cfg->data.epoch_source[0];
    for (int k = 0; k < cfg->data.n_sources; k++)
        found |= strcmp(cfg->data.sources[k].name, cfg->data.epoch_source) == 0;
    if (!found)
        return bt_fail(BT_EINVAL,
                       "%s: data.epoch_source: expected the name of a data.sources entry, "
                       "got \"%s\"",
                       src, cfg->data.epoch_source);
    bt_config *one = malloc(sizeof *one);
    if (!one)
        return bt_fail(BT_ENOMEM, "%s: out of memory", src);
    bt_status st = BT_OK;
    for (int k = 0; k < cfg->data.n_sources && st == BT_OK; k++)
        if ((st = bt_config_source(cfg, k, one)) != BT_OK)
            st = s_reraise(src, "", "");
    free(one);
    return st;
}

static bt_status s_check(bt_config *cfg, const char *src) {
    if (cfg->model.num_key_value_heads == 0) /* Hugging Face: unset means full attention */
        cfg->model.num_key_value_heads = cfg->model.num_attention_heads;
    if (bt_model_config_validate(&cfg->model) != BT_OK)
        return s_reraise(src, "model.", "config.json: ");
    if (cfg->data.n_sources == 0 && cfg->task.kind == BT_CONFIG_TASK_JSONL && !cfg->task.train[0])
        return bt_fail(BT_EINVAL,
                       "%s: task.train: expected a JSONL file path when task.kind is \"jsonl\", "
                       "got \"\"",
                       src);
    if (cfg->data.n_sources == 0 && cfg->task.kind == BT_CONFIG_TASK_ARITHMETIC &&
        cfg->eval.heldout_count > cfg->task.heldout_size)
        return bt_fail(BT_EINVAL,
                       "%s: eval.heldout_count: expected an integer <= task.heldout_size (%" PRId64
                       "), got %" PRId64,
                       src, cfg->task.heldout_size, cfg->eval.heldout_count);
    if (cfg->workers.expiry_ms <= cfg->workers.heartbeat_ms)
        return bt_fail(BT_EINVAL,
                       "%s: workers.expiry_ms: expected an integer > workers.heartbeat_ms (%" PRId64
                       "), got %" PRId64,
                       src, cfg->workers.heartbeat_ms, cfg->workers.expiry_ms);
    if (cfg->eval.temperature != 0 && cfg->eval.temperature < S_TEMP_MIN)
        return bt_fail(BT_EINVAL,
                       "%s: eval.temperature: expected 0 (greedy) or a number in [%g, %g], got %g",
                       src, S_TEMP_MIN, S_TEMP_MAX, cfg->eval.temperature);
    if (cfg->eval.samples > 1 && cfg->eval.temperature == 0)
        return bt_fail(BT_EINVAL,
                       "%s: eval.temperature: expected a number > 0 when eval.samples > 1, got 0",
                       src);
    if (cfg->eval.max_new_tokens == 0)
        cfg->eval.max_new_tokens = cfg->grpo.max_new_tokens;
    if (cfg->data.n_sources == 0) /* with data.sources, the task.* keys are each source's */
        BT_TRY(s_check_episode(cfg, src));
    BT_TRY(s_check_eval(cfg, src));
    BT_TRY(s_check_sources(cfg, src));
    if (cfg->grpo.max_tokens == 0) /* Dr. GRPO's normaliser: the widest completion */
        cfg->grpo.max_tokens = bt_config_completion_width(cfg);
    BT_TRY(s_check_tuner(cfg, src));
    BT_TRY(s_check_scaling(cfg, src));
    if (cfg->task.chat_template[0]) { /* a template that cannot apply fails now, by name */
        char *probe = NULL;
        if (cfg->task.kind != BT_CONFIG_TASK_JSONL && cfg->data.n_sources == 0)
            return bt_fail(BT_EINVAL,
                           "%s: task.chat_template: applies to \"jsonl\" tasks "
                           "(prompts of a pretrained model), not to the arithmetic task",
                           src);
        if (bt_chat_apply(cfg->task.chat_template, cfg->task.system_prompt, "", &probe) != BT_OK)
            return s_reraise(src, "task.chat_template: ", "chat template: ");
        free(probe);
    }
    if (cfg->pbt.enabled && cfg->n_variants < 2)
        return bt_fail(BT_EINVAL,
                       "%s: pbt.enabled: population-based training needs at least 2 "
                       "variants, got %d",
                       src, cfg->n_variants);
    if (cfg->pbt.lr_min > cfg->pbt.lr_max)
        return bt_fail(BT_EINVAL, "%s: pbt.lr_max: expected a number >= pbt.lr_min (%g), got %g",
                       src, cfg->pbt.lr_min, cfg->pbt.lr_max);
    const struct {
        const char *name;
        double lo, hi;
    } bounds[] = {{"kl_coef", cfg->pbt.kl_coef_min, cfg->pbt.kl_coef_max},
                  {"temperature", cfg->pbt.temperature_min, cfg->pbt.temperature_max},
                  {"clip_high", cfg->pbt.clip_high_min, cfg->pbt.clip_high_max}};
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++)
        if (bounds[i].lo > bounds[i].hi)
            return bt_fail(BT_EINVAL,
                           "%s: pbt.%s_max: expected a number >= pbt.%s_min (%g), got %g", src,
                           bounds[i].name, bounds[i].name, bounds[i].lo, bounds[i].hi);
    cfg->pbt.explore_mask = s_pbt_mask(cfg->pbt.explore);
    bt_grpo_config grpo;
    bt_config_grpo(cfg, &grpo);
    if (bt_grpo_config_validate(&grpo) != BT_OK)
        return s_reraise(src, "", "");
    const char *phases[] = {"sft: ", "grpo: "};
    for (int phase = BT_CONFIG_PHASE_SFT; phase <= BT_CONFIG_PHASE_GRPO; phase++) {
        if (phase == BT_CONFIG_PHASE_GRPO && cfg->grpo.steps == 0)
            continue; /* no GRPO step: its schedule is never used (an SFT-only run) */
        bt_lr_schedule lr;
        bt_config_lr(cfg, (bt_config_phase)phase, &lr);
        if (bt_lr_schedule_validate(&lr) != BT_OK)
            return s_reraise(src, phases[phase], "");
    }
    return BT_OK;
}

/*  The longest prompt, in tokens, that a one-task config's task makes, where that is known without
    reading a file: an arithmetic problem "A+B=" of two `digits`-digit operands after the BOS
    (tokens are bytes or longer); any other prompt holds at least one token. */
static int64_t s_longest_prompt(const bt_config *one) {
    return one->task.kind == BT_CONFIG_TASK_ARITHMETIC ? 2 * one->task.digits + 3 : 1;
}

/*  A prompt of `prompt` tokens and max_new more fit a context of ctx tokens. */
static bt_status s_check_room(const char *src, const char *key, int64_t max_new, int64_t prompt,
                              int64_t ctx, const char *ctx_what) {
    if (prompt + max_new <= ctx)
        return BT_OK;
    return bt_fail(BT_EINVAL,
                   "%s: %s: expected an integer in [1, %" PRId64 "] (%s %" PRId64
                   " less the longest prompt, %" PRId64 " tokens), got %" PRId64,
                   src, key, ctx - prompt, ctx_what, ctx, prompt, max_new);
}

/*  Prompt and completion fit the model's context (ctx tokens, named ctx_what): the longest
    training prompt with grpo.max_new_tokens, each generate dataset's longest prompt with its
    max_new_tokens.  The workers refuse a longer sequence (bt_generate, the trainer). */
static bt_status s_check_context(const bt_config *cfg, int64_t ctx, const char *ctx_what,
                                 const char *src) {
    bt_config *one = malloc(sizeof *one);
    if (!one)
        return bt_fail(BT_ENOMEM, "%s: out of memory", src);
    int64_t prompt[BT_CONFIG_MAX_SOURCES], episode[BT_CONFIG_MAX_SOURCES], longest = 1;
    bt_status st = BT_OK;
    for (int k = 0; k < bt_config_n_sources(cfg) && st == BT_OK; k++) {
        st = bt_config_source(cfg, k, one);
        prompt[k] = st == BT_OK ? s_longest_prompt(one) : 1;
        longest = prompt[k] > longest ? prompt[k] : longest;
        episode[k] =
            st == BT_OK && one->task.env != BT_CONFIG_ENV_NONE ? one->task.max_episode_tokens : 0;
    }
    free(one);
    if (st != BT_OK)
        return s_reraise(src, "", "");
    BT_TRY(
        s_check_room(src, "grpo.max_new_tokens", cfg->grpo.max_new_tokens, longest, ctx, ctx_what));
    for (int k = 0; k < bt_config_n_sources(cfg); k++) { /* an episode: prompt and all its turns */
        char key[64];
        if (cfg->data.n_sources > 0)
            snprintf(key, sizeof key, "data.sources[%d].max_episode_tokens", k);
        else
            snprintf(key, sizeof key, "task.max_episode_tokens");
        if (episode[k] > 0)
            BT_TRY(s_check_room(src, key, episode[k], prompt[k], ctx, ctx_what));
    }
    for (int i = 0; i < cfg->eval.n_datasets; i++) {
        const bt_eval_dataset *d = &cfg->eval.datasets[i];
        if (d->kind != BT_EVAL_GENERATE)
            continue;
        int64_t p = d->data_source >= 0 ? prompt[d->data_source] : d->source[0] ? 1 : longest;
        char key[64];
        snprintf(key, sizeof key, "eval.datasets[%d].max_new_tokens", i);
        BT_TRY(s_check_room(src, key, d->max_new_tokens, p, ctx, ctx_what));
    }
    return BT_OK;
}

/*  With variants: each variant's config. */
static bt_status s_check_variants(const bt_config *cfg, const char *src) {
    if (cfg->n_variants == 0)
        return BT_OK;
    bt_config *variant = malloc(sizeof *variant);
    if (!variant)
        return bt_fail(BT_ENOMEM, "%s: variants: out of memory", src);
    bt_status st = BT_OK;
    for (int k = 0; st == BT_OK && k < cfg->n_variants; k++) {
        st = bt_config_variant(cfg, k, variant);
        if (st != BT_OK)
            st = s_reraise(src, "", "");
        else if (!variant->model_path[0])
            st = s_check_context(variant, variant->model.max_position_embeddings,
                                 "model.max_position_embeddings", src);
    }
    free(variant);
    return st;
}

void bt_config_init(bt_config *cfg) {
    bt_config hf; /* only .model is set: the model defaults */
    bt_model_config_init(&hf.model);
    memset(cfg, 0, sizeof *cfg); /* field by field below, so padding stays zero */
    for (int i = 0; i < S_NKEYS; i++) {
        const s_key *k = &s_keys[i];
        if (k->type == S_STR)
            snprintf(s_field(k, cfg), k->size, "%s", k->def_str);
        else if (isnan(k->def))
            memcpy(s_field(k, cfg), s_cfield(k, &hf), k->size);
        else
            s_store(k, cfg, k->def);
    }
}

/*  A source named *.yaml or *.yml holds YAML (bt_yaml_parse); any other, JSON. */
static bool s_is_yaml(const char *source) {
    const char *dot = strrchr(source, '.');
    return dot && (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0);
}

/*  A YAML file's error "SRC: PATH: ..." as "SRC:LINE: PATH: ...", LINE that of PATH in the file,
    or of the nearest node above it the file has ("variants[0]" for a missing variants[0].name);
    other errors (--set's, those naming no key) as they are. */
static bt_status s_with_line(bt_status st, const bt_yaml_t *yaml, const char *src) {
    char msg[1024], path[256];
    snprintf(msg, sizeof msg, "%s", bt_last_error());
    size_t n = strlen(src);
    if (strncmp(msg, src, n) != 0 || strncmp(msg + n, ": ", 2) != 0)
        return st;
    const char *rest = msg + n + 2, *end = strstr(rest, ": ");
    if (!end || (size_t)(end - rest) >= sizeof path)
        return st;
    snprintf(path, sizeof path, "%.*s", (int)(end - rest), rest);
    int line = 0;
    while (path[0] && !(line = bt_yaml_line(yaml, path))) { /* up one level: ".key" or "[i]" */
        size_t cut = strlen(path);
        while (cut > 0 && path[cut] != '.' && path[cut] != '[')
            cut--;
        path[cut] = '\0';
    }
    return line ? bt_fail(st, "%s:%d: %s", src, line, rest) : st;
}

bt_status bt_config_parse(const char *text, const char *source, const char *const *overrides,
                          int n_overrides, bt_config *out) {
    bt_config_init(out);
    bt_yaml_t *yaml = NULL;
    if (s_is_yaml(source)) {
        BT_TRY(bt_yaml_parse(text, strlen(text), source, &yaml));
        text = bt_yaml_json(yaml);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, true);
    if (!root) {
        int line = 1, column = 1;
        for (const char *c = text; end && c < end; c++) {
            line += *c == '\n';
            column = *c == '\n' ? 1 : column + 1;
        }
        bt_yaml_destroy(&yaml);
        return bt_fail(BT_EFORMAT, "%s:%d:%d: invalid JSON", source, line, column);
    }
    bt_status st = s_apply_json(root, source, out);
    cJSON_Delete(root);
    for (int i = 0; st == BT_OK && i < n_overrides; i++) {
        char where[BT_CONFIG_SET_MAX + 16];
        snprintf(where, sizeof where, "--set %s", overrides[i]);
        st = s_apply_override(overrides[i], where, out);
    }
    if (st == BT_OK)
        st = s_check(out, source);
    if (st == BT_OK &&
        !out->model_path[0]) /* else model.path's config.json: bt_config_check_files */
        st = s_check_context(out, out->model.max_position_embeddings,
                             "model.max_position_embeddings", source);
    if (st == BT_OK)
        st = s_check_variants(out, source);
    if (yaml && st != BT_OK)
        st = s_with_line(st, yaml, source);
    bt_yaml_destroy(&yaml);
    return st;
}

bt_status bt_config_variant(const bt_config *base, int k, bt_config *out) {
    BT_ASSERT(k >= 0 && k < base->n_variants);
    *out = *base;
    const bt_config_variant_spec *v = &base->variants[k];
    char where[256];
    if (v->sources[0]) { /* its own data.sources, in place of the base's */
        snprintf(where, sizeof where, "variants[%d].set", k);
        cJSON *arr = cJSON_Parse(v->sources);
        bt_status st = arr ? s_apply_sources(arr, where, out)
                           : bt_fail(BT_EINVAL, "%s.data.sources: invalid JSON", where);
        cJSON_Delete(arr);
        BT_TRY(st);
    }
    for (int i = 0; i < v->n_sets; i++) {
        snprintf(where, sizeof where, "variants[%d].set.%.*s", k, (int)strcspn(v->sets[i], "="),
                 v->sets[i]);
        BT_TRY(s_apply_override(v->sets[i], where, out));
    }
    snprintf(where, sizeof where, "variants[%d]", k);
    BT_TRY(s_check(out, where));
    for (int i = 0; i < out->eval.n_datasets; i++) /* the base's datasets, the variant's sources */
        if (base->eval.datasets[i].data_source >= 0 && out->eval.datasets[i].data_source < 0)
            return bt_fail(BT_EINVAL,
                           "%s: eval.datasets[%d].source: \"%s\" names a source of the base "
                           "config, and the variant's data.sources has none of that name",
                           where, i, out->eval.datasets[i].source);
    return BT_OK;
}

/* ---- comparing ------------------------------------------------------------------------------ */

int bt_config_diff(const bt_config *a, const bt_config *b, const char **keys, int max) {
    int n = 0;
    for (int i = 0; i < S_NKEYS; i++)
        if (memcmp(s_cfield(&s_keys[i], a), s_cfield(&s_keys[i], b), s_keys[i].size) != 0) {
            if (n < max)
                keys[n] = s_keys[i].path;
            n++;
        }
    const struct {
        const char *path;
        bool differ;
    } arrays[] = {
        {"eval.datasets", a->eval.n_datasets != b->eval.n_datasets ||
                              memcmp(a->eval.datasets, b->eval.datasets,
                                     (size_t)a->eval.n_datasets * sizeof a->eval.datasets[0])},
        {"eval.probes", a->eval.n_probes != b->eval.n_probes ||
                            memcmp(a->eval.probes, b->eval.probes,
                                   (size_t)a->eval.n_probes * sizeof a->eval.probes[0])},
        {"data.sources", a->data.n_sources != b->data.n_sources ||
                             memcmp(a->data.sources, b->data.sources,
                                    (size_t)a->data.n_sources * sizeof a->data.sources[0])},
        {"variants",
         a->n_variants != b->n_variants ||
             memcmp(a->variants, b->variants, (size_t)a->n_variants * sizeof a->variants[0])},
    };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        if (arrays[i].differ) {
            if (n < max)
                keys[n] = arrays[i].path;
            n++;
        }
    return n;
}

bool bt_config_value_text(const bt_config *cfg, const char *path, char *buf, size_t len) {
    const s_key *k = s_find(path);
    const s_key *d = NULL;
    s_key entry;
    int i = -1;
    char key[64];
    if (!k && sscanf(path, "eval.datasets[%d].%63s", &i, key) == 2 && i >= 0 &&
        i < cfg->eval.n_datasets && (d = s_find_in(s_dataset_keys, S_NDATASET_KEYS, key))) {
        entry = s_at(d, offsetof(bt_config, eval.datasets) + (size_t)i * sizeof(bt_eval_dataset));
        k = &entry;
    }
    cJSON *item = k ? s_to_item(k, cfg) : NULL;
    char *text = item ? cJSON_PrintUnformatted(item) : NULL;
    if (text)
        snprintf(buf, len, "%s", text);
    cJSON_free(text);
    cJSON_Delete(item);
    return text != NULL;
}

/*  What an SFT warm start depends on besides its task and its early-stop dataset: keys, or
    sections when they end with '.'. */
static const char *const s_warm_keys[] = {"sft.",
                                          "model.",
                                          "run.seed",
                                          "run.precision",
                                          "grpo.beta1",
                                          "grpo.beta2",
                                          "grpo.weight_decay",
                                          "grpo.max_grad_norm",
                                          "grpo.micro_batch",
                                          "grpo.batching",
                                          "grpo.pack_tokens",
                                          "eval."};

/*  a and b agree on every key of the table that list names (section prefixes end with '.'). */
static bool s_same_keys(const bt_config *a, const bt_config *b, const char *const *list, size_t n) {
    for (int i = 0; i < S_NKEYS; i++) {
        const s_key *k = &s_keys[i];
        bool in = false;
        for (size_t j = 0; j < n && !in; j++) {
            size_t len = strlen(list[j]);
            in = list[j][len - 1] == '.' ? strncmp(k->path, list[j], len) == 0
                                         : strcmp(k->path, list[j]) == 0;
        }
        if (in && (k->type == S_STR ? strncmp(s_cfield(k, a), s_cfield(k, b), k->size) != 0
                                    : memcmp(s_cfield(k, a), s_cfield(k, b), k->size) != 0))
            return false;
    }
    return true;
}

/*  Source ka of a and source kb of b have the same task (every task.* key once resolved). */
static bool s_same_source(const bt_config *a, int ka, const bt_config *b, int kb) {
    bt_config *one = malloc(2 * sizeof *one);
    const char *const task[] = {"task."};
    bool same = one && bt_config_source(a, ka, &one[0]) == BT_OK &&
                bt_config_source(b, kb, &one[1]) == BT_OK && s_same_keys(&one[0], &one[1], task, 1);
    free(one);
    return same;
}

static int s_first_generate(const bt_config *c) {
    for (int i = 0; i < c->eval.n_datasets; i++)
        if (c->eval.datasets[i].kind == BT_EVAL_GENERATE)
            return i;
    return -1;
}

bool bt_config_same_warm_start(const bt_config *a, const bt_config *b) {
    if (a->sft.steps == 0 ||
        !s_same_keys(a, b, s_warm_keys, sizeof s_warm_keys / sizeof *s_warm_keys))
        return false;
    if ((a->grpo.kl_coef > 0) != (b->grpo.kl_coef > 0)) /* a KL reference is trainer state */
        return false;
    if (!s_same_source(a, 0, b, 0)) /* demonstrations and the canary: the first source's */
        return false;
    int da = s_first_generate(a), db = s_first_generate(b); /* SFT's early-stop evaluation */
    if (da != db)
        return false;
    if (da < 0)
        return true;
    bt_eval_dataset x = a->eval.datasets[da], y = b->eval.datasets[db];
    int sa = x.data_source, sb = y.data_source;
    x.data_source = y.data_source = 0;
    if (memcmp(&x, &y, sizeof x) != 0 || (sa < 0) != (sb < 0))
        return false;
    return sa < 0 || s_same_source(a, sa, b, sb);
}

/* ---- files ---------------------------------------------------------------------------------- */

/*  path (named by key) is a readable regular file, or with dir a folder. */
static bt_status s_check_path(const char *src, const char *key, const char *path, bool dir) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return bt_fail(BT_EINVAL, "%s: %s: \"%s\": no such %s", src, key, path,
                       dir ? "folder" : "file");
    if (dir ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode))
        return bt_fail(BT_EINVAL, "%s: %s: \"%s\": not a %s", src, key, path,
                       dir ? "folder" : "regular file");
    if (access(path, dir ? R_OK | X_OK : R_OK) != 0)
        return bt_fail(BT_EINVAL, "%s: %s: \"%s\": cannot be read", src, key, path);
    return BT_OK;
}

/*  The key data source k's path (task.train) or heldout (task.eval) came from: its own entry's,
    or the task.* key it inherits. */
static void s_source_path_key(const bt_config *cfg, int k, const char *task_key, char *buf,
                              size_t len) {
    snprintf(buf, len, "%s", task_key);
    if (cfg->data.n_sources == 0)
        return;
    const bt_config_source_spec *v = &cfg->data.sources[k];
    size_t n = strlen(task_key);
    for (int i = 0; i < v->n_sets; i++)
        if (strncmp(v->sets[i], task_key, n) == 0 && v->sets[i][n] == '=')
            snprintf(buf, len, "data.sources[%d].%s", k, s_source_key(v->sets[i]));
}

/*  Each JSONL source's files exist; key names start with prefix ("variants[1].set."). */
static bt_status s_check_source_files(const bt_config *cfg, const char *prefix, bt_config *one,
                                      const char *source) {
    char key[128], name[96];
    bt_status st = BT_OK;
    for (int k = 0; k < bt_config_n_sources(cfg) && st == BT_OK; k++) {
        st = bt_config_source(cfg, k, one);
        if (st == BT_OK && one->task.kind == BT_CONFIG_TASK_JSONL) {
            s_source_path_key(cfg, k, "task.train", name, sizeof name);
            snprintf(key, sizeof key, "%s%s", strncmp(name, "data.", 5) ? "" : prefix, name);
            st = s_check_path(source, key, one->task.train, false);
            s_source_path_key(cfg, k, "task.eval", name, sizeof name);
            snprintf(key, sizeof key, "%s%s", strncmp(name, "data.", 5) ? "" : prefix, name);
            if (st == BT_OK && one->task.eval[0])
                st = s_check_path(source, key, one->task.eval, false);
        }
    }
    return st;
}

/* ---- the probes file ------------------------------------------------------------------------ */

/*  Line line_no of the probes file: one probe, all[n], checked against all[0..n) (whose file
    lines are lines[]; 0: eval.probes).  Errors start with "PATH:LINE: ". */
static bt_status s_probe_line(const char *path, size_t line_no, const char *text,
                              bt_eval_probe *all, const size_t *lines, int64_t n) {
    char where[BT_CONFIG_PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%zu", path, line_no);
    cJSON *root = cJSON_Parse(text);
    bt_status st = cJSON_IsObject(root)
                       ? s_apply_entry(root, where, ": ", s_probe_keys, S_NPROBE_KEYS, 0, &all[n])
                       : bt_fail(BT_EINVAL, "%s: expected a JSON object of a probe", where);
    cJSON_Delete(root);
    BT_TRY(st);
    bt_eval_probe *p = &all[n];
    if (!s_is_probe(p))
        return bt_fail(BT_EINVAL, "%s: expected " S_PROBE_FORMS, where);
    if (!p->name[0])
        snprintf(p->name, sizeof p->name, "p%lld", (long long)n);
    for (int64_t j = 0; j < n; j++) {
        if (strcmp(all[j].name, p->name) != 0)
            continue;
        if (lines[j] == 0)
            return bt_fail(BT_EINVAL, "%s: name: \"%s\" is used twice (eval.probes[%lld] first)",
                           where, p->name, (long long)j);
        return bt_fail(BT_EINVAL, "%s: name: \"%s\" is used twice (line %zu first)", where, p->name,
                       lines[j]);
    }
    return BT_OK;
}

bt_status bt_config_probes(const bt_config *cfg, bt_eval_probe **out, int64_t *n_out) {
    const char *path = cfg->eval.probes_source;
    int64_t n = cfg->eval.n_probes, cap = path[0] ? BT_EVAL_MAX_PROBES : n;
    *out = NULL;
    *n_out = 0;
    if (cap == 0)
        return BT_OK;
    bt_eval_probe *all = calloc((size_t)cap, sizeof *all);
    size_t *lines = calloc((size_t)cap, sizeof *lines); /* each probe's line; 0: eval.probes */
    char *text = NULL, *at, *line;
    bt_status st = all && lines ? BT_OK : bt_fail(BT_ENOMEM, "probes: out of memory");
    if (st == BT_OK)
        memcpy(all, cfg->eval.probes, (size_t)n * sizeof *all);
    if (st == BT_OK && path[0])
        st = bt_file_read(path, (size_t)1 << 30, &text, NULL);
    size_t line_no = 0;
    for (at = text; st == BT_OK && (line = bt_text_next_line(&at, &line_no)); n++) {
        if (n == BT_EVAL_MAX_PROBES)
            st = bt_fail(BT_EINVAL,
                         "%s:%zu: one probe too many: at most %d in all, eval.probes' %d and %lld "
                         "lines of this file",
                         path, line_no, BT_EVAL_MAX_PROBES, cfg->eval.n_probes,
                         (long long)(BT_EVAL_MAX_PROBES - cfg->eval.n_probes));
        else
            st = s_probe_line(path, line_no, line, all, lines, n);
        if (st == BT_OK)
            lines[n] = line_no;
    }
    free(text);
    free(lines);
    if (st == BT_OK && path[0] && n == cfg->eval.n_probes)
        st = bt_fail(BT_EINVAL, "%s: no probes", path);
    if (st != BT_OK) {
        free(all);
        return st;
    }
    *out = all;
    *n_out = n;
    return BT_OK;
}

bt_status bt_config_check_files(const bt_config *cfg, const char *source) {
    char key[96], path[BT_CONFIG_PATH_MAX + 64];
    if (cfg->model_path[0]) {
        BT_TRY(s_check_path(source, "model.path", cfg->model_path, true));
        snprintf(path, sizeof path, "%s/config.json", cfg->model_path);
        BT_TRY(s_check_path(source, "model.path", path, false));
        snprintf(path, sizeof path, "%s/model.safetensors", cfg->model_path);
        if (access(path, F_OK) != 0)
            snprintf(path, sizeof path, "%s/model.safetensors.index.json", cfg->model_path);
        if (access(path, F_OK) != 0)
            return bt_fail(BT_EINVAL,
                           "%s: model.path: \"%s\": no model.safetensors or "
                           "model.safetensors.index.json in it",
                           source, cfg->model_path);
    }
    bt_config *one = malloc(sizeof *one);
    if (!one)
        return bt_fail(BT_ENOMEM, "%s: out of memory", source);
    bt_status st = s_check_source_files(cfg, "", one, source);
    for (int k = 0; k < cfg->n_variants && st == BT_OK; k++) { /* their own data.sources */
        bt_config *variant = malloc(sizeof *variant);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "variants[%d].set.", k);
        st = variant ? bt_config_variant(cfg, k, variant) : BT_ENOMEM;
        if (st == BT_OK && cfg->variants[k].sources[0])
            st = s_check_source_files(variant, prefix, one, source);
        free(variant);
    }
    for (int i = 0; i < cfg->eval.n_datasets && st == BT_OK; i++) {
        const bt_eval_dataset *d = &cfg->eval.datasets[i];
        snprintf(key, sizeof key, "eval.datasets[%d].source", i);
        if (d->source[0] && d->data_source < 0)
            st = s_check_path(source, key, d->source, false);
        snprintf(key, sizeof key, "eval.datasets[%d].fewshot_source", i);
        if (st == BT_OK && d->fewshot_source[0])
            st = s_check_path(source, key, d->fewshot_source, false);
    }
    if (st == BT_OK && cfg->eval.probes_source[0]) {
        bt_eval_probe *probes = NULL;
        int64_t n = 0;
        st = s_check_path(source, "eval.probes_source", cfg->eval.probes_source, false);
        if (st == BT_OK && bt_config_probes(cfg, &probes, &n) != BT_OK)
            st = s_reraise(source, "eval.probes_source: ", "");
        free(probes);
    }
    if (st == BT_OK && cfg->model_path[0]) { /* the model's own context */
        bt_model_config mc;
        snprintf(path, sizeof path, "%s/config.json", cfg->model_path);
        st = bt_model_config_load(path, &mc);
        char what[BT_CONFIG_PATH_MAX + 96];
        snprintf(what, sizeof what, "max_position_embeddings of %s", path);
        if (st != BT_OK)
            st = s_reraise(source, "model.path: ", "");
        if (st == BT_OK)
            st = s_check_context(cfg, mc.max_position_embeddings, what, source);
        for (int k = 0; k < cfg->n_variants && st == BT_OK; k++) {
            st = bt_config_variant(cfg, k, one);
            if (st == BT_OK)
                st = s_check_context(one, mc.max_position_embeddings, what, source);
        }
    }
    free(one);
    return st;
}

int bt_config_n_sources(const bt_config *cfg) {
    return cfg->data.n_sources > 0 ? cfg->data.n_sources : 1;
}

const char *bt_config_source_name(const bt_config *cfg, int k) {
    return cfg->data.n_sources > 0 ? cfg->data.sources[k].name : "task";
}

int bt_config_epoch_source(const bt_config *cfg) {
    for (int k = 0; k < cfg->data.n_sources; k++)
        if (strcmp(cfg->data.sources[k].name, cfg->data.epoch_source) == 0)
            return k;
    return 0;
}

bt_status bt_config_source(const bt_config *cfg, int k, bt_config *out) {
    BT_ASSERT(k >= 0 && k < bt_config_n_sources(cfg));
    *out = *cfg;
    if (cfg->data.n_sources == 0)
        return BT_OK;
    out->data.n_sources = 0; /* the copy is a one-task config: its task.* keys are the source's */
    out->data.epoch_source[0] = '\0';
    out->tuner.mixture.enabled = false;
    const bt_config_source_spec *v = &cfg->data.sources[k];
    char where[256];
    for (int i = 0; i < v->n_sets; i++) {
        const char *name = s_source_key(v->sets[i]);
        BT_ASSERT(name); /* parsing stored only these keys */
        snprintf(where, sizeof where, "data.sources[%d].%s", k, name);
        BT_TRY(s_apply_override(v->sets[i], where, out));
    }
    bool own_template = false;
    for (int i = 0; i < v->n_sets; i++)
        own_template |= strncmp(v->sets[i], "task.chat_template=", 19) == 0;
    if (out->task.kind == BT_CONFIG_TASK_ARITHMETIC && !own_template) { /* not inherited */
        out->task.chat_template[0] = '\0';
        out->task.system_prompt[0] = '\0';
    }
    snprintf(where, sizeof where, "data.sources[%d]", k);
    return s_check(out, where);
}

bt_status bt_config_load(const char *path, const char *const *overrides, int n_overrides,
                         bt_config *out) {
    char *text = NULL;
    size_t len = 0;
    bt_status st = bt_file_read(path, (size_t)1 << 20, &text, &len);
    if (st != BT_OK)
        return st;
    if (strlen(text) != len)
        st = bt_fail(BT_EFORMAT, "%s: a NUL byte at offset %zu", path, strlen(text));
    else
        st = bt_config_parse(text, path, overrides, n_overrides, out);
    free(text);
    return st;
}

/* ---- writing -------------------------------------------------------------------------------- */

static cJSON *s_to_item(const s_key *k, const bt_config *cfg) {
    const void *p = s_cfield(k, cfg);
    char num[32];
    if (k->type == S_INT && k->word && *(const int64_t *)p == 0)
        return cJSON_CreateString(k->word);
    if (k->type == S_INT) {
        snprintf(num, sizeof num, "%" PRId64, *(const int64_t *)p);
        return cJSON_CreateRaw(num);
    }
    if (k->type == S_NUM) {
        s_format_number(*(const double *)p, num, sizeof num);
        return cJSON_CreateRaw(num);
    }
    if (k->type == S_BOOL)
        return cJSON_CreateBool(*(const bool *)p);
    if (k->type == S_STR)
        return cJSON_CreateString(p);
    if (k->type == S_LIST) {
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; arr && k->names[i]; i++)
            if ((*(const uint32_t *)p & (1u << i)) &&
                !cJSON_AddItemToArray(arr, cJSON_CreateString(k->names[i]))) {
                cJSON_Delete(arr);
                return NULL;
            }
        return arr;
    }
    return cJSON_CreateString(k->names[*(const int *)p]);
}

/*  eval.datasets / eval.probes as an array of objects with every key. */
static bool s_array_to_json(cJSON *parent, const char *name, const s_key *keys, int n_keys,
                            size_t base, size_t stride, int n, const bt_config *cfg) {
    cJSON *arr = cJSON_AddArrayToObject(parent, name);
    for (int e = 0; arr && e < n; e++) {
        cJSON *obj = cJSON_CreateObject();
        if (!obj || !cJSON_AddItemToArray(arr, obj)) {
            cJSON_Delete(obj);
            return false;
        }
        for (int i = 0; i < n_keys; i++) {
            s_key k = s_at(&keys[i], base + (size_t)e * stride);
            cJSON *item = s_to_item(&k, cfg);
            if (!item || !cJSON_AddItemToObject(obj, k.path, item)) {
                cJSON_Delete(item);
                return false;
            }
        }
    }
    return arr != NULL;
}

/*  The object that holds key path, each made on first use: root's "grpo" for "grpo.lr", root's
    "tuner" object's "kl" for "tuner.kl.min"; *leaf is set to the key's last name ("lr", "min").
    NULL when out of memory. */
static cJSON *s_section_object(cJSON *root, const char *path, const char **leaf) {
    cJSON *obj = root;
    const char *name = path;
    for (const char *dot = strchr(name, '.'); obj && dot; name = dot + 1, dot = strchr(name, '.')) {
        char part[64];
        snprintf(part, sizeof part, "%.*s", (int)(dot - name), name);
        cJSON *child = cJSON_GetObjectItemCaseSensitive(obj, part);
        obj = child ? child : cJSON_AddObjectToObject(obj, part);
    }
    *leaf = name;
    return obj;
}

/*  {"name": ..., "set": {"key.path": value, ...}}, each value as the JSON the file would give. */
static bool s_variant_to_json(cJSON *arr, const bt_config_variant_spec *v) {
    cJSON *obj = cJSON_CreateObject();
    if (!obj || !cJSON_AddItemToArray(arr, obj)) {
        cJSON_Delete(obj);
        return false;
    }
    cJSON *set =
        cJSON_AddStringToObject(obj, "name", v->name) ? cJSON_AddObjectToObject(obj, "set") : NULL;
    if (set && v->sources[0]) {
        cJSON *sources = cJSON_Parse(v->sources);
        if (!sources || !cJSON_AddItemToObject(set, "data.sources", sources)) {
            cJSON_Delete(sources);
            return false;
        }
    }
    for (int i = 0; set && i < v->n_sets; i++) {
        char path[128];
        const char *text = v->sets[i];
        snprintf(path, sizeof path, "%.*s", (int)strcspn(text, "="), text);
        const char *value = text + strcspn(text, "=") + (text[strcspn(text, "=")] == '=');
        const s_key *k = s_find(path);
        BT_ASSERT(k); /* parsing stored only real keys */
        bool as_text = (k->type == S_STR || k->type == S_ENUM) && value[0] != '"';
        cJSON *item = as_text ? cJSON_CreateString(value) : cJSON_Parse(value);
        if (!item || !cJSON_AddItemToObject(set, path, item)) {
            cJSON_Delete(item);
            return false;
        }
    }
    return set != NULL;
}

/*  {"name": ..., "weight": ..., "kind": ..., "path": ...}: the source's keys as the file gives
    them. */
static bool s_source_to_json(cJSON *arr, const bt_config_source_spec *v) {
    cJSON *obj = cJSON_CreateObject();
    if (!obj || !cJSON_AddItemToArray(arr, obj)) {
        cJSON_Delete(obj);
        return false;
    }
    char num[32];
    s_format_number(v->weight, num, sizeof num);
    bool ok = cJSON_AddStringToObject(obj, "name", v->name) &&
              cJSON_AddItemToObject(obj, "weight", cJSON_CreateRaw(num));
    for (int i = 0; ok && i < v->n_sets; i++) {
        char path[128];
        const char *text = v->sets[i];
        snprintf(path, sizeof path, "%.*s", (int)strcspn(text, "="), text);
        const char *value = text + strcspn(text, "=") + 1;
        const char *name = s_source_key(text);
        const s_key *k = s_find(path);
        BT_ASSERT(k && name); /* parsing stored only these keys */
        bool as_text = (k->type == S_STR || k->type == S_ENUM) && value[0] != '"';
        cJSON *item = as_text ? cJSON_CreateString(value) : cJSON_Parse(value);
        ok = item && cJSON_AddItemToObject(obj, name, item);
        if (!ok)
            cJSON_Delete(item);
    }
    return ok;
}

char *bt_config_to_json(const bt_config *cfg) {
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    for (int i = 0; ok && i < S_NKEYS; i++) {
        const char *leaf = NULL;
        cJSON *sec = s_section_object(root, s_keys[i].path, &leaf);
        cJSON *item = sec ? s_to_item(&s_keys[i], cfg) : NULL;
        ok = item && cJSON_AddItemToObject(sec, leaf, item);
        if (!ok)
            cJSON_Delete(item);
    }
    cJSON *eval = ok ? cJSON_GetObjectItemCaseSensitive(root, "eval") : NULL;
    ok = ok && eval &&
         s_array_to_json(eval, "datasets", s_dataset_keys, S_NDATASET_KEYS,
                         offsetof(bt_config, eval.datasets), sizeof(bt_eval_dataset),
                         cfg->eval.n_datasets, cfg) &&
         s_array_to_json(eval, "probes", s_probe_keys, S_NPROBE_KEYS,
                         offsetof(bt_config, eval.probes), sizeof(bt_eval_probe),
                         cfg->eval.n_probes, cfg);
    cJSON *data = ok ? cJSON_GetObjectItemCaseSensitive(root, "data") : NULL;
    cJSON *sources = data && cfg->data.n_sources ? cJSON_AddArrayToObject(data, "sources") : NULL;
    ok = ok && data && (sources || !cfg->data.n_sources);
    for (int e = 0; ok && e < cfg->data.n_sources; e++)
        ok = s_source_to_json(sources, &cfg->data.sources[e]);
    cJSON *variants = ok ? cJSON_AddArrayToObject(root, "variants") : NULL;
    ok = ok && variants;
    for (int e = 0; ok && e < cfg->n_variants; e++)
        ok = s_variant_to_json(variants, &cfg->variants[e]);
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* ---- typed sub-configs ---------------------------------------------------------------------- */

void bt_config_grpo(const bt_config *cfg, bt_grpo_config *out) {
    *out =
        (bt_grpo_config){.clip_low = cfg->grpo.clip_low,
                         .clip_high = cfg->grpo.clip_high,
                         .kl_coef = cfg->grpo.kl_coef,
                         .kl_estimator = cfg->grpo.kl_estimator,
                         .entropy_coef = cfg->grpo.entropy_coef,
                         .loss_agg = cfg->grpo.loss_agg,
                         .max_tokens = cfg->grpo.max_tokens,
                         .adv_norm = cfg->grpo.adv_norm,
                         .decoupled = cfg->grpo.max_staleness > 0 && cfg->grpo.async_objective == 1,
                         .behav_weight_cap = cfg->grpo.behav_weight_cap,
                         .tis_cap = cfg->grpo.tis_cap,
                         .turn_gamma = cfg->grpo.turn_gamma};
}

void bt_config_lr(const bt_config *cfg, bt_config_phase phase, bt_lr_schedule *out) {
    if (phase == BT_CONFIG_PHASE_SFT)
        *out = (bt_lr_schedule){.kind = cfg->sft.warmup_steps > 0 ? BT_LR_WARMUP_LINEAR
                                                                  : BT_LR_CONSTANT,
                                .lr = cfg->sft.lr,
                                .warmup_steps = cfg->sft.warmup_steps,
                                .total_steps = cfg->sft.steps};
    else
        *out = (bt_lr_schedule){.kind = cfg->grpo.lr_schedule,
                                .lr = cfg->grpo.lr,
                                .min_lr = cfg->grpo.min_lr,
                                .warmup_steps = cfg->grpo.warmup_steps,
                                .total_steps = cfg->grpo.steps,
                                .decay_steps = cfg->grpo.decay_steps};
}

void bt_config_adamw(const bt_config *cfg, bt_adamw_config *out) {
    *out = bt_adamw_defaults();
    out->beta1 = cfg->grpo.beta1;
    out->beta2 = cfg->grpo.beta2;
    out->weight_decay = cfg->grpo.weight_decay;
}

bt_dtype bt_config_precision_dtype(const bt_config *cfg) {
    return cfg->run.precision == BT_CONFIG_PRECISION_BF16 ? BT_BF16 : BT_F32;
}

bt_dtype bt_config_resolve_save_dtype(const bt_config *cfg, bt_dtype source) {
    switch (cfg->save_dtype) {
    case BT_CONFIG_SAVE_DTYPE_AUTO: return source;
    case BT_CONFIG_SAVE_DTYPE_FLOAT32: return BT_F32;
    case BT_CONFIG_SAVE_DTYPE_BF16: return BT_BF16;
    case BT_CONFIG_SAVE_DTYPE_FLOAT16: return BT_F16;
    }
    return source;
}

void bt_config_task_arith(const bt_config *cfg, bt_source_arith_config *out) {
    *out = (bt_source_arith_config){.seed = (uint64_t)cfg->task.seed,
                                    .digits = (int)cfg->task.digits,
                                    .operators = cfg->task.operators,
                                    .heldout_size = (size_t)cfg->task.heldout_size,
                                    .format_reward = cfg->task.format_reward};
}

bt_status bt_config_new_task(const bt_config *cfg, bt_source_t **out) {
    if (cfg->task.kind == BT_CONFIG_TASK_ARITHMETIC) {
        bt_source_arith_config a;
        bt_config_task_arith(cfg, &a);
        return bt_source_new_arith(&a, out);
    }
    bt_source_jsonl_config j;
    bt_config_task_jsonl(cfg, &j);
    return bt_source_new_jsonl(&j, out);
}

bt_status bt_config_new_source(const bt_config *cfg, int k, bt_source_t **out,
                               uint64_t *epoch_size) {
    *out = NULL;
    bt_config *one = malloc(sizeof *one); /* a config is large: not on a worker's stack */
    if (!one)
        return bt_fail(BT_ENOMEM, "data.sources[%d]: out of memory", k);
    bt_status st = bt_config_source(cfg, k, one);
    if (st == BT_OK)
        st = bt_config_new_task(one, out);
    if (st == BT_OK && epoch_size)
        *epoch_size =
            one->task.epoch_size ? (uint64_t)one->task.epoch_size : bt_source_epoch_size(*out);
    free(one);
    return st;
}

uint64_t bt_config_eval_seed(const bt_config *cfg, int ds, int64_t step, int shard) {
    uint64_t x =
        (((uint64_t)cfg->run.seed * 7919u + (uint64_t)ds) * 1000003u + (uint64_t)step) * 64u +
        (uint64_t)shard;
    return x & ((UINT64_C(1) << 53) - 1); /* a wire integer */
}

void bt_config_tuner(const bt_config *cfg, bt_tuner_config *out) {
    bt_tuner_config_init(out);
    out->start.kl_coef = cfg->grpo.kl_coef;
    out->start.lr = cfg->grpo.lr;
    out->start.temperature = cfg->grpo.temperature;
    out->kl = cfg->tuner.kl;
    out->lr_kl = cfg->tuner.lr_kl;
    out->lr_plateau = cfg->tuner.lr_plateau;
    out->temperature = cfg->tuner.temperature;
    out->mixture = cfg->tuner.mixture;
    out->n_sources = bt_config_n_sources(cfg);
    for (int k = 0; k < cfg->data.n_sources; k++)
        out->start_weights[k] = cfg->data.sources[k].weight;
}

void bt_config_trigger(const bt_config *cfg, int i, bt_trigger_config *out) {
    const bt_eval_dataset *d = &cfg->eval.datasets[i];
    bt_trigger_config_init(out);
    out->every_steps = d->every_steps;
    out->every_epochs = d->every_epochs;
    out->every_seconds = d->every_seconds;
    out->every_tokens = d->every_tokens;
    out->adaptive = cfg->eval.adaptive;
    int64_t steps = d->every_steps > 0 ? d->every_steps : 1;
    out->floor = cfg->eval.adaptive_floor < steps ? cfg->eval.adaptive_floor : steps;
    out->ceiling = cfg->eval.adaptive_ceiling ? cfg->eval.adaptive_ceiling : 8 * steps;
    out->fast = cfg->eval.adaptive_fast;
    out->plateau = cfg->eval.adaptive_plateau;
    out->drop = cfg->eval.adaptive_drop;
    out->ema = cfg->eval.adaptive_ema;
}

void bt_config_task_jsonl(const bt_config *cfg, bt_source_jsonl_config *out) {
    *out = (bt_source_jsonl_config){.train_path = cfg->task.train,
                                    .heldout_path = cfg->task.eval[0] ? cfg->task.eval : NULL,
                                    .verifier = cfg->task.verifier,
                                    .seed = (uint64_t)cfg->task.seed,
                                    .chat_template = cfg->task.chat_template,
                                    .system_prompt = cfg->task.system_prompt,
                                    .code_timeout_s = cfg->task.code_timeout_s,
                                    .code_memory_bytes = (size_t)cfg->task.code_memory_mb << 20,
                                    .demonstration_key = cfg->task.demonstration_key,
                                    .observation_template = cfg->task.observation_template};
}
