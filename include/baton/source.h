/*  source.h — tasks: the prompts of training and evaluation, and the verifiers that score
   completions. Threading: a task is read-only after construction, so any thread may call any
   function on it.  Lifetime: one per dataset per run.

    Two kinds:
    - Arithmetic (bt_source_new_arith): prompts such as "37+48=" (no spaces), answer "85";
   subtraction may give "-12".  Example i of the training stream is drawn from splitmix64(seed, i)
   alone.  A hash of the problem (a, op, b), independent of the seed, reserves about 10% of all
   problems for held-out use: the training stream skips them, and the held-out set is the first
   heldout_size distinct reserved problems of a second stream of the seed.  So no training stream of
   any seed ever shows a held-out problem.
    - JSONL dataset (bt_source_new_jsonl): one {"prompt": "...", "answer": ...} object per line; the
      answer is a string or a number (kept as its text).  The file is indexed once (mapped for
      one pass; include/baton/dataset.h: the index is saved as PATH.btidx and rebuilt when the
      file changes); a record is read and parsed when an example asks for it.
      Epoch e = index / n of the training stream is a permutation of the n training records:
      position k of the epoch shows record P(k), P a keyed bijection of [0, n) (a 4-round Feistel
      network over the smallest power of 4 >= n, walked until it lands below n), keyed by
      (seed, e).  Each epoch shows every record once; any example takes O(1) time and memory.
      Changed with the indexed datasets (issue 9): before, each epoch was a Fisher-Yates shuffle
      of all n lines, so a run started before this change sees its records in another order now
      (the records of each epoch and the held-out set are the same).

    The training stream is endless and indexed, so a checkpoint saves its cursor as one integer. */
#ifndef BATON_TASKS_H
#define BATON_TASKS_H

#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  A prompt id names a data source and an index of that source's training stream (source.h):
    (source << 48) | index.  Without data.sources the source is 0 and the id is the index. */
#define BT_PROMPT_SOURCE_SHIFT 48
#define BT_PROMPT_ID(source, index) (((uint64_t)(source) << BT_PROMPT_SOURCE_SHIFT) | (index))
#define BT_PROMPT_SOURCE(id) ((int)((id) >> BT_PROMPT_SOURCE_SHIFT))
#define BT_PROMPT_INDEX(id) ((id) & ((UINT64_C(1) << BT_PROMPT_SOURCE_SHIFT) - 1))

typedef struct bt_task bt_source_t;

/*  One example.  Initialise it with bt_source_example_init() (all-zero memory, as calloc gives,
    is an initialised example), fill it with bt_source_train_example() or
   bt_source_heldout_example() as often as needed (each fill frees what it held before), and free it
   with bt_source_example_release(). prompt and answer are owned by the example: valid until it is
   refilled or released.  They point into the example itself (storage[] or heap), so copy the
   strings, never the struct. */
/*  One part of a demonstration: a model turn (trained) or an observation between two of them,
    already framed by the task's observation template (bt_chat_observation), as a rollout appends
    it.  len bytes (any). */
typedef struct bt_source_turn {
    const char *text;
    size_t len;
    bool observation; /* false: the model's turn */
} bt_source_turn;

typedef struct bt_source_example {
    const char *prompt;  /* NUL-terminated; NULL when empty */
    const char *answer;  /* NUL-terminated; what the verifier compares against; NULL when empty */
    const char *columns; /* NUL-terminated compact JSON object of a JSONL record's other keys
                            (valid UTF-8: each byte of a string that is not becomes \ufffd), for
                            a reward service; NULL when it has none, and for arithmetic and code
                            examples */
    const bt_source_turn *demo; /* (n_demo) the record's demonstration under the source's
                                   demonstration_key: model turn, observation, model turn, ...
                                   (odd, ending with a model turn); NULL (n_demo 0) when the source
                                   has no key or the record lacks it: the answer demonstrates */
    int n_demo;
    char *heap;          /* private: a JSONL example's prompt, answer and columns, or NULL */
    void *demo_heap;     /* private: demo and its bytes, or NULL */
    char storage[64];    /* private: arithmetic examples are written here */
} bt_source_example;

/*  An empty example. */
void bt_source_example_init(bt_source_example *ex);
/*  Frees what ex holds and leaves it empty (initialised); idempotent. */
void bt_source_example_release(bt_source_example *ex);

