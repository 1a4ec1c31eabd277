/*  sample.h — token sampling (greedy, temperature, top-k, top-p) and batched generation.
    Threading: a call uses the model and the result on the calling thread only.
    Lifetime: a bt_generation holds heap arrays from bt_generate until bt_generation_release(). */
#ifndef BATON_SAMPLE_H
#define BATON_SAMPLE_H

#include "baton/model.h"
#include "baton/status.h"
#include "baton/tensor.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BT_SAMPLE_MAX_STOPS 8

typedef struct bt_sample_config {
    int64_t max_new_tokens; /* >= 1 */
    double temperature;     /* 0 = greedy (argmax); else logits are divided by it */
    int64_t top_k;          /* keep the k most likely tokens; 0 = off */
    double top_p;           /* keep the nucleus of this mass, in (0, 1); 1 = off */
    bool use_cache;         /* false: recompute the whole sequence for every token (reference) */
    int32_t stops[BT_SAMPLE_MAX_STOPS]; /* tokens that end a row (an instruct model's end of
                                           turn and end of text); n_stops 0: the model config's
                                           eos_token_id */
    int n_stops;
    int64_t vocab_limit; /* ids >= vocab_limit are never drawn, nor chosen by greedy or top-k: a
                            checkpoint may pad vocab_size past its tokenizer (Qwen: 151,936
                            logits, 151,669 ids), and a padded id cannot be decoded; 0 = every
                            logit */
    int64_t slots;       /* bt_generate's decode slots (sequences computed at once); 0: one per
                            sequence of the call */
    const int64_t *max_new_each; /* (batch) each sequence's own length limit, at most
                                    max_new_tokens (more counts as it), or NULL: max_new_tokens */
} bt_sample_config;

/*  max_new_tokens 64, temperature 1, top_k 0, top_p 1, use_cache true, no stops of its own, no
    vocab_limit, slots 0, no per-sequence limits. */
void bt_sample_config_init(bt_sample_config *cfg);

/*  BT_EINVAL naming the field when cfg is out of range, or sampled (temperature > 0) without draws
    (have_draws false). */
bt_status bt_sample_check_config(const bt_sample_config *cfg, bool have_draws);

/*  Logits (B, V) with every token outside the filters set to -inf: first the top_k largest
    (ties with the k-th are kept), then, among those, the smallest set of most likely tokens whose
    probability sums to >= top_p (always at least one).  top_k 0 and top_p >= 1 turn a filter off.
    The result lives in ctx. */
bt_tensor *bt_sample_filter(bt_ctx *ctx, bt_tensor *logits, int64_t top_k, double top_p);

/*  Draws one token per row of logits (B, V): *tokens (B) BT_I64 and *logprobs (B) F32, among the
    ids below cfg->vocab_limit.  Greedy (the argmax) when cfg->temperature is 0, and u may be NULL;
    else u (B) holds one uniform in (0, 1) per row (bt_rng_uniform) and row b's token is the first
    id whose cumulative probability, summed in float64 in id order over the filtered distribution,
    reaches u[b] times the row's total: inverse-CDF sampling, so a row's draw depends on its
    logits and u[b] alone, never on the other rows of the batch.  The log-prob is that of the token
    under log_softmax(logits / temperature) over every logit, BEFORE top-k/top-p filtering and the
    vocab_limit — what the trainer recomputes with bt_model_token_logprobs at the same
    temperature; greedy records it at temperature 1.  BT_EINVAL when a sampled row's
    probabilities are not finite (logits holding NaN or inf). */
bt_status bt_sample_next(bt_ctx *ctx, bt_tensor *logits, const bt_sample_config *cfg,
                         const double *u, bt_tensor **tokens, bt_tensor **logprobs);

/*  Values appear in messages: append only. */
typedef enum bt_finish_reason {
    BT_FINISH_LENGTH = 0, /* reached max_new_tokens (truncated) */
    BT_FINISH_EOS = 1,    /* sampled a stop token (eos_token_id, or bt_sample_config.stops) */
    BT_FINISH_STOP = 2,   /* a turn ended at a stop string (bt_turn_ops.turn_ends) */
    BT_FINISH_DONE = 3    /* the environment ended the episode (bt_turn_answer.done) */
} bt_finish_reason;

/*  Row b's tokens are tokens[b * max_new_tokens + i] for i < lengths[b]; the rest hold the pad id
    and log-prob 0. */
typedef struct bt_generation {
    int64_t batch;
    int64_t max_new_tokens;
    int32_t *tokens;          /* (batch, max_new_tokens) sampled ids, the EOS included */
    float *logprobs;          /* (batch, max_new_tokens) log-prob of each, as bt_sample_next */
    int64_t *lengths;         /* (batch) generated tokens, the EOS included */
    bt_finish_reason *finish; /* (batch) how the row (its last turn) ended */
    /* bt_generate_episodes only, NULL otherwise: */
    uint8_t *loss_mask; /* (batch, max_new_tokens) 1: sampled by the model, 0: an observation */
    uint8_t *turn;      /* (batch, max_new_tokens) the model turn a token belongs to (an
                           observation: the turn it answers) */
    int64_t *n_turns;   /* (batch) model turns the row took */
    /* what it cost: */
    int64_t prefill_tokens; /* prompt tokens computed before decoding, and observation tokens
                               appended between turns */
    int64_t decode_steps;   /* model calls of one token per sequence */
    int64_t slot_steps;     /* tokens those calls computed for live sequences */
    size_t peak_kv_bytes;   /* largest KV cache held (engine; 0 for the reference) */
    int64_t columns_read;   /* engine: key/value columns its attention read (decode steps) */
} bt_generation;

