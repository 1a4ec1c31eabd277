/*  episodes.h — multi-turn episodes: the policy writes a turn, an environment (env.h: the built-in
    tools or a service) answers, the policy writes again, up to task.max_turns turns or
    task.max_episode_tokens tokens.  One driver for rollouts (rollout.c) and evaluations
    (evaluator.c) over the decode-slot engine's turns (sample.h, bt_generate_episodes): token in,
    token out (the ids sampled are kept; each observation is put in the chat template's tool turn
    and tokenized once, appended with loss mask 0), each episode's KV cache kept across its turns,
    and, with interleave, the environment answering some episodes while others decode
    (docs/architecture.md, "Multi-turn episodes").
    Threading: a call uses the model, tokenizer and environment on the calling thread, and with
    interleave hands the environment to one thread of its own between its turns (joined before it
    returns): an environment is used by one thread at a time.
    Lifetime: a bt_episodes result holds heap arrays until bt_episodes_release(). */
#ifndef BATON_EPISODES_H
#define BATON_EPISODES_H

#include "baton/config.h"
#include "baton/env.h"
#include "baton/messages.h" /* BT_MAX_TURNS */
#include "baton/model.h"
#include "baton/sample.h"
#include "baton/security.h"
#include "baton/status.h"
#include "baton/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  What an episode's reward is (task.env_reward).  Values appear in configs: append only. */
typedef enum bt_episode_reward {
    BT_EPISODE_REWARD_SUM = 0,   /* "sum": the task's score of the final turn + the env's rewards */
    BT_EPISODE_REWARD_FINAL = 1, /* "final": the task's score of the final turn alone */
    BT_EPISODE_REWARD_ENV = 2    /* "env": the sum of the environment's turn rewards alone */
} bt_episode_reward;

/*  An episode's reward by mode from the task's score of its final turn (task_score, task_right:
    bt_reward_score's) and the environment's return (bt_episodes.env_return): sum: score +
    return, final: the score, env: the return (the task's score is then not needed: pass 0 and
    false).  *right (may be NULL) gets whether the episode counts as correct: the task's verdict,
    or for env a return > 0.  The rollout's rewards and the evaluator's are this one rule. */
double bt_episode_reward_of(bt_episode_reward mode, double task_score, bool task_right,
                            double env_return, bool *right);

#define BT_EPISODE_TEMPLATE_MAX 512 /* task.observation_template, bytes with the NUL */

/*  The task.* keys of episodes.  max_turns 1 without an environment is the single-turn path. */
typedef struct bt_episode_config {
    int64_t max_turns;          /* model turns per episode, [1, BT_MAX_TURNS] (1) */
    int64_t max_episode_tokens; /* model and observation tokens of one episode (its completion's
                                   width), >= the per-turn max_new_tokens (0: resolved by the
                                   config to 2 x max_turns x max_new_tokens) */
    int64_t interleave;         /* 0: synchronous turns (every waiting episode answered at once
                                   when none is left decoding); N >= 1: an episode's answer is used
                                   N decode steps after its turn ended, the others decoding
                                   meanwhile (0) */
    bt_episode_reward reward;   /* (BT_EPISODE_REWARD_SUM) */
    bool turn_rewards;          /* advantages per turn from each turn's reward (grpo.turn_gamma);
                                   false: one per episode (false) */
    const char *chat_template;  /* borrowed: the task's (NULL or "": prompts as written) */
    const char *observation_template; /* borrowed: a text holding "{observation}" once, the tool
                                         turn around an observation; NULL or "": the chat
                                         template's (bt_chat_observation) */
} bt_episode_config;

/*  max_turns 1, max_episode_tokens 0, interleave 0, reward sum, no turn rewards, no
    templates. */
void bt_episode_config_init(bt_episode_config *cfg);

/*  One data source's episodes: its environment (NULL: none) and its episode keys, whose template
    strings are kept here (episode borrows them). */
typedef struct bt_episode_source {
    bt_env_t *env;
    bt_episode_config episode;
    char chat_template[sizeof(((bt_config *)0)->task.chat_template)];
    char observation_template[BT_EPISODE_TEMPLATE_MAX];
} bt_episode_source;

