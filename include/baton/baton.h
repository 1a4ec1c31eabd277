/*  baton.h — the embedding API: a host program creates a run from a JSON config, starts it (the
    controller in the calling thread, one thread per worker, over inproc://), steps it, reads its
    metrics and destroys it.  `baton run` is a thin command line over this.
    Threading: every call on the thread that created the run.  Lifetime: bt_run_new() to
    bt_run_destroy().
    Signals: a host with data-parallel trainers (workers.trainer > 1) ignores SIGPIPE, as `baton`
    does: Gloo's collectives write with writev(2), and a rank's peer that died would otherwise kill
    the process with SIGPIPE instead of failing the collective.
    Self-contained: it includes status.h alone, and names the config as an incomplete type.
    Installed with status.h (docs/architecture.md, "Install and embed"): libbaton.so exports the
    functions of the two and nothing else (cmake/libbaton.map). */
#ifndef BATON_BATON_H
#define BATON_BATON_H

#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_run bt_run_t;

/*  The resolved config (config.h has its fields; an embedder that reads them includes it). */
typedef struct bt_config bt_config;

/*  A host program's reward: the score of completion (len bytes, not NUL-terminated) for prompt,
    whose reference answer is answer.  The same type as source.h's (a compiler checks that the two
    agree wherever both are included). */
typedef double(bt_reward_fn)(const char *prompt, const char *completion, size_t len,
                             const char *answer, void *user);

/*  What a progress display needs; NaN where nothing is known yet. */
typedef struct bt_progress {
    const char *phase; /* "join", "sft", "rl", "done" */
    int64_t step, total;
    double reward_mean;
    double accuracy; /* last evaluation */
    double tokens_per_s;
    double elapsed_s, eta_s;
} bt_progress;

typedef void(bt_progress_fn)(const bt_progress *p, void *user);

/*  Counters of what the controller refused or recovered from. */
typedef struct bt_controller_stats {
    int64_t malformed;        /* messages rejected by the decoder */
    int64_t unknown_peer;     /* messages from peers that had not said HELLO */
    int64_t late_results;     /* results for tasks the sender no longer held (dropped) */
    int64_t failed_tasks;     /* FAIL messages (the task was re-queued) */
    int64_t lost_workers;     /* expired or left */
    int64_t requeued;         /* task hand-outs beyond the first */
    int64_t rejected_results; /* RESULTs that did not parse as their job's (the job re-queued) */
    int64_t wrong_run;        /* messages stamped with another run's id or protocol (refused) */
    int64_t refused_weights;  /* WEIGHTS from a worker holding no publishing job (dropped) */
    int64_t quarantined;      /* workers that held a job past its deadline */
    int64_t restores;         /* trainers restored from a snapshot after the state was lost */
    double compute_s;         /* worker compute on the critical path: per batch of parallel tasks,
                                 the longest one's compute_s */
    double tasks_s;           /* wall time spent waiting for those batches of tasks */
} bt_controller_stats;

/*  Parses and checks config_json (source names it in messages) with `--set` style overrides, and
    checks that the files it names exist (bt_config_check_files).  Nothing is created on disk yet.
   Caller owns the result; destroy with bt_run_destroy().  NULL on bad input, the one-line reason in
   bt_last_error(). */
bt_run_t *bt_run_new(const char *config_json, const char *source, const char *const *overrides,
                     int n_overrides);
void bt_run_destroy(bt_run_t **self_p);
/*  The resolved config.  Borrowed: valid while self lives. */
const bt_config *bt_run_config_of(const bt_run_t *self);
/*  The run directory; default "runs/<run.name>".  Before bt_run_start. */
void bt_run_set_dir(bt_run_t *self, const char *dir);
/*  Workers as processes: `baton worker --connect ipc://RUN_DIR/controller.ipc --role ROLE --name
    NAME` is started per worker instead of a thread.  The baton run is this executable when baton's
    code is linked into it; a host program linked with libbaton.so runs the baton installed with
    the library (PREFIX/bin/baton beside PREFIX/lib/libbaton.so).  Not with bt_run_set_reward.
    Before bt_run_start. */
