/*  run.c — `baton run CONFIG [--run-dir DIR] [--resume [CHECKPOINT] | --overwrite]
    [--set key.path=value ...] [--dry-run]`
    and `baton controller CONFIG --bind ENDPOINT [--key FILE --allow DIR_OR_FILE | --insecure]`.
    CONFIG is JSON, or YAML when it ends in .yaml or .yml.  --dry-run prints the resolved config
    (stdout) and the plan (stderr) and starts nothing.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "baton/baton.h"
#include "baton/config.h"
#include "baton/fileio.h"
#include "baton/plan.h"
#include "baton/security.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { S_MAX_SETS = 256, S_MAX_ARGS = 1024 };

/*  The first SIGINT or SIGTERM received, 0 before: the run stops after the step in progress.  Set
    by s_on_signal on whatever thread the signal lands on and read by the step loop, so a lock-free
    atomic (which a handler may store to, C11 7.14.1.1). */
static _Atomic sig_atomic_t s_signal;

static void s_on_signal(int signo) {
    if (atomic_load(&s_signal)) { /* the second: the signal's default action, at once */
        signal(signo, SIG_DFL);
        raise(signo); /* blocked while this handler runs: delivered as it returns */
        return;
    }
    atomic_store(&s_signal, signo);
    static const char msg[] = "\nbaton: stopping after the current step (send it again to kill "
                              "at once)\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1); /* async-signal-safe, unlike stdio */
    (void)n;
}

/*  Sleeps with SIGINT and SIGTERM unblocked: the one thread of the run they can land on. */
static void *s_signal_thread(void *arg) {
    pthread_sigmask(SIG_UNBLOCK, arg, NULL);
    for (;;)
        pause();
    return NULL;
}

/*  SIGINT and SIGTERM set s_signal.  Every thread started from now on (the controller's is this
    one; ZeroMQ's, the worker threads, the checkpoint writer) blocks them, and one thread of its
    own waits for them: a signal that interrupted the controller's zmq_poll would fail the step
    with EINTR.  Forked worker processes ignore them (orchestrator/run.c): the controller stops
    them with STOP. */
static void s_catch_signals(void) {
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, s_signal_thread, &set) == 0)
        pthread_detach(t);
    else /* no thread to take them: this one does, as before */
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

typedef struct {
    bool tty;
    int64_t log_every;
    int64_t last_step;
} s_display;

static void s_fmt_time(double s, char *buf, size_t len) {
    if (!isfinite(s) || s < 0)
        snprintf(buf, len, "?");
    else if (s >= 60)
        snprintf(buf, len, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, len, "%.0fs", s);
}

/*  One live line on a terminal; plain lines every log_every steps otherwise. */
static void s_progress(const bt_progress *p, void *user) {
    s_display *d = user;
    bool boundary = !strcmp(p->phase, "done") || p->step == 0 ||
                    (d->log_every > 0 && p->step % d->log_every == 0 && p->step != d->last_step);
    if (!d->tty && !boundary)
        return;
    d->last_step = p->step;
    char eta[32], acc[32] = "-", reward[32] = "-", tps[32] = "-";
    s_fmt_time(p->eta_s, eta, sizeof eta);
    if (isfinite(p->accuracy))
        snprintf(acc, sizeof acc, "%.1f%%", 100 * p->accuracy);
    if (isfinite(p->reward_mean))
        snprintf(reward, sizeof reward, "%.3f", p->reward_mean);
    if (isfinite(p->tokens_per_s))
        snprintf(tps, sizeof tps, "%.0f", p->tokens_per_s);
    fprintf(stderr,
            "%s%-4s step %lld/%lld  reward %s  accuracy %s  tok/s %s  elapsed %.0fs  ETA %s%s",
            d->tty ? "\r\033[K" : "", p->phase, (long long)p->step, (long long)p->total, reward,
            acc, tps, p->elapsed_s, eta, d->tty ? "" : "\n");
    if (d->tty && !strcmp(p->phase, "done"))
        fputc('\n', stderr);
    fflush(stderr);
}

