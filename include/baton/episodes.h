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

#include "baton/env.h"
#include "baton/messages.h" /* BT_MAX_TURNS */
#include "baton/model.h"
#include "baton/sample.h"
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

#define BT_EPISODE_TEMPLATE_MAX 512 /* task.observation_template, bytes with the NUL */

/*  The task.* keys of episodes.  max_turns 1 without an environment is the single-turn path. */
typedef struct bt_episode_config {
    int64_t max_turns;          /* model turns per episode, [1, BT_MAX_TURNS] (1) */
    int64_t max_episode_tokens; /* model and observation tokens of one episode (its completion's
                                   width), >= the per-turn max_new_tokens (0: resolved by the
                                   config to 2 x max_turns x max_new_tokens) */
    bool interleave;            /* the environment answers while other episodes decode (true) */
    bt_episode_reward reward;   /* (BT_EPISODE_REWARD_SUM) */
    bool turn_rewards;          /* advantages per turn from each turn's reward (grpo.turn_gamma);
                                   false: one per episode (false) */
    const char *chat_template;  /* borrowed: the task's (NULL or "": prompts as written) */
    const char *observation_template; /* borrowed: a text holding "{observation}" once, the tool
                                         turn around an observation; NULL or "": the chat
                                         template's (bt_chat_observation) */
} bt_episode_config;

/*  max_turns 1, max_episode_tokens 0, interleave true, reward sum, no turn rewards, no
    templates. */
void bt_episode_config_init(bt_episode_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
