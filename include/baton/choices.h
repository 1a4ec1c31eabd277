/*  choices.h — multiple choice by log-likelihood, as lm-evaluation-harness's multiple_choice
    tasks score it: each choice is a continuation (delimiter + choice text) of the item's context,
    its log-likelihood summed over its tokens; the prediction is the argmax (acc), or the argmax
    of the log-likelihood divided by the choice's length in characters (acc_norm).
    Threading: a set is read-only once loaded; scoring uses the model on the calling thread.
    Lifetime: bt_choices_load allocates a set; free it with bt_choices_free. */
#ifndef BATON_CHOICES_H
#define BATON_CHOICES_H

#include "baton/messages.h"
#include "baton/model.h"
#include "baton/status.h"
#include "baton/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BT_CHOICES_MAX 26 /* choices of one item (letters A..Z) */

typedef struct bt_choice_set bt_choice_set;

/*  Reads a JSONL file of {"context" or "question": text, "choices": [texts], "answer": index or
    letter ("B")} lines (blank lines skipped); "subject" and other members are ignored.
    BT_EFORMAT "PATH:LINE: ..." naming what a line lacks; BT_EIO when it cannot be read. */
bt_status bt_choices_load(const char *path, bt_choice_set **out);
void bt_choices_free(bt_choice_set **self_p);
size_t bt_choices_count(const bt_choice_set *self);

/*  How an item is put to the model. */
typedef struct bt_choices_options {
    const char *delimiter; /* before each continuation (" ": the harness's target delimiter) */
    bool letters;  /* MMLU style: the context lists the choices as "A. text" lines and "Answer:",
                      and the continuations are the letters; else the choice texts themselves */
    bool shuffle;  /* also score each item with its choices in a seeded random order */
    uint64_t seed; /* the order's */
} bt_choices_options;

/*  The order of item i's n choices that shuffle scores: order[k] = the original index shown k-th,
    drawn from (seed, i) alone. */
void bt_choices_order(uint64_t seed, size_t i, int n, int *order);

/*  The log-likelihood of each choice of item i (n = its choices), shown in order (NULL: as
    written): ll[k] = sum of log P(token | earlier) over the k-th continuation's tokens after the
    context (float64 sums of the model's float32 log-probs); the choices of one item go in one
    forward pass of their own, so an item scores alike in every shard.  *n and *answer (the right
    choice's place in that order) are set too, and the tokens scored added to *scored (may be
    NULL). */
bt_status bt_choices_loglik(const bt_choice_set *self, size_t i, bt_model *model,
                            const bt_tokenizer_t *tok, const bt_choices_options *o,
                            const int *order, double *ll, int *n, int *answer, int64_t *scored);

/*  Items [start, start + count) into out's choices sums (messages.h): right by argmax, right by
    the length-normalised argmax, the probability of the right choice under the softmax over the
    choices, the calibration bins of the top probability (fixed point, so shards add up exactly),
    and with shuffle the items right by argmax in the shuffled order. */
bt_status bt_choices_run(const bt_choice_set *self, bt_model *model, const bt_tokenizer_t *tok,
                         const bt_choices_options *o, size_t start, size_t count,
                         bt_evaluator_sums *out);

#ifdef __cplusplus
}
#endif
#endif