void bt_generation_init(bt_generation *g);
void bt_generation_release(bt_generation *g);

/*  Samples up to cfg->max_new_tokens tokens (row b: its max_new_each[b]) after each of batch
    prompts (prompts[b] holds prompt_lens[b] >= 1 ids, as bt_tokenizer_encode writes them) under
    no-grad.  A row stops when it samples a stop token or reaches its limit; the rest of its row
    holds the pad id (pad_token_id, else eos_token_id, else 0).  keys (batch) name each row's
    draws: the token of row b at step s is drawn with bt_rng_uniform(bt_rng_key(keys[b], s))
    (bt_sample_next), so a row's tokens depend on its prompt and its key alone, whatever else
    shares the batch and whatever slot it runs in; keys may be NULL when greedy.  With use_cache
    the decode-slot engine runs it (generate.c: each distinct prompt prefilled once, cfg->slots
    slots refilled as sequences end); without, the reference recomputes every row whole for every
    token.  Fills *out, releasing what it held; on failure *out is empty. */
bt_status bt_generate(bt_model *model, const int32_t *const *prompts, const int64_t *prompt_lens,
                      int64_t batch, const bt_sample_config *cfg, const uint64_t *keys,
                      bt_generation *out);

/* ---- multi-turn episodes ---------------------------------------------------------------- */
/*  What answers a row whose model turn ended (episodes.h drives an environment through it). */
typedef struct bt_turn_answer {
    int64_t row;
    const int32_t *ids; /* (n_ids) the observation's ids, appended to the row (loss mask 0) and
                           fed to the model before its next turn; valid until the next answers
                           call */
    int64_t n_ids;
    bool done; /* the episode ends here (finish BT_FINISH_DONE); ids are then ignored */
} bt_turn_answer;

typedef struct bt_turn_ops {
    void *user;
    /*  Whether row's turn so far, ids[0..n) (newest last), ends at a stop string with its newest
        id; called after each sampled id that did not end the row otherwise.  NULL: turns end at
        stop tokens and length limits only. */
    bool (*turn_ends)(void *user, int64_t row, const int32_t *ids, int64_t n);
    /*  Row ended model turn `turn` (0-based), ids[0..n), by why (BT_FINISH_EOS, _STOP or
        _LENGTH).  last: the episode ends whatever the environment says (a stop token, the
        episode's width, its last turn), and no answer is awaited; else the row waits for one.
        Must not block: queue the turn. */
    bt_status (*ended)(void *user, int64_t row, int64_t turn, const int32_t *ids, int64_t n,
                       bt_finish_reason why, bool last);
    /*  Writes up to cap answers to ended calls that awaited one, in any order, one per call at
        most; *n receives how many.  With wait, blocks until there is at least one (the engine
        waits only when an answer it needs now has not come).  Called between decode steps
        (wait false): the moment to start stepping the turns that ended since the last call. */
    bt_status (*answers)(void *user, bool wait, bt_turn_answer *out, int64_t cap, int64_t *n);
} bt_turn_ops;

/*  Episodes of up to max_turns model turns (1 .. 255) in one engine run (cfg->use_cache must be
    true): a row's turn ends at a stop token (which ends the episode), at cfg's per-turn length
    limit (max_new_tokens, max_new_each) or where ops->turn_ends says; ops->ended gets the turn,
    and unless it was the last the row keeps its decode slot and KV cache while it waits for its
    answer: an observation's ids are appended to the row and prefilled onto its cache in one pass
    (bt_model_extend), and its next turn decodes after them.  When an answer is used: lag 0,
    synchronous turns: once no row is left decoding, every waiting row's; lag >= 1, interleaved:
    lag decode steps after its turn ended (the engine waits for it then if it has not come), the
    other rows decoding meanwhile.  Either way which rows decode together at each step depends on
    the decode steps alone, not on when answers come, so the same inputs give the same ids and
    log-probs bit for bit however fast the environment is.  A row is at most width >= 1 ids (model
   and observation ids; max_new_tokens of *out is width); an observation that leaves no room for a
    model id ends the episode (finish BT_FINISH_LENGTH, the observation not appended).  Turn t of
    row b draws its tokens as bt_generate's row with key keys[b] for t = 0 and
    bt_rng_key(keys[b], t) after, its step counted from the turn's start, so turn 0 is
    bt_generate's row and an episode's ids depend on its prompt, key and observations alone
    (its log-probs on its company to float rounding).  *out also gets loss_mask, turn and
    n_turns.  On failure *out is empty. */
bt_status bt_generate_episodes(bt_model *model, const int32_t *const *prompts,
                               const int64_t *prompt_lens, int64_t batch,
                               const bt_sample_config *cfg, const uint64_t *keys, int64_t max_turns,
                               int64_t width, int64_t lag, const bt_turn_ops *ops,
                               bt_generation *out);

#ifdef __cplusplus
}
#endif
#endif
