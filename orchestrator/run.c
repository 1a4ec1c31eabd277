/*  run.c — the embedded run: controller in the caller's thread, one thread per worker over
    inproc (or, with bt_run_set_procs, one `baton worker` process per worker over ipc). */
#define _GNU_SOURCE /* realpath, dladdr */
#include "baton/baton.h"
#include "baton/scaling.h"

#include "baton/ckpt.h"
#include "baton/config.h"
#include "baton/controller.h"
#include "baton/fileio.h"
#include "baton/prometheus.h"
#include "baton/runstate.h"
#include "baton/security.h"
#include "baton/tensorboard.h"
#include "baton/version.h"
#include "baton/worker.h"

#include <cjson/cJSON.h>

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <pwd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

enum { S_MAX_THREADS = 256, S_MAX_CHANGED = 32 };

typedef struct {
    bt_worker_options opt;
    char name[64];
    pthread_t thread;
    pid_t pid; /* with procs: the worker process; else 0 */
    bt_role role;
    bool exited; /* with procs: the process was reaped (wait_status says how it ended) */
    int wait_status;
    bt_status status;
} s_thread;

struct bt_run {
    bt_config cfg;
    char *config_json; /* resolved, as written to the run directory and sent in WELCOME */
    char dir[1024];
    char endpoint[256];
    bt_progress_fn *progress;
    void *progress_user;
    bt_reward_fn *reward;
    void *reward_user;
    bool resume;
    bool overwrite; /* bt_run_set_overwrite: the directory's run files are removed first */
    bool checked;   /* bt_run_check has passed */
    bool complete;  /* a resume of a run that finished: start, step and finish do nothing */
    /* a resume: the keys whose values differ from the run directory's config.json (those that may
       change on resume), with their old and new values, for the config_changed event */
    int n_changed;
    const char *changed[S_MAX_CHANGED];
    char changed_from[S_MAX_CHANGED][64], changed_to[S_MAX_CHANGED][64];
    char resume_from[1024];
    void *zmq_ctx;
    bt_runlog_t *log;
    bt_prometheus_t *prom; /* run.metrics_listen's endpoint; NULL: off */
    bt_tensorboard_t *tb; /* run.tensorboard: follows log; destroyed after it */
    bt_controller_t *ctl;
    /* vcfg[k]: &cfg without variants, else variant k's config (heap): one copy per variant */
    bt_config *vcfg[BT_CONFIG_MAX_VARIANTS];
    s_thread threads[S_MAX_THREADS];
    int n_threads;
    bool finished;
    bool procs;    /* workers are `baton worker` processes over ipc:// */
    bool external; /* workers are started by someone else and join the endpoint */
    char curve_key[1024], curve_allow[1024]; /* bt_run_set_curve; "" = none */
    bool insecure;                           /* a tcp:// endpoint may go without CURVE */
    bt_zap_t *zap;                           /* with CURVE: admits the allowed worker keys */
    double t0;
    char **argv; /* bt_run_set_command: the command that made this invocation, for run.json */
    int argc;
};

bt_run_t *bt_run_new(const char *config_json, const char *source, const char *const *overrides,
                     int n_overrides) {
    bt_run_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "run: out of memory");
        return NULL;
    }
    if (bt_config_parse(config_json, source, overrides, n_overrides, &self->cfg) != BT_OK ||
        bt_config_check_files(&self->cfg, source) != BT_OK ||
        !(self->config_json = bt_config_to_json(&self->cfg))) {
        free(self);
        return NULL;
    }
    int64_t workers =
        self->cfg.workers.rollout + self->cfg.workers.trainer + self->cfg.workers.eval;
    if (workers > S_MAX_THREADS) {
        bt_fail(BT_EINVAL, "%s: workers: %lld in all, at most %d in one process", source,
                (long long)workers, S_MAX_THREADS);
        bt_run_destroy(&self);
        return NULL;
    }
    snprintf(self->dir, sizeof self->dir, "runs/%s", self->cfg.run.name);
    snprintf(self->endpoint, sizeof self->endpoint, "inproc://baton-%p", (void *)self);
    return self;
}

const bt_config *bt_run_config_of(const bt_run_t *self) {
    return &self->cfg;
}
void bt_run_set_resume(bt_run_t *self, const char *folder) {
    self->resume = true;
    snprintf(self->resume_from, sizeof self->resume_from, "%s", folder ? folder : "");
}

