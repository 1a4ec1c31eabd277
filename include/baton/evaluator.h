/*  evaluator.h — the evaluation core: held-out accuracy, reward, response length and the counts
    behind unbiased pass@k of a model on a task, as SUMS so that shards add up exactly.  No sockets
    of its own (completions may be scored by a reward service, reward_service.h).
    Threading: a call uses the model, task and result on the calling thread only.
    Lifetime: plain values; nothing to create or destroy.  Load published weights into the model
    with bt_weights_load (rollout.h). */
#ifndef BATON_EVALUATOR_H
#define BATON_EVALUATOR_H

#include "baton/choices.h"
#include "baton/config.h"
#include "baton/episodes.h"
#include "baton/messages.h"
#include "baton/model.h"
#include "baton/reward_service.h"
#include "baton/source.h"
#include "baton/status.h"
#include "baton/tensor.h"
#include "baton/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  BT_EVALUATOR_LEN_BINS and bt_evaluator_sums: messages.h. */
#define BT_EVALUATOR_NLL_CHUNK 16 /* texts per forward pass of bt_evaluator_nll */

typedef struct bt_evaluator_config {
    size_t start;           /* first held-out example of the shard (0) */
    size_t count;           /* examples in the shard; start + count <= held-out size (200) */
    int64_t samples;        /* completions per example, 1..BT_EVALUATOR_MAX_SAMPLES (1) */
    double temperature;     /* 0: greedy, only with samples == 1 (0) */
    int64_t top_k;          /* 0 = off (0) */
    double top_p;           /* 1 = off (1) */
    int64_t max_new_tokens; /* >= 1 (8) */
    int64_t batch;          /* sequences per bt_generate call, >= samples (256) */
    bool robustness;        /* also each of the task's perturbed prompts (false) */
    bt_reward_service_t *reward_service; /* borrowed; NULL: the task scores (NULL) */
    bt_env_t *env;                       /* borrowed; NULL: no environment (NULL) */
    bt_episode_config episode;           /* multi-turn episodes (bt_episode_config_init) */
} bt_evaluator_config;

void bt_evaluator_config_init(bt_evaluator_config *cfg);

/*  total += part.  BT_EINVAL when their sample counts differ or both hold probes. */
bt_status bt_evaluator_sums_add(bt_evaluator_sums *total, const bt_evaluator_sums *part);

/*  Evaluates held-out examples [cfg->start, cfg->start + cfg->count): prompt = BOS + bytes,
    cfg->samples completions each, generated in batches of up to cfg->batch sequences with the KV
    cache, decoded, and each batch scored with one bt_reward_score call (the task's verifier, or one
    request to cfg->reward_service); with cfg->robustness the perturbed prompts of each example too
    (their first completion counts).  maj@k groups answers with bt_source_canonical_answer.  Sampled
    completion j of held-out example i draws its tokens from bt_evaluator_key(key, perturbation,
    i, j) alone (bt_generate), so an example gets the same completions in any shard and batch;
    greedy ignores key.  Only ids the tokenizer has are generated
    (bt_sample_config.vocab_limit).  With cfg->env (or cfg->episode.max_turns > 1) every
    completion, robustness prompts' too, is an episode instead (bt_episodes_run, each turn of
    max_new_tokens; reset with the completion's key as its id and the example's prompt, answer
    and columns): the task scores its last model turn, its reward and correctness are
    bt_episode_reward_of's by cfg->episode.reward, and the episode sums count the clean ones;
    response lengths and generated_tokens count model tokens.  Fills *out (compute_s and
    peak_rss_mb included). */
bt_status bt_evaluator_run(bt_model *model, const bt_tokenizer_t *tok, const bt_source_t *task,
                           const bt_evaluator_config *cfg, uint64_t key, bt_evaluator_sums *out);

/*  The key of completion `sample` of held-out example index in an evaluation keyed by key, clean
    (perturb -1) or of perturbation perturb: (key, "eval", perturb + 1, index, sample) chained with
    bt_rng_key. */
uint64_t bt_evaluator_key(uint64_t key, int perturb, uint64_t index, int64_t sample);

/*  A text to score: the NLL of continuation's tokens given BOS + context.  eos: also score the
    EOS token after the continuation. */
typedef struct bt_nll_item {
    const char *context;      /* may be "" */
    const char *continuation; /* at least one byte */
    bool eos;
} bt_nll_item;

/*  Scores items[0..n): nll[i] = -sum log P(token | earlier tokens) over item i's continuation
    tokens (float64 sum of the model's float32 log-probs) and tokens[i] their count.  Items are
    run BT_EVALUATOR_NLL_CHUNK at a time in order, so a shard that starts at a multiple of the
    chunk computes each item exactly as a single pass over the whole set does. */