/*  Scoring detail of one completion. */
typedef struct bt_reward_detail {
    bool correct;           /* the extracted answer matches */
    bool well_formed;       /* the whole completion (trimmed) is just an answer, nothing else */
    size_t extracted_start; /* the extracted answer is completion[start, start + len) */
    size_t extracted_len;   /* 0 when no answer was found */
} bt_reward_detail;

/* ---- arithmetic --------------------------------------------------------------------------- */
typedef struct bt_source_arith_config {
    uint64_t seed;
    int digits;            /* max digits per operand, 1..9: operands uniform in [0, 10^digits) */
    const char *operators; /* non-empty subset of "+-*", no repeats; copied */
    size_t heldout_size;   /* 0..1000000, and at most the reserved problems of a small space */
    double format_reward;  /* >= 0: added to the reward when the completion is well formed */
} bt_source_arith_config;

/*  Defaults: seed 0, digits 2, operators "+", heldout_size 500, format_reward 0. */
void bt_source_arith_config_init(bt_source_arith_config *cfg);

/*  Builds the held-out set (a problem space of up to 10^7 problems is enumerated to check that it
    holds heldout_size reserved problems).  BT_EINVAL names the offending field, e.g.
    "heldout_size: 50 exceeds the 11 held-out problems of 1-digit \"+\" ...".
    Caller owns *task_out; destroy with bt_source_destroy().  *task_out is NULL on error. */
bt_status bt_source_new_arith(const bt_source_arith_config *cfg, bt_source_t **task_out);

/* ---- JSONL datasets ------------------------------------------------------------------------ */
/*  Values appear in configs: append only. */
typedef enum bt_source_verifier {
    BT_SOURCE_VERIFY_EXACT = 0,   /* trimmed completion == trimmed answer */
    BT_SOURCE_VERIFY_NUMERIC = 1, /* the last number in the completion equals the numeric answer */
    BT_SOURCE_VERIFY_MATH =
        2, /* bt_source_math_answer() of the completion, bt_source_math_equal() */
    BT_SOURCE_VERIFY_CODE = 3 /* the completion passes the record's tests in the sandbox */
} bt_source_verifier;

typedef struct bt_source_jsonl_config {
    const char *train_path;   /* required */
    const char *heldout_path; /* NULL: records 10, 20, 30, ... of train_path (counting non-blank
                                 lines from 1) are held out and the others are trained on */
    bt_source_verifier verifier;
    uint64_t seed;             /* shuffles each epoch */
    const char *chat_template; /* NULL or "": prompts as written; else see bt_chat_apply */
    const char *system_prompt; /* the template's {system}; NULL: "" */
    double code_timeout_s;     /* the code verifier's wall clock and CPU limit (rounded up) per
                                  program; 0: bt_sandbox_config_init's 10 s */
    size_t code_memory_bytes;  /* its address-space limit; 0: the default 512 MiB */
    const char *demonstration_key;    /* NULL or "": SFT demonstrates the answer; else the key of
                                         each record's demonstration (bt_source_example.demo): a
                                         string, or an array of strings [model, observation, model,
                                         ...]; a record without it demonstrates its answer */
    const char *observation_template; /* frames a demonstration's observations as
                                         bt_chat_observation does (with chat_template) */
} bt_source_jsonl_config;

/*  Chat prompts, without a Jinja engine: template is a preset or a text holding "{prompt}" once
    and "{system}" at most once, each replaced by its text.  Presets ({system}'s block left out when
    system is empty; no BOS text, which the tokenizer adds):
      "chatml"  <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n
                <|im_start|>assistant\n
      "llama3"  <|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>
                <|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|>
                <|start_header_id|>assistant<|end_header_id|>\n\n
    *out (caller frees) is the prompt as the model sees it, ending in the generation prompt.
    BT_EINVAL naming the problem for a template without "{prompt}" or with it twice. */
bt_status bt_chat_apply(const char *tmpl, const char *system, const char *prompt, char **out);