void bt_run_set_command(bt_run_t *self, int argc, const char *const *argv) {
    for (int i = 0; i < self->argc; i++)
        free(self->argv[i]);
    free(self->argv);
    self->argc = 0;
    self->argv = calloc((size_t)(argc > 0 ? argc : 1), sizeof *self->argv);
    for (int i = 0; self->argv && i < argc; i++)
        if ((self->argv[i] = strdup(argv[i])))
            self->argc = i + 1;
}

void bt_run_set_overwrite(bt_run_t *self) {
    self->overwrite = true;
}

void bt_run_set_procs(bt_run_t *self) {
    self->procs = true;
}

void bt_run_set_external_workers(bt_run_t *self) {
    self->external = true;
}

void bt_run_set_curve(bt_run_t *self, const char *key_file, const char *allow) {
    snprintf(self->curve_key, sizeof self->curve_key, "%s", key_file);
    snprintf(self->curve_allow, sizeof self->curve_allow, "%s", allow);
}

void bt_run_set_insecure(bt_run_t *self) {
    self->insecure = true;
}

int64_t bt_run_refused(const bt_run_t *self) {
    return bt_zap_refused(self->zap);
}

void bt_run_set_dir(bt_run_t *self, const char *dir) {
    snprintf(self->dir, sizeof self->dir, "%s", dir);
}
const char *bt_run_dir(const bt_run_t *self) {
    return self->dir;
}
void bt_run_set_endpoint(bt_run_t *self, const char *endpoint) {
    snprintf(self->endpoint, sizeof self->endpoint, "%s", endpoint);
}
void bt_run_set_progress(bt_run_t *self, bt_progress_fn *fn, void *user) {
    self->progress = fn;
    self->progress_user = user;
}
void bt_run_set_reward(bt_run_t *self, bt_reward_fn *fn, void *user) {
    self->reward = fn;
    self->reward_user = user;
}

static void *s_worker_main(void *arg) {
    s_thread *t = arg;
    t->status = bt_worker_run(&t->opt);
    if (t->status != BT_OK) /* never an empty error line */
        bt_log(BT_LOG_ERROR, "%s: %s", t->name,
               bt_last_error()[0] ? bt_last_error() : bt_status_str(t->status));
    return NULL;
}

#ifndef BATON_LIB_TO_BIN /* CMake's: CMAKE_INSTALL_BINDIR relative to CMAKE_INSTALL_LIBDIR */
#define BATON_LIB_TO_BIN "../bin"
#endif
static const char s_anchor; /* an address inside whatever holds this code */

/*  The executable a worker process runs.  Where this code is linked into the executable (baton,
    the tests), that executable.  Where it is libbaton.so, loaded by a host program that is not
    baton: the installed baton, BATON_LIB_TO_BIN from the library's folder (PREFIX/lib ->
    PREFIX/bin), else the one beside it (the build tree).  exe holds cap bytes. */
static bt_status s_worker_exe(char *exe, size_t cap) {
    Dl_info info;
    const char *base = NULL;
    if (dladdr(&s_anchor, &info) && info.dli_fname && (base = strrchr(info.dli_fname, '/')) &&
        strncmp(base + 1, "libbaton.so", 11) == 0) {
        int dir = (int)(base - info.dli_fname);
        snprintf(exe, cap, "%.*s/%s/baton", dir, info.dli_fname, BATON_LIB_TO_BIN);
        if (access(exe, X_OK) == 0)
            return BT_OK;
        snprintf(exe, cap, "%.*s/baton", dir, info.dli_fname);
        if (access(exe, X_OK) == 0)
            return BT_OK;
        return bt_fail(BT_EIO,
                       "run: worker processes: no baton executable at %.*s/%s/baton (%s runs the "
                       "baton installed with it)",
                       dir, info.dli_fname, BATON_LIB_TO_BIN, info.dli_fname);
    }
    ssize_t n = readlink("/proc/self/exe", exe, cap - 1);
    if (n <= 0)
        return bt_fail(BT_EIO, "run: --procs: cannot find this executable: %s", strerror(errno));
    exe[n] = '\0';
    return BT_OK;
}