/*  Source k of cfg (bt_config_source: its task.* keys): its episode keys (bt_config_episode) and
    the environment its task.env names, made now: the built-in tools (the python tool in the code
    verifier's sandbox, python3 at its default path, task.code_memory_mb, the tools' own 2 s per
    call, "pass" run once as the code verifier does) or the service at task.env_service (its hello
    answered now; CURVE when task.env_server_key is set, with own, a worker's --key pair, when not
    NULL, else a fresh pair).  Errors name the key: "task.env" (or "data.sources[k].env") for a
    tool that cannot run, "...env_service" for a service that is not there or answers wrongly.
    Release with bt_episode_source_release (even on error). */
bt_status bt_episode_source_new(const bt_curve_keys *own, const bt_config *cfg, int k,
                                bt_episode_source *out);
void bt_episode_source_release(bt_episode_source *s);

/*  Episodes run: the engine's ids and what the environment said of each turn. */
typedef struct bt_episodes {
    bt_generation g;      /* (n, width) ids, log-probs, lengths, finish, loss_mask, turn, n_turns
                             (sample.h, bt_generate_episodes) */
    int32_t **prompts;    /* (n) each episode's prompt ids as the model saw them: the prompt,
                             then its reset observation's ids */
    int64_t *prompt_lens; /* (n) */
    int64_t longest_prompt;
    double *turn_rewards; /* (n, BT_MAX_TURNS) the environment's reward of each model turn */
    double *env_return;   /* (n) their sum */
    int64_t *tool_calls;  /* (n) turns whose action held a call the environment recognized */
    int64_t *tool_errors; /* (n) of those, calls that failed */
    char **final_text;    /* (n) the last model turn decoded (NUL-terminated): what the task
                             scores */
    size_t *final_len;    /* (n) */
    int64_t env_steps;    /* bt_env_step calls */
    double env_s;         /* seconds in them */
    double waited_s;      /* seconds the engine had no row to decode, every one awaiting the
                             environment */
} bt_episodes;

void bt_episodes_init(bt_episodes *e);
/*  NULL-safe, idempotent. */
void bt_episodes_release(bt_episodes *e);

/*  Runs n episodes: episode i starts from prompts[i] (prompt_lens[i] ids, BOS first) with the
    reset item items[i] (bt_env_reset; a reset observation is appended to the prompt's ids, as
    written), then takes up to cfg->max_turns model turns of at most sample->max_new_tokens ids
    each (sample: the rollout's or evaluation's sampling, stops and vocab_limit set), each ended
    at a stop token (the episode's end), its length limit, or one of env's stop strings
    (bt_env_stop_strings; the turn ends at the id whose bytes complete one).  After every turn
    env steps the episode with the turn decoded and its ids (bt_env_step); unless the turn was
    the last (EOS, cfg->max_turns, no room left in cfg->max_episode_tokens) or the environment
    says done, its observation, put in the tool turn of cfg's templates (bt_chat_observation) and
    tokenized once, is appended and the next turn begins.  With cfg->interleave the environment
    steps the turns that ended on a thread of its own while the others decode; without, it steps
    every waiting episode at once when none is left decoding.  Either way an episode's ids depend
    on its prompt, key (keys[i], bt_generate_episodes) and observations alone, so an environment
    whose answers depend only on an episode's own turns gives the same episodes both ways.
    Errors: BT_EINVAL for a config out of range; an environment's error (reset, step, a reset
    that ends an episode before its first turn: BT_EFORMAT) fails the call, naming the episode.
    Fills *out, releasing what it held; on failure *out is empty. */
bt_status bt_episodes_run(bt_model *model, const bt_tokenizer_t *tok, bt_env_t *env,
                          const bt_episode_config *cfg, const bt_sample_config *sample,
                          const int32_t *const *prompts, const int64_t *prompt_lens,
                          const bt_env_reset_item *items, int64_t n, const uint64_t *keys,
                          bt_episodes *out);

#ifdef __cplusplus
}
#endif
#endif