/*  An environment's observation as the model sees it between two of its turns: the tool's reply
    in its own role.  observation_template, when not NULL or "", is a text holding "{observation}"
    once; else the chat template's (tmpl) tool turn, which closes the model's turn, gives the
    observation the tool's role and opens the model's next turn:
      "chatml"  <|im_end|>\n<|im_start|>tool\n{observation}<|im_end|>\n<|im_start|>assistant\n
      "llama3"  <|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{observation}<|eot_id|>
                <|start_header_id|>assistant<|end_header_id|>\n\n
      none, or a template text of its own: {observation} as written.
    observation is len bytes (any, NUL included).  *out (caller frees, NUL-terminated too) and
    *out_len receive the text.  BT_EINVAL naming the problem for an observation_template without
    "{observation}" or with it twice. */
bt_status bt_chat_observation(const char *tmpl, const char *observation_template,
                              const char *observation, size_t len, char **out, size_t *out_len);

/*  Opens train_path (and heldout_path) as indexed datasets: the first open of a file reads and
    checks every line and saves its index (PATH.btidx, else in the per-user cache folder, else in
    memory only; see include/baton/dataset.h); a later open of the unchanged file maps that index
    and reads nothing else.  Memory: the index, 8 bytes per record; records are read from the
    file when an example asks for them.  Blank lines are skipped; a line may hold at most 1 MiB.
    Errors: BT_EIO when a file cannot be read; BT_EFORMAT "PATH:LINE: <reason>" for a malformed line
    (not JSON, not an object, missing "prompt", "prompt" not a string, missing "answer", "answer"
    neither string nor number, not a number under the numeric verifier, holding no answer under
    the math verifier ("#### " with nothing after it, blank), or a line too long; under the code
    verifier a line is a HumanEval or an MBPP record instead, bt_code_parse's reasons);
    the code verifier also runs a trivial program in the sandbox once and returns its error
    (BT_EIO: no python3, no temporary directory) or BT_EIO "sandbox: ... cannot run \"pass\"";
    BT_EFORMAT "PATH: no examples" for an empty file; BT_EINVAL for a bad chat template or
    observation template.  A record's demonstration is checked as an example reads it: BT_EFORMAT
    "PATH: record N: \"KEY\": expected a string or an array of strings [model, observation,
    model, ...] of odd length, got ..." (the key's JSON type, or the array's length or element).
    Caller owns *task_out; destroy with bt_source_destroy().  *task_out is NULL on error. */
bt_status bt_source_new_jsonl(const bt_source_jsonl_config *cfg, bt_source_t **task_out);

/* ---- any task ------------------------------------------------------------------------------- */
/*  NULL-safe and idempotent; sets *self_p to NULL. */
void bt_source_destroy(bt_source_t **self_p);

/*  Fills ex (see bt_source_example) with the index-th example of the endless training stream.
    Deterministic: depends only on the config and index, never on earlier calls.  A JSONL record
    is read and parsed, and its chat template applied, now.  Arithmetic tasks always return BT_OK;
    a JSONL task returns BT_ENOMEM, or, when the file was changed in place since it was indexed,
    BT_EFORMAT "PATH: record K: <reason>" or BT_EIO (truncated).  On error ex is empty. */
bt_status bt_source_train_example(const bt_source_t *self, uint64_t index, bt_source_example *ex);

/*  Which training record the index-th example of the stream is: its position among the
    training lines of a JSONL task (the same record in every epoch), the index itself for the
    arithmetic stream. */
uint64_t bt_source_record(const bt_source_t *self, uint64_t index);

/*  Training records per epoch of a JSONL task; 0 for an endless arithmetic stream. */
uint64_t bt_source_epoch_size(const bt_source_t *self);

/*  The held-out set: disjoint from the training stream, fixed order. */
size_t bt_source_heldout_count(const bt_source_t *self);
/*  Fills ex with held-out example i, as bt_source_train_example does.  Requires
    i < bt_source_heldout_count(self). */
bt_status bt_source_heldout_example(const bt_source_t *self, size_t i, bt_source_example *ex);

#define BT_SOURCE_FEWSHOT_MAX 64 /* exemplars before one held-out prompt */

/*  Few-shot held-out prompts (lm-evaluation-harness's num_fewshot): k exemplars, each its prompt,
    delimiter and answer, then separator, before the item's prompt; the whole in the chat template
    when the source has one (the exemplars as the user's turn).  The exemplars of held-out item i
    are drawn from (seed, i) alone, distinct, from pool's held-out set, or with pool NULL from
    this source's other held-out items (never item i): the same for an item whatever the shard. */