/*  The text of a key's value without JSON's quotes ("cosine", not "\"cosine\""). */
static const char *s_value(const bt_config *cfg, const char *key, char *buf, size_t len) {
    if (!bt_config_value_text(cfg, key, buf, len))
        snprintf(buf, len, "?");
    size_t n = strlen(buf);
    if (n >= 2 && buf[0] == '"' && buf[n - 1] == '"') {
        memmove(buf, buf + 1, n - 2);
        buf[n - 2] = '\0';
    }
    return buf;
}

/*  "every 25 steps, every 60 s" for one dataset's triggers; "never" when none is set. */
static void s_schedule(const bt_eval_dataset *d, bool adaptive, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    if (d->every_steps)
        used +=
            (size_t)snprintf(buf + used, len - used, "every %lld steps", (long long)d->every_steps);
    if (d->every_epochs && used < len)
        used += (size_t)snprintf(buf + used, len - used, "%severy %lld epochs", used ? ", " : "",
                                 (long long)d->every_epochs);
    if (d->every_seconds > 0 && used < len)
        used += (size_t)snprintf(buf + used, len - used, "%severy %g s", used ? ", " : "",
                                 d->every_seconds);
    if (d->every_tokens > 0 && used < len)
        used += (size_t)snprintf(buf + used, len - used, "%severy %g tokens", used ? ", " : "",
                                 d->every_tokens);
    if (!used)
        snprintf(buf, len, "never (no every_* trigger)");
    else if (adaptive && d->every_steps && used < len)
        snprintf(buf + used, len - used, " (adaptive: eval.adaptive)");
}

/*  --dry-run: the resolved config on stdout, exactly the JSON a run writes to config.json, and on
    stderr what the run would do: its directory, workers, phases, evaluations and memory.  Nothing
    is started or written. */