/*  `baton worker --connect ENDPOINT --role ROLE --name NAME`, started from s_worker_exe's baton. */
static bt_status s_fork_worker(bt_run_t *self, s_thread *t, bt_role role) {
    char exe[4096];
    BT_TRY(s_worker_exe(exe, sizeof exe));
    pid_t parent = getpid();
    t->pid = fork();
    if (t->pid < 0)
        return bt_fail(BT_EIO, "run: cannot fork a worker: %s", strerror(errno));
    if (t->pid == 0) {
        /* (async-signal-safe calls only, in the child of a threaded process) A Ctrl-C reaches the
           whole process group and a SIGTERM may too: the controller handles them and stops the
           workers with STOP, so a worker ignores them, with none blocked (a blocked mask would
           be inherited from the caller).  It dies with the controller, never an orphan. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127); /* the controller is gone already */
        execl(exe, exe, "worker", "--connect", self->endpoint, "--role", bt_role_name(role),
              "--name", t->name, (char *)NULL);
        _exit(127);
    }
    return BT_OK;
}

static bt_status s_spawn(bt_run_t *self, bt_role role, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        if (self->n_threads == S_MAX_THREADS)
            return bt_fail(BT_ERANGE, "run: more than %d workers", S_MAX_THREADS);
        s_thread *t = &self->threads[self->n_threads];
        t->role = role;
        snprintf(t->name, sizeof t->name, "%s-%lld", bt_role_name(role), (long long)i);
        if (self->procs) {
            BT_TRY(s_fork_worker(self, t, role));
            self->n_threads++;
            continue;
        }
        t->opt = (bt_worker_options){.zmq_ctx = self->zmq_ctx,
                                     .endpoint = self->endpoint,
                                     .role = role,
                                     .name = t->name,
                                     .reward = self->reward,
                                     .reward_user = self->reward_user};
        if (pthread_create(&t->thread, NULL, s_worker_main, t) != 0)
            return bt_fail(BT_EIO, "run: cannot start a worker thread");
        self->n_threads++;
    }
    return BT_OK;
}

/*  bt_controller_gone_fn under --procs: false once every worker process of the role has exited
    (reaped here), with how the last one ended.  Threads never end before STOP. */
static bool s_may_come(bt_role role, char *why, size_t cap, void *user) {
    bt_run_t *self = user;
    bool any = false;
    for (int i = 0; i < self->n_threads; i++) {
        s_thread *t = &self->threads[i];
        if (t->role != role)
            continue;
        if (!t->pid)
            return true;
        if (!t->exited && waitpid(t->pid, &t->wait_status, WNOHANG) == t->pid)
            t->exited = true;
        if (!t->exited) {
            any = true;
            continue;
        }
        if (WIFSIGNALED(t->wait_status))
            snprintf(why, cap, "%s (pid %d) was killed by signal %d", t->name, (int)t->pid,
                     WTERMSIG(t->wait_status));
        else
            snprintf(why, cap, "%s (pid %d) exited with status %d", t->name, (int)t->pid,
                     WEXITSTATUS(t->wait_status));
    }
    return any;
}

/*  On the ZAP thread: events.jsonl takes lines from any thread. */
static void s_on_refused(const char *key, const char *address, const char *reason, void *user) {
    bt_run_t *self = user;
    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "event", "worker_refused");
    bt_jsonl_num(&line, "time", bt_now() - self->t0);
    bt_jsonl_str(&line, "key", key);
    bt_jsonl_str(&line, "address", address);
    bt_jsonl_str(&line, "reason", reason);
    bt_runlog_event(self->log, &line);
}

/*  With keys, the ZAP handler that makes the controller's socket a CURVE server; without, plain,
    which a tcp:// endpoint takes only when asked for (bt_run_set_insecure). */
static bt_status s_secure(bt_run_t *self) {
    if (self->curve_key[0]) {
        self->zap =
            bt_zap_new(self->zmq_ctx, self->curve_key, self->curve_allow, s_on_refused, self);
        return self->zap ? BT_OK : BT_EINVAL;
    }
    if (!strncmp(self->endpoint, "tcp://", 6) && !self->insecure)
        return bt_fail(BT_EINVAL,
                       "run: %s: a tcp:// endpoint needs CURVE keys (`baton keygen`; --key and "
                       "--allow) or, on a trusted network, --insecure",
                       self->endpoint);
    return BT_OK;
}

/*  What a run writes into its directory: what bt_run_set_overwrite removes.  The first three mark
    a directory that holds a run. */
static const char *const s_run_files[] = {
    "config.json", "metrics.jsonl", "events.jsonl",   "ckpt",    "model",
    "variants",    "report.html",   "controller.ipc", "run.json",
    "tb"};
enum { S_N_RUN_FILES = sizeof s_run_files / sizeof s_run_files[0], S_N_MARKS = 3 };