bt_status bt_evaluator_nll(bt_model *model, const bt_tokenizer_t *tok, const bt_nll_item *items,
                           int64_t n, double *nll, int64_t *tokens);

/*  Perplexity of task held-out examples [start, start + count): continuation = answer, with EOS
    (what the policy must produce), context = prompt.  Adds into out's nll_sum, nll_tokens, texts.
 */
bt_status bt_evaluator_perplexity_task(bt_model *model, const bt_tokenizer_t *tok,
                                       const bt_source_t *task, size_t start, size_t count,
                                       bt_evaluator_sums *out);
/*  Perplexity of texts[start, start + count) (context "", no EOS): the NLL of each text's tokens
    given BOS and the tokens before them.  A text longer than the model's context
    (max_position_embeddings, L) is scored by rolling windows as lm-evaluation-harness's
    loglikelihood_rolling does (utils.get_rolling_token_windows): the first window scores its
    first L tokens from BOS on, each next one the next `stride` tokens (stride 0 or >= L: L, the
    harness's disjoint windows) with the L tokens before each as its context.  Texts that fit go
    BT_EVALUATOR_NLL_CHUNK at a time by index (chunks start at its multiples), so a shard that
    starts at one computes each text as a single pass does. */
bt_status bt_evaluator_perplexity_texts(bt_model *model, const bt_tokenizer_t *tok,
                                        const char *const *texts, size_t start, size_t count,
                                        int64_t stride, bt_evaluator_sums *out);
/*  All probes into out's probe fields. */
bt_status bt_evaluator_probes(bt_model *model, const bt_tokenizer_t *tok,
                              const bt_eval_probe *probes, int64_t n, bt_evaluator_sums *out);

/*  One named value of an evaluation, as eval lines and `baton eval` results name it. */
typedef struct bt_eval_metric {
    char name[64]; /* "accuracy", "pass@8", "robust.order", "probe.NAME.logp", ... */
    double value;  /* NaN when undefined (no examples) */
} bt_eval_metric;

/*  Metrics of one evaluation at most: choices has 3 per subject and 11 more, probes 4 per pair
    and 3, generate 25 (with episodes). */
#define BT_EVAL_MAX_METRICS                                                                        \
    (3 * BT_CHOICES_SUBJECTS + 16 > 4 * BT_EVAL_MAX_PROBES + 32 ? 3 * BT_CHOICES_SUBJECTS + 16     \
                                                                : 4 * BT_EVAL_MAX_PROBES + 32)

/*  The metrics of aggregated sums of a dataset of the given kind, in a fixed order (docs/config.md
    lists them): generate: examples, accuracy, accuracy_stderr, [pass@1, pass@1_stderr, pass@k,
    pass@k_stderr, maj@k when samples > 1], reward_mean, reward_std, response_len_mean,
    response_len_p50, response_len_p90, truncated_frac, [turns_mean, tool_call_rate,
    tool_error_rate (NaN without a call), tool_episode_frac, tokens_per_episode,
    env_return_mean when it ran episodes], [robust.<perturbation>]; perplexity:
    texts, tokens, nll_per_token, perplexity; probes: probe.<name>.logp or pair.<name>.ok per
    probe, [pairs_accuracy]; choices: items, acc, acc_stderr, acc_norm, acc_norm_stderr,
    prob_right, ece, [acc_shuffled, contamination_gap], then subject.<name>.items, .acc and
    .acc_norm for each subject of choices (may be NULL: none) with items, in its order; then
    tokens_per_s (tokens generated, or scored by perplexity, probes and choices, per second of
    compute) and peak_rss_mb for every kind.  Writes at most max into out and returns how many.
    *primary (may be NULL) gets the metric adaptive triggers follow, higher is better: accuracy
    (generate), -nll_per_token (perplexity), pairs_accuracy or else the mean probe log-prob
    (probes), acc (choices). */
int bt_evaluator_metrics(const bt_evaluator_sums *s, bt_eval_kind kind, const bt_eval_probe *probes,
                         int64_t n_probes, const bt_choice_set *choices, bt_eval_metric *out,
                         int max, double *primary);

/*  Reads a JSONL file of {"text": "..."} objects (blank lines skipped) for perplexity.  BT_EIO
    when it cannot be read; BT_EFORMAT "PATH:LINE: ..." for a line without a non-empty string
    "text", or "PATH: no texts".  Caller owns *texts_out: free with bt_texts_free. */
bt_status bt_texts_load(const char *path, char ***texts_out, size_t *n_out);
/*  NULL-safe; sets *texts_p to NULL. */
void bt_texts_free(char ***texts_p, size_t n);

/*  The evaluation of a run: its datasets and probes, the task whose held-out set a dataset without
    a source uses, the data of each dataset with its own source, loaded once, and the reward service
    that scores generate datasets, if any (set it after loading).  A value; fields are borrowed
    except the own_* fields and texts, which bt_eval_suite_release frees. */