static int s_dry_run(const bt_run_t *run, bool procs, const char *bind) {
    const bt_config *cfg = bt_run_config_of(run);
    char *json = bt_config_to_json(cfg);
    if (!json) {
        fprintf(stderr, "baton: out of memory\n");
        return 1;
    }
    printf("%s\n", json);
    fflush(stdout);
    free(json);
    char a[64], b[64], c[64];
    FILE *o = stderr;
    fprintf(o, "plan (--dry-run: nothing started, nothing written)\n");
    fprintf(o, "  run directory  %s%s\n", bt_run_dir(run),
            bt_run_is_complete(run) ? " (finished: nothing to resume)" : "");
    fprintf(o, "  workers        %lld rollout, %lld trainer%s, %lld eval",
            (long long)cfg->workers.rollout, (long long)cfg->workers.trainer,
            cfg->workers.trainer > 1 ? " (data-parallel ranks)" : "", (long long)cfg->workers.eval);
    if (cfg->workers.standby_trainers)
        fprintf(o, ", %lld standby trainer(s)", (long long)cfg->workers.standby_trainers);
    if (bind)
        fprintf(o, ": they join %s\n", bind);
    else
        fprintf(o, ": %s on %s\n", procs ? "`baton worker` processes" : "threads of this process",
                cfg->run.device);
    fprintf(o, "  precision      %s, workers.shard %s, grpo.micro_batch %s\n",
            s_value(cfg, "run.precision", a, sizeof a), s_value(cfg, "workers.shard", b, sizeof b),
            s_value(cfg, "grpo.micro_batch", c, sizeof c));
    if (cfg->sft.steps > 0)
        fprintf(o,
                "  sft            %lld steps of %lld demonstrations, lr %g (warmup %lld), stops at "
                "held-out accuracy %g%s\n",
                (long long)cfg->sft.steps, (long long)cfg->sft.batch_size, cfg->sft.lr,
                (long long)cfg->sft.warmup_steps, cfg->sft.stop_accuracy,
                cfg->sft.eval_every ? "" : " (never evaluated: sft.eval_every 0)");
    else
        fprintf(o, "  sft            none (sft.steps 0)\n");
    fprintf(
        o,
        "  grpo           %lld steps of %lld prompts x %lld completions (%lld sequences a step), "
        "max_new_tokens %lld, lr %g %s, %s\n",
        (long long)cfg->grpo.steps, (long long)cfg->grpo.prompts_per_step,
        (long long)cfg->grpo.group_size,
        (long long)(cfg->grpo.prompts_per_step * cfg->grpo.group_size),
        (long long)cfg->grpo.max_new_tokens, cfg->grpo.lr,
        s_value(cfg, "grpo.lr_schedule", a, sizeof a),
        cfg->grpo.max_staleness ? "asynchronous" : "synchronous");
    if (cfg->grpo.max_staleness)
        fprintf(o, "                 rollouts up to %lld steps ahead\n",
                (long long)cfg->grpo.max_staleness);
    for (int k = 0; k < bt_config_n_sources(cfg) && cfg->data.n_sources; k++)
        fprintf(o, "  data source    %s (weight %g)\n", bt_config_source_name(cfg, k),
                cfg->data.sources[k].weight);
    for (int i = 0; i < cfg->eval.n_datasets; i++) {
        const bt_eval_dataset *d = &cfg->eval.datasets[i];
        char key[64], when[160];
        snprintf(key, sizeof key, "eval.datasets[%d].kind", i);
        s_schedule(d, cfg->eval.adaptive, when, sizeof when);
        fprintf(o, "  %-14s %s (%s", i ? "" : "evaluation", d->name,
                s_value(cfg, key, a, sizeof a));
        if (d->count)
            fprintf(o, ", %lld examples", (long long)d->count);
        if (d->kind == BT_EVAL_GENERATE && d->samples > 1)
            fprintf(o, " x %lld samples", (long long)d->samples);
        fprintf(o, "): %s\n", when);
    }
    if (cfg->n_variants) {
        fprintf(o, "  variants      ");
        for (int k = 0; k < cfg->n_variants; k++)
            fprintf(o, " %s (%d set)", cfg->variants[k].name, cfg->variants[k].n_sets);
        fprintf(o, "%s\n", cfg->pbt.enabled ? ", population-based training" : "");
    }
    if (!cfg->checkpoint.full_every_steps && !cfg->checkpoint.full_every_secs &&
        !cfg->checkpoint.full_every_epochs)
        fprintf(o, "  checkpoints    none full (checkpoint.full_every_*: 0): no resume");
    else
        fprintf(o,
                "  checkpoints    full every %lld steps / %g s / %lld epochs (0: not by it), "
                "the last %lld kept",
                (long long)cfg->checkpoint.full_every_steps, cfg->checkpoint.full_every_secs,
                (long long)cfg->checkpoint.full_every_epochs, (long long)cfg->checkpoint.keep_last);
    if (cfg->checkpoint.light_every_steps)
        fprintf(o, "; light every %lld steps", (long long)cfg->checkpoint.light_every_steps);
    fprintf(o, "\n");
    bt_model_config model = cfg->model;
    bt_plan_input in = {0};
    bt_plan p;
    char json_path[BT_CONFIG_PATH_MAX + 16], err[256] = "";
    snprintf(json_path, sizeof json_path, "%s/config.json", cfg->model_path);
    if ((cfg->model_path[0] && bt_model_config_load(json_path, &model) != BT_OK) ||
        bt_plan_make(cfg, &model, &in, &p, err, sizeof err) != BT_OK) {
        fprintf(o, "  memory         not planned: %s\n", err[0] ? err : bt_last_error());
        return 0;
    }
    const double mib = 1024.0 * 1024.0;
    fprintf(
        o,
        "  memory         %.3gM parameters; per worker: trainer %.1f MiB, rollout %.1f MiB, eval "
        "%.1f MiB (baton plan CONFIG has the table)\n",
        (double)p.params / 1e6, p.trainer.total / mib, p.rollout.total / mib, p.eval.total / mib);
    return 0;
}

/*  `baton run` (workers: threads, or processes with --procs) and `baton controller` (workers
    join --bind from elsewhere) share everything else. */
