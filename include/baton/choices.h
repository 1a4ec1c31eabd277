/*  choices.h — multiple choice by log-likelihood, as lm-evaluation-harness's multiple_choice
    tasks score it: each choice is a continuation (delimiter + choice text) of the item's context,
    its log-likelihood summed over its tokens; the prediction is the argmax (acc), or the argmax
    of the log-likelihood divided by the choice's length in characters (acc_norm).
    Threading: a set is read-only once loaded and its prompting set (bt_choices_set_chat,
    bt_choices_set_fewshot); scoring uses the model on the calling thread.
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
/*  Bytes of a subject's name at most, so that subject.NAME.acc_norm fits a bt_eval_metric name. */
#define BT_CHOICES_SUBJECT_LEN 40
/*  BT_CHOICES_SUBJECTS (messages.h): distinct subjects of one set. */

typedef struct bt_choice_set bt_choice_set;

/*  Reads a JSONL file of {"context" or "question": text, "choices": [texts], "answer": index or
    letter ("B"), "subject": name (optional)} lines (blank lines skipped; other members ignored).
    Subjects are numbered in order of first appearance in the file, so every process that reads
    it agrees; a name is 1 to BT_CHOICES_SUBJECT_LEN bytes of letters, digits, '_' and '-' (it
    becomes part of the metric names subject.NAME.acc: MMLU's "high_school_physics" is one), and a
    file may name at most BT_CHOICES_SUBJECTS.  BT_EFORMAT "PATH:LINE: ..." naming what a line
    lacks, the subject refused or the one too many; BT_EIO when it cannot be read. */
bt_status bt_choices_load(const char *path, bt_choice_set **out);
void bt_choices_free(bt_choice_set **self_p);
size_t bt_choices_count(const bt_choice_set *self);
/*  Distinct subjects of the set (0: no line names one), and the name of subject s <
    bt_choices_subjects(self).  Borrowed: valid until the set is freed. */
int bt_choices_subjects(const bt_choice_set *self);
const char *bt_choices_subject_name(const bt_choice_set *self, int s);

/*  From now on contexts are put in tmpl (bt_chat_apply, source.h) with system as the system
    prompt; tmpl NULL or "": as written.  With a template an item's continuations are its choices
    without the delimiter, as lm-evaluation-harness scores multiple choice under a chat template
    (the generation prompt ends the context).  BT_ENOMEM. */
bt_status bt_choices_set_chat(bt_choice_set *self, const char *tmpl, const char *system);

/*  Few-shot contexts (lm-evaluation-harness's num_fewshot for multiple choice): k exemplars, each
    its context as the item's is shown (bt_choices_options.letters), the delimiter and its right
    choice (or that choice's letter), then separator; then the item's context; the whole in the
    chat template when the set has one (the user's turn).  Item i's exemplars are drawn from
    (seed, i) alone (bt_source_fewshot_pick), distinct, from pool or with pool NULL from the set's
    other items (never item i), so an item gets the same ones whatever the shard layout.
    Exemplars are shown as written, also when shuffle reorders the item's choices. */
typedef struct bt_choices_fewshot {
    int64_t k;                 /* 0: none */
    const char *separator;     /* NULL: "\n\n" (the harness's fewshot_delimiter) */
    const bt_choice_set *pool; /* borrowed, must outlive self; NULL: self */
    uint64_t seed;
} bt_choices_fewshot;

/*  BT_EINVAL as bt_source_fewshot_check when k exemplars cannot be drawn; BT_ENOMEM. */
bt_status bt_choices_set_fewshot(bt_choice_set *self, const bt_choices_fewshot *f);
/*  The k exemplars of item i as indices into the pool (picked holds at least k); returns k. */
int64_t bt_choices_exemplars(const bt_choice_set *self, size_t i, size_t *picked);

/*  How an item is put to the model. */
typedef struct bt_choices_options {
    const char *delimiter; /* before each continuation but under a chat template, and between an
                              exemplar's context and answer (" ": the harness's target_delimiter) */
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
    context (its exemplars and template included; float64 sums of the model's float32
    log-probs); the choices of one item go in one forward pass of their own, so an item scores
    alike in every shard.  *n and *answer (the right
    choice's place in that order) are set too, and the tokens scored added to *scored (may be
    NULL). */
bt_status bt_choices_loglik(const bt_choice_set *self, size_t i, bt_model *model,
                            const bt_tokenizer_t *tok, const bt_choices_options *o,
                            const int *order, double *ll, int *n, int *answer, int64_t *scored);

/*  Items [start, start + count) into out's choices sums (messages.h): right by argmax, right by
    the length-normalised argmax, the probability of the right choice under the softmax over the
    choices, the calibration bins of the top probability (fixed point, so shards add up exactly),
    the counts of the item's subject, and with shuffle the items right by argmax in the shuffled
    order. */
bt_status bt_choices_run(const bt_choice_set *self, bt_model *model, const bt_tokenizer_t *tok,
                         const bt_choices_options *o, size_t start, size_t count,
                         bt_evaluator_sums *out);

#ifdef __cplusplus
}
#endif
#endif