typedef struct bt_eval_suite {
    const bt_eval_dataset *datasets;
    int n_datasets;
    const bt_eval_probe *probes; /* as scored: target prompts in the chat template */
    int64_t n_probes;
    const bt_eval_probe *listed; /* as written (their names name the metrics) */
    const bt_source_t *task;
    bt_source_t *own_task[BT_EVAL_MAX_DATASETS]; /* generate with a source: its JSONL task */
    char **texts[BT_EVAL_MAX_DATASETS];          /* perplexity with a source: its texts */
    size_t n_texts[BT_EVAL_MAX_DATASETS];
    bt_reward_service_t *reward_service; /* NULL: each task's verifier */
    /* dataset i, of kind generate, runs episodes over env[i] with episode[i] (env[i] NULL and
       max_turns 1 after loading: single-turn).  Borrowed; set after loading, as reward_service
       is: a dataset of data source k (eval.datasets[i].data_source) gets source k's environment
       and episode keys, one without gets the run's task's (source 0). */
    bt_env_t *env[BT_EVAL_MAX_DATASETS];
    bt_episode_config episode[BT_EVAL_MAX_DATASETS];
    bt_eval_probe *own_probes; /* the probes with their prompts in the chat template, or NULL */
    bt_eval_probe *own_listed; /* bt_config_eval_suite's: eval.probes and the probes_source's */
    bt_source_t *fewshot_pool[BT_EVAL_MAX_DATASETS];   /* a dataset's fewshot_source, or NULL */
    bt_choice_set *choices[BT_EVAL_MAX_DATASETS];      /* a choices dataset's items */
    bt_choice_set *choices_pool[BT_EVAL_MAX_DATASETS]; /* a choices fewshot_source, or NULL */
} bt_eval_suite;

/*  Fills *s and loads every dataset's own source: a JSONL task for generate, with own's verifier,
    seed, chat template and system prompt (its paths are ignored: each dataset's source is both),
    a {"text"} JSONL for perplexity, a choices file (its contexts in own's chat template).  With a
    chat template, target probes' prompts are templated too (pairs' texts are scored as written).
    On error *s is released. */
bt_status bt_eval_suite_load(bt_eval_suite *s, const bt_eval_dataset *datasets, int n_datasets,
                             const bt_eval_probe *probes, int64_t n_probes, const bt_source_t *task,
                             const bt_source_jsonl_config *own);
void bt_eval_suite_release(bt_eval_suite *s);
/*  The evaluation suite of a parsed config: its eval.datasets and probes (bt_config_probes:
    eval.probes, then eval.probes_source's, read now) over task (borrowed), with each dataset's
    own source loaded (scored with task.verifier, or the dataset's own verifier) and its few-shot
    prompts set (exemplars drawn from run.seed, so every evaluation of the run shows an item the
    same ones).  Release with
    bt_eval_suite_release.  (A bt_config_ function defined in evaluator.c: the config layer is
    below the suite loader.) */
bt_status bt_config_eval_suite(const bt_config *cfg, const bt_source_t *task, bt_eval_suite *out);
/*  A host's reward function for every task of the suite that it owns (the caller sets it on the
    run's task). */
void bt_eval_suite_set_reward_fn(bt_eval_suite *s, bt_reward_fn *fn, void *user);
/*  Each dataset's episodes: those of the source it evaluates (its data_source; source 0, the task,
    for the task's held-out set or a file of its own), from sources[0..n) (borrowed: they must
    outlive the suite's runs). */
void bt_eval_suite_set_episodes(bt_eval_suite *s, const bt_episode_source *sources, int n);
/*  Items dataset i evaluates: its count capped by what its data holds (0 count: all of it). */
size_t bt_eval_suite_size(const bt_eval_suite *s, int i);
/*  Evaluates items [start, start + count) of dataset i into *out: generate (with robustness as
    given), perplexity, or every probe.  seed is the eval TASK's (bt_config_eval_seed): generate
    keys its draws by seed >> BT_JOB_SEED_BITS (rollout.h), the evaluation's (run.seed,
    dataset, step) without the shard, so every shard of one evaluation draws an item's samples
    alike. */
bt_status bt_eval_suite_run(const bt_eval_suite *s, int i, bt_model *model,
                            const bt_tokenizer_t *tok, size_t start, size_t count, bool robustness,
                            uint64_t seed, bt_evaluator_sums *out);

/*  bt_evaluator_metrics of sums of dataset i of the suite (its kind, probes and subjects). */
int bt_eval_suite_metrics(const bt_eval_suite *s, int i, const bt_evaluator_sums *sums,
                          bt_eval_metric *out, int max, double *primary);

/*  Peak resident set of this process in MiB (getrusage). */
double bt_evaluator_peak_rss_mb(void);

#ifdef __cplusplus
}
#endif
#endif