/*  Whether dir holds a run; found gets the names of its marks, comma-separated. */
static bool s_holds_run(const char *dir, char *found, size_t len) {
    found[0] = '\0';
    for (int i = 0; i < S_N_MARKS; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, s_run_files[i]);
        if (access(path, F_OK) == 0)
            snprintf(found + strlen(found), len - strlen(found), "%s%s", found[0] ? ", " : "",
                     s_run_files[i]);
    }
    return found[0] != '\0';
}

/*  The keys that may change when a run resumes (docs/architecture.md, "Resume"): how long it goes
    on, how it is shown, where its work runs and how faults are detected, where checkpoints go;
    none of them changes what a step computes.  "x." stands for every key of section x. */
static const char *const s_resume_may_change[] = {
    "grpo.steps",       "run.log_every",       "run.threads",
    "workers.",         "checkpoint.",         "reward.timeout_ms",
    "reward.retries",   "debug.save_pause_ms", "debug.kill_rollout_at_task",
    "debug.log_prompts",
    "run.metrics_listen", /* where the figures are served, not what they are */
    "run.tensorboard"};   /* a copy of the logs in another format: turned on, it writes them all */
enum { S_N_MAY_CHANGE = sizeof s_resume_may_change / sizeof s_resume_may_change[0] };

static bool s_may_change(const char *key) {
    for (int i = 0; i < S_N_MAY_CHANGE; i++) {
        const char *k = s_resume_may_change[i];
        size_t n = strlen(k);
        if (k[n - 1] == '.' ? strncmp(key, k, n) == 0 : strcmp(key, k) == 0)
            return true;
    }
    return false;
}

/*  --resume with the run directory's config.json: the keys that differ must be ones that may
    change on resume; they are kept for the config_changed event. */
static bt_status s_check_config_changes(bt_run_t *self) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", self->dir);
    bt_config *old = malloc(sizeof *old);
    if (!old)
        return bt_fail(BT_ENOMEM, "run: out of memory");
    if (bt_config_load(path, NULL, 0, old) != BT_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bt_last_error());
        free(old);
        return bt_fail(BT_EINVAL,
                       "%s: --resume: its config.json cannot be read back to compare it with the "
                       "config given: %s",
                       self->dir, why);
    }
    const char *keys[S_MAX_CHANGED];
    int n = bt_config_diff(old, &self->cfg, keys, S_MAX_CHANGED);
    char refused[1024] = "";
    for (int i = 0; i < n && i < S_MAX_CHANGED; i++) {
        char from[64] = "(changed)", to[64] = "(changed)";
        bt_config_value_text(old, keys[i], from, sizeof from);
        bt_config_value_text(&self->cfg, keys[i], to, sizeof to);
        if (!s_may_change(keys[i])) {
            size_t used = strlen(refused);
            snprintf(refused + used, sizeof refused - used, "%s%s (%s -> %s)", used ? ", " : "",
                     keys[i], from, to);
            continue;
        }
        self->changed[self->n_changed] = keys[i];
        snprintf(self->changed_from[self->n_changed], 64, "%s", from);
        snprintf(self->changed_to[self->n_changed], 64, "%s", to);
        self->n_changed++;
    }
    free(old);
    if (refused[0] || n > S_MAX_CHANGED)
        return bt_fail(BT_EINVAL,
                       "%s: --resume: the config differs from %s in %s%s; only grpo.steps, "
                       "run.log_every, run.threads, run.metrics_listen, run.tensorboard, workers.*, "
                       "checkpoint.*, reward.timeout_ms, reward.retries and the debug hooks "
                       "save_pause_ms, kill_rollout_at_task and log_prompts may change on resume: "
                       "give the run's config, or start a new run (--overwrite, or another "
                       "--run-dir)",
                       self->dir, path, refused[0] ? refused : "more keys than listed",
                       n > S_MAX_CHANGED ? " and more" : "");
    return BT_OK;
}

/*  Whether folder lies in dir (both resolved): a checkpoint folder given to --resume must be one of
    the run directory's, or of its checkpoint mirror's. */
static bool s_is_inside(const char *folder, const char *dir) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(folder, a) || !realpath(dir, b))
        return false;
    size_t n = strlen(b);
    return strncmp(a, b, n) == 0 && a[n] == '/';
}

/*  The state.json file `name` of checkpoint folder against cfg and the run directory's logs.
 *further when it does not verify and the folder was not named (the resume looks further). */