static int s_run_or_control(int argc, char **argv, bool controller) {
    const char *path = NULL, *dir = NULL, *resume = NULL, *bind = NULL;
    const char *key = controller ? getenv("BATON_KEY") : NULL;
    const char *allow = controller ? getenv("BATON_ALLOW") : NULL;
    bool procs = false, insecure = false, key_flag = false, overwrite = false, dry_run = false;
    const char *sets[S_MAX_SETS];
    int n_sets = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--run-dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--procs") && !controller)
            procs = true;
        else if (!strcmp(argv[i], "--bind") && i + 1 < argc && controller)
            bind = argv[++i];
        else if (!strcmp(argv[i], "--key") && i + 1 < argc && controller) {
            key = argv[++i];
            key_flag = true;
        } else if (!strcmp(argv[i], "--allow") && i + 1 < argc && controller) {
            allow = argv[++i];
            key_flag = true;
        } else if (!strcmp(argv[i], "--insecure") && controller)
            insecure = true;
        else if (!strcmp(argv[i], "--resume")) /* an optional folder: the next non-option */
            resume = i + 1 < argc && argv[i + 1][0] != '-' && path ? argv[++i] : "";
        else if (!strcmp(argv[i], "--overwrite"))
            overwrite = true;
        else if (!strcmp(argv[i], "--dry-run"))
            dry_run = true;
        else if (!strcmp(argv[i], "--set") && i + 1 < argc && n_sets < S_MAX_SETS)
            sets[n_sets++] = argv[++i];
        else if (argv[i][0] == '-' || path)
            return bt_cli_usage_error("%s: unexpected argument \"%s\"",
                                      controller ? "controller" : "run", argv[i]);
        else
            path = argv[i];
    }
    if (!path)
        return bt_cli_usage_error("%s: missing CONFIG", controller ? "controller" : "run");
    char again[4096]; /* the command that resumes this run: argv without --resume [FOLDER] and
                         --overwrite */
    size_t used =
        (size_t)snprintf(again, sizeof again, "baton %s", controller ? "controller" : "run");
    for (int i = 0; i < argc && used < sizeof again; i++)
        if (strcmp(argv[i], "--resume") && strcmp(argv[i], "--overwrite") && argv[i] != resume)
            used += (size_t)snprintf(again + used, sizeof again - used, " %s", argv[i]);
    if (resume && overwrite)
        return bt_cli_usage_error("%s: --resume continues a run and --overwrite replaces it: give "
                                  "one of them",
                                  controller ? "controller" : "run");
    if (controller) {
        if (!bind)
            return bt_cli_usage_error("controller: missing --bind ENDPOINT");
        if (insecure && key_flag)
            return bt_cli_usage_error(
                "controller: --insecure and --key/--allow exclude each other");
        if (insecure) /* explicit: keys in the environment are not used */
            key = allow = NULL;
        if ((key != NULL) != (allow != NULL))
            return bt_cli_usage_error("controller: CURVE needs both --key FILE (the controller's "
                                      "secret key) and --allow DIR_OR_FILE (the workers' public "
                                      "keys)");
        if (!key && !insecure && !strncmp(bind, "tcp://", 6))
            return bt_cli_usage_error("controller: %s: tcp:// needs CURVE keys (--key FILE --allow "
                                      "DIR_OR_FILE, from `baton keygen`) or, on a trusted "
                                      "network, --insecure",
                                      bind);
        if (key && bt_curve_available() != BT_OK)
            return bt_cli_usage_error("controller: %s", bt_last_error());
    }
    char *text = NULL;
    if (bt_file_read(path, 1 << 20, &text, NULL) != BT_OK)
        return bt_cli_usage_error("%s", bt_last_error());
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    bt_run_t *run = bt_run_new(text, base, sets, n_sets);
    free(text);
    if (!run) {
        fprintf(stderr, "baton: %s\n", bt_last_error());
        return 2;
    }
    const char *command[S_MAX_ARGS + 2] = {"baton", controller ? "controller" : "run"};
    int n_command = 2;
    for (int i = 0; i < argc && n_command < S_MAX_ARGS + 2; i++)
        command[n_command++] = argv[i];
    bt_run_set_command(run, n_command, command);
    if (dir)
        bt_run_set_dir(run, dir);
    if (resume)
        bt_run_set_resume(run, resume);
    if (overwrite)
        bt_run_set_overwrite(run);
    if (procs)
        bt_run_set_procs(run);
    if (controller) {
        bt_run_set_endpoint(run, bind);
        bt_run_set_external_workers(run);
        if (key)
            bt_run_set_curve(run, key, allow);
        if (insecure)
            bt_run_set_insecure(run);
    }
    if (bt_run_check(run) != BT_OK) { /* the run directory and --resume, before anything starts */
        fprintf(stderr, "baton: %s\n", bt_last_error());
        bt_run_destroy(&run);
        return 2;
    }
    if (dry_run) {
        int rc = s_dry_run(run, procs, controller ? bind : NULL);
        bt_run_destroy(&run);
        return rc;
    }
    if (bt_run_is_complete(run)) {
        fprintf(stderr,
                "baton: %s: the run finished already (step %lld of %lld, its policy in %s/model): "
                "nothing to resume\n",
                bt_run_dir(run), (long long)bt_run_config_of(run)->grpo.steps,
                (long long)bt_run_config_of(run)->grpo.steps, bt_run_dir(run));
        printf("run directory: %s\n", bt_run_dir(run));
        bt_run_destroy(&run);
        return 0;
    }
    s_display d = {isatty(STDERR_FILENO) != 0, bt_run_config_of(run)->run.log_every, -1};
    bt_run_set_progress(run, s_progress, &d);
    s_catch_signals();
    bt_status st = bt_run_start(run);
    bool done = false;
    while (st == BT_OK && !done && !atomic_load(&s_signal)) /* a signal: stop between steps */
        st = bt_run_step(run, &done);
    int signo = done ? 0 : atomic_load(&s_signal);
    char err[1024];
    snprintf(err, sizeof err, "%s", bt_last_error());
    bt_status fin = bt_run_finish(run); /* the workers stop (STOP; a process that missed it is
                                           killed) */
    if (st == BT_OK)
        st = fin;
    else
        fprintf(stderr, "\nbaton: run failed: %s\n", err);
    if (st == BT_OK && signo) {
        char latest[2048];
        snprintf(latest, sizeof latest, "%s/ckpt/LATEST", bt_run_dir(run));
        bt_progress p = bt_run_progress(run);
        fprintf(stderr, "baton: stopped by %s after step %lld of %lld, the workers stopped; ",
                signo == SIGINT ? "SIGINT" : "SIGTERM", (long long)p.step, (long long)p.total);
        if (access(latest, F_OK) == 0)
            fprintf(stderr, "continue it from its last checkpoint with: %s --resume\n", again);
        else
            fprintf(stderr,
                    "it has no checkpoint to continue from yet (checkpoint.full_every_steps): "
                    "%s --overwrite starts it again\n",
                    again);
    }
    bt_controller_stats s = bt_run_stats(run);
    if (s.malformed || s.late_results || s.lost_workers || s.failed_tasks)
        fprintf(stderr,
                "baton: %lld malformed messages, %lld late results, %lld lost workers, "
                "%lld failed tasks\n",
                (long long)s.malformed, (long long)s.late_results, (long long)s.lost_workers,
                (long long)s.failed_tasks);
    if (bt_run_refused(run))
        fprintf(stderr,
                "baton: %lld connections refused (keys not allowed; events.jsonl: "
                "worker_refused)\n",
                (long long)bt_run_refused(run));
    printf("run directory: %s\n", bt_run_dir(run));
    bt_run_destroy(&run);
    return st != BT_OK ? 1 : signo ? 128 + signo : 0; /* 130 SIGINT, 143 SIGTERM: as shells */
}

int bt_cli_run(int argc, char **argv) {
    return s_run_or_control(argc, argv, false);
}

int bt_cli_controller(int argc, char **argv) {
    return s_run_or_control(argc, argv, true);
}