typedef struct bt_source_fewshot {
    int64_t k;               /* 0: none */
    const char *separator;   /* NULL: "\n\n" (the harness's fewshot_delimiter) */
    const char *delimiter;   /* NULL: " " (the harness's target_delimiter) */
    const bt_source_t *pool; /* borrowed, must outlive self; NULL: self */
    uint64_t seed;
} bt_source_fewshot;

/*  The exemplars of item i: k distinct indices into a pool of n items, drawn from (seed, i) alone
    (so the same whatever the shard layout), never i itself when own (the pool is the item's own
    set).  bt_source_fewshot_check(k, n, own) must have passed.  Shared by every few-shot kind. */
void bt_source_fewshot_pick(uint64_t seed, size_t i, size_t n, bool own, int64_t k, size_t *picked);
/*  BT_EINVAL "num_fewshot: expected an integer in [0, 64] and at most the N exemplars the
    fewshot_source (or: dataset's other items) holds, got K" unless k exemplars can be drawn from
    a pool of n items (own: the item's own set, which lends n - 1). */
bt_status bt_source_fewshot_check(int64_t k, size_t n, bool own);

/*  From now on held-out examples are few-shot prompts; training examples are unchanged.
    BT_EINVAL when k is negative, above BT_SOURCE_FEWSHOT_MAX or above the exemplars the pool
    holds, or k > 0 for a code source or pool (its answers are test harnesses, no exemplars);
    BT_ENOMEM. */
bt_status bt_source_set_fewshot(bt_source_t *self, const bt_source_fewshot *f);

/*  Scores completion[0, len) (need not be NUL-terminated) against an example's answer:
    1.0 when correct, 0.0 otherwise, plus format_reward when well formed (arithmetic only).
    - arithmetic: after leading white space, an optional '-' and digits; correct when that text
      equals the answer exactly ("085" is not "85"); well formed when nothing else follows.
    - exact: the trimmed completion equals the trimmed answer; well formed when non-empty.
    - numeric: the last number in the completion (sign, decimals, exponent; thousands commas such as
      "1,234.5" ignored) equals the answer within relative 1e-6 or absolute 1e-9; well formed when
      the trimmed completion is exactly one number.
    - math: bt_source_math_answer() of the completion and the reference answer (read the same way
      when it holds "####" or "\boxed{", else taken whole, so a GSM8K "answer" field with its
      reasoning and "#### 72" works as it is) are bt_source_math_equal(); well formed when the
      completion marks its answer with "####" or \boxed{}.
    - code: answer is the example's harness (include/baton/code.h); the completion's code
      (bt_code_extract: the first fenced block, else all of it) with the harness's tests is run in
      the sandbox (include/baton/sandbox.h): correct when it passes (exit status 0 within every
      limit); well formed when it ran to an exit of its own (passed or failed, not killed).  Blocks
      for up to the sandbox's timeout.  A sandbox that cannot start scores 0 with a WARN log line.
    detail may be NULL. */
double bt_source_reward(const bt_source_t *self, const char *answer, const char *completion,
                        size_t len, bt_reward_detail *detail);

/* ---- the math verifier ------------------------------------------------------------------------
 */
/*  The answer a math completion gives, completion[0, len) (need not be NUL-terminated), in this
    order:
    1. the rest of the line after the last "####" (GSM8K), trimmed; when it is empty ("#### " at
       the end) there is no answer, and nothing else is tried;
    2. else the content of the last "\boxed{...}", braces balanced ("\boxed{\frac{1}{2}}" gives
       "\frac{1}{2}"); an empty box gives no answer; when the last box is never closed, step 3;
    3. else the last number: as for the numeric verifier, or "A/B", or "\frac{A}{B}".
    Writes the answer as written, NUL-terminated, into out; false, with out unspecified, when there
    is none or it and its NUL do not fit in cap. */
bool bt_source_math_answer(const char *completion, size_t len, char *out, size_t cap);