static bt_status s_check_state(const bt_run_t *self, const char *folder, const char *name,
                               const bt_config *cfg, bool named, bool *further) {
    char *text = NULL, source[PATH_MAX + 96];
    if (bt_ckpt_read_file(folder, name, (size_t)1 << 24, &text) != BT_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bt_last_error());
        *further = !named;
        return named ? bt_fail(BT_EIO, "--resume %s: %s", folder, why) : BT_OK;
    }
    snprintf(source, sizeof source, "%s/%s", folder, name);
    bt_runstate *st = malloc(sizeof *st);
    bt_status rc = st ? bt_runstate_from_json(text, source, st) : BT_ENOMEM;
    free(text);
    char metrics[PATH_MAX], events[PATH_MAX];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", self->dir);
    snprintf(events, sizeof events, "%s/events.jsonl", self->dir);
    struct stat sb;
    int64_t bytes = stat(metrics, &sb) == 0 ? (int64_t)sb.st_size : 0;
    int64_t event_bytes = stat(events, &sb) == 0 ? (int64_t)sb.st_size : 0;
    if (rc == BT_OK)
        rc = bt_runstate_check(st, cfg, bytes, event_bytes, source);
    free(st);
    return rc;
}

/*  --resume: the checkpoint it will start from (the folder named, else the one LATEST names) holds
    a state.json this run can continue from.  A LATEST whose state.json does not verify is left to
    the resume, which falls back to an older checkpoint. */