void bt_run_set_procs(bt_run_t *self);
/*  Start no workers: the configured numbers of each role must join the endpoint
    (bt_run_set_endpoint) from elsewhere, e.g. `baton worker` on other machines.  Before
    bt_run_start. */
void bt_run_set_external_workers(bt_run_t *self);
/*  Continue from a checkpoint of the run directory: folder "" or NULL is the newest verified one
    (corrupt ones skipped, each an event), else that folder.  Before bt_run_start. */
void bt_run_set_resume(bt_run_t *self, const char *folder);
/*  The command that made this invocation (argv is copied), recorded in RUN_DIR/run.json with
    the baton version, host, user, start time and config hash.  Before bt_run_start; without it
    the record's argv is empty. */
void bt_run_set_command(bt_run_t *self, int argc, const char *const *argv);
/*  Replace what the run directory holds: its run files (config.json, metrics.jsonl,
    events.jsonl, run.json, ckpt/, model/, variants/, report.html) are removed when the run starts; other
    files stay.  Before bt_run_start. */
void bt_run_set_overwrite(bt_run_t *self);
const char *bt_run_dir(const bt_run_t *self);
/*  The controller's endpoint; default a private inproc:// one.  An ipc:// or tcp:// endpoint lets
    other processes reach the controller too.  Before bt_run_start. */
void bt_run_set_endpoint(bt_run_t *self, const char *endpoint);
/*  ZeroMQ CURVE on the controller's socket (include/baton/security.h): key_file is its secret key
    (NAME.key of `baton keygen`), allow the workers' public keys (a file of keys, or a directory of
    NAME.pub files).  Only those workers get in; a refusal is logged (WARN) and written as a
    `worker_refused` event.  Needed for a tcp:// endpoint unless bt_run_set_insecure.  Before
    bt_run_start. */
void bt_run_set_curve(bt_run_t *self, const char *key_file, const char *allow);
/*  Lets a tcp:// endpoint go without CURVE: plain TCP, for a trusted network.  Before
    bt_run_start. */
void bt_run_set_insecure(bt_run_t *self);
/*  Connections the controller refused so far (with bt_run_set_curve; else 0). */
int64_t bt_run_refused(const bt_run_t *self);
void bt_run_set_progress(bt_run_t *self, bt_progress_fn *fn, void *user);
/*  Scores completions with fn instead of the task's verifier (rollout and evaluation alike).
    Before bt_run_start. */
void bt_run_set_reward(bt_run_t *self, bt_reward_fn *fn, void *user);

/*  Checks, before anything is created or started, that the run directory may be written as asked:
    one that holds a run (config.json, metrics.jsonl or events.jsonl) needs bt_run_set_resume or
    bt_run_set_overwrite, and a resume needs a run.  BT_EINVAL with the reason, which names the
    directory (a mistake of the caller's: `baton run` exits 2).  bt_run_start calls it. */
bt_status bt_run_check(bt_run_t *self);
/*  After bt_run_check: a resume of a run that finished already (its policy saved in RUN_DIR/model,
    its last step grpo.steps, every dataset's evaluation of that step written).  There is nothing
    to resume: bt_run_start and bt_run_step do nothing (*done at once) and no file is touched. */
bool bt_run_is_complete(const bt_run_t *self);
/*  bt_run_check, then creates the run directory, starts the workers, waits for them, runs the SFT
    warm start and the step-0 evaluation. */
bt_status bt_run_start(bt_run_t *self);
/*  One GRPO step; *done after the last. */
bt_status bt_run_step(bt_run_t *self, bool *done);
/*  Stops the workers and joins their threads; called by bt_run_destroy if needed. */
bt_status bt_run_finish(bt_run_t *self);
bt_controller_stats bt_run_stats(const bt_run_t *self);
/*  The latest metrics: phase, GRPO step, mean reward of the last step, accuracy of the last
    evaluation (NaN before any), tokens/s, elapsed time.  The full record is metrics.jsonl. */
bt_progress bt_run_progress(const bt_run_t *self);

#ifdef __cplusplus
}
#endif
#endif