/*  Whether two answers (NUL-terminated, as bt_source_math_answer gives them) are the same.  Both
   are normalised: white space removed (except that a run of it between two digits stays one space,
    so "1 234" is not 1234), "\left", "\right", "\!" and "\," removed, then leading "$" or "\$"
    and trailing "$", "\$" or "." stripped.  A normal form longer than 255 bytes or empty matches
    nothing.  When both are numbers they are compared as numbers, within relative 1e-9; else the
    normal forms are compared as strings, exactly.  A number is, after an optional trailing "%" or
    "\%" (percent is compared as its number: "50%" equals 50 and 0.5 does not):
    - [+-]? D (",ddd")* ("." D)? ([eE] [+-]? D)?: commas are thousands separators only between
      groups of three digits ("1,234" is 1234; "1,2" is no number);
    - such a number, "/" and an unsigned one: a fraction ("3/4" equals 0.75);
    - [+-]? \frac{A}{B}, \dfrac or \tfrac, A and B numbers.
    A zero denominator ("1/0") or an infinite value is no number: compared as a string. */
bool bt_source_math_equal(const char *a, const char *b);

/*  A host program's reward: the score of completion (len bytes, not NUL-terminated) for prompt,
    whose reference answer is answer. */
typedef double(bt_reward_fn)(const char *prompt, const char *completion, size_t len,
                             const char *answer, void *user);
/*  From now on bt_source_score calls fn (NULL: the task's own verifier again). */
void bt_source_set_reward_fn(bt_source_t *self, bt_reward_fn *fn, void *user);
/*  The reward of a completion: the host's function when one is set (detail->correct is then
    reward >= 1, well_formed true), else bt_source_reward. */
double bt_source_score(const bt_source_t *self, const char *prompt, const char *answer,
                       const char *completion, size_t len, bt_reward_detail *detail);

/* ---- robustness and majority voting ---------------------------------------------------------- */
/*  Values appear in metric names: append only. */
typedef enum bt_source_perturbation {
    BT_PERTURB_SPACING = 0,
    BT_PERTURB_ORDER = 1,
    BT_PERTURB_DISTRACTOR = 2,
    BT_PERTURB_COUNT = 3
} bt_source_perturbation;

/*  "spacing", "order", "distractor"; "unknown" out of range.  Static string. */
const char *bt_source_perturbation_name(bt_source_perturbation p);

/*  The prompt of held-out example i with its surface form changed and its answer kept, written
    NUL-terminated into buf.  Returns its length; 0, with buf untouched, when the task has no such
    perturbation for this example or when the prompt and its NUL do not fit in len.  Deterministic:
    depends only on the task's config, i and p.  Requires i < bt_source_heldout_count(self).
    - arithmetic ("37+48="): spacing "37 + 48 ="; order "48+37=" for '+' and '*', 0 for '-' (the
   same text when a == b); distractor: one of a few short sentences with a number, both drawn from
      splitmix64 of i, then a space and the problem: "I have 7 cats. 37+48=".
    - JSONL: spacing: one space before the prompt and every space in it doubled ("Add 2 and 3." ->
      " Add  2  and  3."); other white space is kept; order: 0 (not defined); distractor: the
      sentence arithmetic would use for i, then a space, then the prompt (the prompt as
      bt_source_heldout_example gives it, chat template applied; 0 when that fails). */
size_t bt_source_perturb(const bt_source_t *self, size_t i, bt_source_perturbation p, char *buf,
                         size_t len);

/*  The answer that completion[0, len) (need not be NUL-terminated) gives, as text on which equal
    answers compare equal, for majority voting: what the task's own verifier extracts (a host's
    reward function is not consulted).
    - arithmetic: the optional '-' and digits after leading white space, as written ("85" for
      "  85", "085" for "085", which the verifier does not take for 85 either).
    - exact: the trimmed completion.
    - numeric: the value of the last number (thousands commas dropped), printed with the fewest of
      15 or 17 significant digits that read back exactly ("1,234.50" -> "1234.5"; -0 -> "0"). Values
      within the verifier's tolerance but not equal are different answers.
    - math: the normal form of bt_source_math_answer() (see bt_source_math_equal); a number printed
      as for numeric ("\frac{3}{4}", "3/4" and "0.75" -> "0.75"; "50%" -> "50").
    - code: none (0): programs are not voted on.
    Writes it NUL-terminated into buf and returns its length; 0, with buf untouched, when no answer
    can be extracted or it and its NUL do not fit in buflen. */
size_t bt_source_canonical_answer(const bt_source_t *self, const char *completion, size_t len,
                                  char *buf, size_t buflen);

#ifdef __cplusplus
}
#endif
#endif