static bt_status s_check_checkpoint(bt_run_t *self) {
    char folder[PATH_MAX], ckpt[PATH_MAX], mirror[PATH_MAX];
    bool named = self->resume_from[0] != '\0';
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", self->dir);
    snprintf(mirror, sizeof mirror, "%s/ckpt", self->cfg.checkpoint.mirror_dir);
    if (named) {
        snprintf(folder, sizeof folder, "%s", self->resume_from);
        struct stat sb;
        if (stat(folder, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return bt_fail(BT_EINVAL, "--resume %s: no such checkpoint folder", folder);
        if (!s_is_inside(folder, ckpt) &&
            !(self->cfg.checkpoint.mirror_dir[0] && s_is_inside(folder, mirror)))
            return bt_fail(BT_EINVAL,
                           "--resume %s: not a checkpoint of %s (a folder in %s or in "
                           "checkpoint.mirror_dir's ckpt/): resume the run it belongs to "
                           "(--run-dir), whose metrics.jsonl it matches",
                           folder, self->dir, ckpt);
    } else if (bt_ckpt_latest_named(self->dir, folder, sizeof folder) != BT_OK || !folder[0]) {
        return BT_OK; /* the resume looks further, or says there is none */
    }
    char why[1024];
    bt_status rc = BT_OK;
    bool further = false;
    bt_config *variant = self->cfg.n_variants > 0 ? malloc(sizeof *variant) : NULL;
    if (self->cfg.n_variants > 0 && !variant)
        return bt_fail(BT_ENOMEM, "run: out of memory");
    for (int k = 0;
         rc == BT_OK && !further && k < (self->cfg.n_variants > 0 ? self->cfg.n_variants : 1);
         k++) {
        char name[BT_CONFIG_NAME_MAX + 16] = "state.json";
        if (variant) { /* each policy's state.json in the folder of its name */
            snprintf(name, sizeof name, "%s/state.json", self->cfg.variants[k].name);
            rc = bt_config_variant(&self->cfg, k, variant);
        }
        if (rc == BT_OK)
            rc = s_check_state(self, folder, name, variant ? variant : &self->cfg, named, &further);
    }
    free(variant);
    if (further) /* a LATEST whose state.json does not verify: the resume looks further */
        return BT_OK;
    if (rc != BT_OK) {
        snprintf(why, sizeof why, "%s", bt_last_error());
        return bt_fail(BT_EINVAL, rc == BT_EIO ? "%s" : "--resume: %s", why);
    }
    return BT_OK;
}

static bool s_starts(const char *line, const char *prefix) {
    return strncmp(line, prefix, strlen(prefix)) == 0;
}

/*  The number after `"key":` in line, or -1. */
static int64_t s_field_int(const char *line, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(line, pattern);
    return at ? strtoll(at + strlen(pattern), NULL, 10) : -1;
}

/*  Whether the run in the directory finished with this config's grpo.steps: its policy is saved
    (model/, and a policy_saved event after the last resumed one), its last train line is step
    grpo.steps and each eval dataset has its evaluation of that step.  A run killed before any of
    these, or resumed with more grpo.steps, has not. */
static bool s_is_complete(const bt_run_t *self) {
    const bt_config *c = &self->cfg;
    char path[PATH_MAX], *line = NULL;
    size_t cap = 0;
    snprintf(path, sizeof path, "%s/model/model.safetensors", self->dir);
    if (access(path, F_OK) != 0)
        return false;
    snprintf(path, sizeof path, "%s/events.jsonl", self->dir);
    FILE *f = fopen(path, "r");
    bool saved = false;
    while (f && getline(&line, &cap, f) > 0)
        if (s_starts(line, "{\"event\":\"policy_saved\","))
            saved = true;
        else if (s_starts(line, "{\"event\":\"resumed\","))
            saved = false;
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/metrics.jsonl", self->dir);
    f = saved ? fopen(path, "r") : NULL;
    int64_t last_train = 0;
    bool evaluated[BT_EVAL_MAX_DATASETS] = {false};
    while (f && getline(&line, &cap, f) > 0) {
        int64_t step = s_field_int(line, "step");
        if (s_starts(line, "{\"kind\":\"train\",") && step > last_train)
            last_train = step;
        if (!s_starts(line, "{\"kind\":\"eval\",\"phase\":\"rl\",") || step != c->grpo.steps)
            continue;
        for (int i = 0; i < c->eval.n_datasets; i++) {
            char name[BT_EVAL_NAME_MAX + 16];
            snprintf(name, sizeof name, "\"dataset\":\"%s\"", c->eval.datasets[i].name);
            evaluated[i] |= strstr(line, name) != NULL;
        }
    }
    if (f)
        fclose(f);
    free(line);
    bool complete = saved && last_train == c->grpo.steps;
    for (int i = 0; i < c->eval.n_datasets && c->workers.eval > 0; i++)
        complete &= evaluated[i];
    return complete;
}

bool bt_run_is_complete(const bt_run_t *self) {
    return self->complete;
}

bt_status bt_run_check(bt_run_t *self) {
    if (self->checked)
        return BT_OK;
    if (self->resume && self->overwrite)
        return bt_fail(BT_EINVAL, "run: --resume continues a run and --overwrite replaces it: give "
                                  "one of them");
    char found[128];
    bool holds = s_holds_run(self->dir, found, sizeof found);
    if (holds && !self->resume && !self->overwrite)
        return bt_fail(BT_EINVAL,
                       "%s holds a run already (%s): --resume continues it, --overwrite replaces "
                       "it",
                       self->dir, found);
    if (self->resume && !holds)
        return bt_fail(BT_EINVAL,
                       "%s: no run to resume (no config.json, metrics.jsonl or events.jsonl)",
                       self->dir);
    self->n_changed = 0;
    if (self->resume) {
        BT_TRY(s_check_config_changes(self));
        self->complete = s_is_complete(self);
        if (!self->complete || self->resume_from[0]) /* a folder named is checked anyway */
            BT_TRY(s_check_checkpoint(self));
    }
    self->checked = true;
    return BT_OK;
}

/*  --overwrite: the run files of the directory go; anything else in it stays. */
static bt_status s_remove_run(const bt_run_t *self) {
    for (int i = 0; i < S_N_RUN_FILES; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", self->dir, s_run_files[i]);
        BT_TRY(bt_rmtree(path));
    }
    return BT_OK;
}

/*  RUN_DIR/run.json: one record per invocation that started or resumed the run (docs/
    architecture.md, "Run identity"): which baton and revision, the command, host, user, start time
    (UTC), the hash of the resolved config and, on a resume, the keys that changed.  Read back and
    appended to, never cut: a resume to an older checkpoint adds its record after the others. */
static bt_status s_run_json(const bt_run_t *self) {
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/run.json", self->dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cJSON *doc = NULL;
    char *text = NULL;
    size_t len = 0;
    if (self->resume && access(path, F_OK) == 0) {
        BT_TRY(bt_file_read(path, 64u << 20, &text, &len));
        doc = cJSON_Parse(text);
        free(text);
        if (!doc || !cJSON_IsArray(cJSON_GetObjectItem(doc, "records"))) {
            cJSON_Delete(doc);
            return bt_fail(BT_EINVAL, "%s: not a run.json of baton (no \"records\" array)", path);
        }
    } else {
        doc = cJSON_CreateObject();
        if (doc)
            cJSON_AddItemToObject(doc, "records", cJSON_CreateArray());
    }
    cJSON *r = cJSON_CreateObject();
    if (!doc || !r) {
        cJSON_Delete(doc);
        cJSON_Delete(r);
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(doc, "records"), r);
    cJSON_AddStringToObject(r, "baton_version", bt_version());
    cJSON_AddStringToObject(r, "git_revision", bt_git_revision());
    cJSON *argv = cJSON_AddArrayToObject(r, "argv");
    for (int i = 0; i < self->argc; i++)
        cJSON_AddItemToArray(argv, cJSON_CreateString(self->argv[i]));
    char host[256] = "unknown", when[32] = "", hash[24];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    cJSON_AddStringToObject(r, "host", host);
    const struct passwd *pw = getpwuid(geteuid());
    const char *user = pw ? pw->pw_name : getenv("USER");
    cJSON_AddStringToObject(r, "user", user ? user : "unknown");
    time_t now = time(NULL);
    struct tm utc;
    if (gmtime_r(&now, &utc))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
    cJSON_AddStringToObject(r, "start_time", when);
    snprintf(hash, sizeof hash, "%016llx",
             (unsigned long long)bt_hash64(self->config_json, strlen(self->config_json)));
    cJSON_AddStringToObject(r, "config_hash", hash);
    cJSON_AddBoolToObject(r, "resume", self->resume);
    cJSON *diff = cJSON_AddArrayToObject(r, "config_diff");
    for (int i = 0; i < self->n_changed; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "key", self->changed[i]);
        cJSON_AddStringToObject(d, "from", self->changed_from[i]);
        cJSON_AddStringToObject(d, "to", self->changed_to[i]);
        cJSON_AddItemToArray(diff, d);
    }
    text = cJSON_Print(doc);
    cJSON_Delete(doc);
    if (!text)
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    bt_status st = bt_file_replace(path, tmp, text, strlen(text));
    free(text);
    return st;
}

bt_status bt_run_start(bt_run_t *self) {
    BT_TRY(bt_run_check(self));
    if (self->complete) /* nothing to resume: no file is touched */
        return BT_OK;
    if (self->cfg.run.metrics_listen[0] && !self->prom) { /* a port taken: before any file */
        self->prom = bt_prometheus_new(self->cfg.run.metrics_listen);
        if (!self->prom)
            return BT_EIO;
    }
    if (self->overwrite)
        BT_TRY(s_remove_run(self));
    if (self->cfg.run.threads > 0)
        bt_set_num_threads((int)self->cfg.run.threads);
    self->log = bt_runlog_open(self->dir, self->config_json);
    if (!self->log)
        return BT_EIO;
    if (self->prom) { /* a resumed run's latest figures, then every line as it is written */
        bt_prometheus_load(self->prom, self->dir);
        BT_TRY(bt_runlog_add_sink(self->log, bt_prometheus_sink(self->prom)));
    }
    if (self->cfg.run.tensorboard) {
        self->tb = bt_tensorboard_new(self->dir);
        if (!self->tb)
            return bt_last_status();
        BT_TRY(bt_runlog_add_sink(self->log, bt_tensorboard_sink(self->tb)));
    }
    BT_TRY(s_run_json(self));
    if (self->n_changed > 0) { /* a resume with keys that may change: which, from what to what */
        const char *from[S_MAX_CHANGED], *to[S_MAX_CHANGED];
        for (int i = 0; i < self->n_changed; i++) {
            from[i] = self->changed_from[i];
            to[i] = self->changed_to[i];
        }
        bt_jsonl line;
        bt_jsonl_init(&line);
        bt_jsonl_str(&line, "event", "config_changed");
        bt_jsonl_num(&line, "time", 0);
        bt_jsonl_strs(&line, "keys", self->changed, (size_t)self->n_changed);
        bt_jsonl_strs(&line, "from", from, (size_t)self->n_changed);
        bt_jsonl_strs(&line, "to", to, (size_t)self->n_changed);
        BT_TRY(bt_runlog_event(self->log, &line));
    }
    if (self->procs && self->reward)
        return bt_fail(BT_EINVAL, "run: a host reward function cannot reach worker processes");
    if (self->procs && !strncmp(self->endpoint, "inproc://", 9)) { /* a socket in the run dir */
        char abs[PATH_MAX];
        if (!realpath(self->dir, abs) ||
            snprintf(self->endpoint, sizeof self->endpoint, "ipc://%s/controller.ipc", abs) >=
                (int)sizeof self->endpoint)
            return bt_fail(BT_EINVAL, "run: --procs: %s: path too long for an ipc endpoint",
                           self->dir);
    }
    self->t0 = bt_now();
    self->zmq_ctx = zmq_ctx_new();
    if (!self->zmq_ctx)
        return bt_fail(BT_EIO, "run: cannot create a ZeroMQ context");
    BT_TRY(s_secure(self));
    int n = self->cfg.n_variants > 0 ? self->cfg.n_variants : 1;
    for (int k = 0; k < self->cfg.n_variants; k++) {
        self->vcfg[k] = malloc(sizeof *self->vcfg[k]);
        if (!self->vcfg[k])
            return bt_fail(BT_ENOMEM, "run: variants[%d]: out of memory", k);
        BT_TRY(bt_config_variant(&self->cfg, k, self->vcfg[k]));
    }
    if (self->cfg.n_variants == 0)
        self->vcfg[0] = &self->cfg;
    self->ctl =
        bt_controller_new(self->zmq_ctx, self->endpoint, (const bt_config *const *)self->vcfg, n,
                          self->config_json, self->log);
    if (!self->ctl)
        return BT_EIO;
    bt_controller_set_progress(self->ctl, self->progress, self->progress_user);
    if (self->prom)
        bt_controller_set_prometheus(self->ctl, self->prom);
    if (self->resume)
        bt_controller_set_resume(self->ctl, self->resume_from);
    bt_status st = BT_OK;
    if (self->procs)
        bt_controller_set_gone(self->ctl, s_may_come, self);
    if (!self->external) {
        st = s_spawn(self, BT_ROLE_TRAINER,
                     self->cfg.workers.trainer + self->cfg.workers.standby_trainers);
        if (st == BT_OK)
            st = s_spawn(self, BT_ROLE_ROLLOUT, self->cfg.workers.rollout);
        if (st == BT_OK)
            st = s_spawn(self, BT_ROLE_EVAL, self->cfg.workers.eval);
    }
    if (st == BT_OK) /* each variant's SFT and step 0 */
        st = bt_controller_start(self->ctl);
    return st;
}

/*  Runs the loop until a variant has made one more step (variants advance in lockstep, each one's
    step overlapping the others'), or every one is done. */
bt_status bt_run_step(bt_run_t *self, bool *done) {
    *done = self->complete;
    if (self->complete)
        return BT_OK;
    if (!self->ctl)
        return bt_fail(BT_EINVAL, "run: not started");
    return bt_controller_step(self->ctl, done);
}

bt_status bt_run_finish(bt_run_t *self) {
    if (self->finished || !self->ctl)
        return BT_OK;
    self->finished = true;
    bt_status st = bt_controller_stop(self->ctl);
    for (int i = 0; i < self->n_threads; i++) {
        if (!self->threads[i].pid) {
            pthread_join(self->threads[i].thread, NULL);
            continue;
        }
        /* a process that missed STOP (it was lost) is ended (it ignores SIGTERM); none is left
           behind */
        if (!self->threads[i].exited && waitpid(self->threads[i].pid, NULL, WNOHANG) == 0) {
            kill(self->threads[i].pid, SIGKILL);
            waitpid(self->threads[i].pid, NULL, 0);
        }
    }
    return st;
}

bt_controller_stats bt_run_stats(const bt_run_t *self) {
    bt_controller_stats none = {0};
    return self->ctl ? bt_controller_get_stats(self->ctl) : none;
}

bt_progress bt_run_progress(const bt_run_t *self) {
    bt_progress none = {"new", 0, self->cfg.grpo.steps, NAN, NAN, NAN, 0, NAN};
    return self->ctl ? bt_controller_progress(self->ctl) : none;
}

void bt_run_destroy(bt_run_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_run_t *self = *self_p;
    bt_run_finish(self);
    bt_controller_destroy(&self->ctl);
    for (int k = 0; k < self->cfg.n_variants; k++) /* without variants vcfg[0] is &cfg */
        free(self->vcfg[k]);
    bt_zap_destroy(&self->zap);
    if (self->zmq_ctx)
        zmq_ctx_term(self->zmq_ctx);
    bt_runlog_destroy(&self->log);
    bt_prometheus_destroy(&self->prom); /* after the log, whose sink it is */
    bt_tensorboard_destroy(&self->tb);
    free(self->config_json);
    for (int i = 0; i < self->argc; i++)
        free(self->argv[i]);
    free(self->argv);
    free(self);
    *self_p = NULL;
}
