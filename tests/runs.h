/*  runs.h — what the tests of whole runs share: a run's metrics as comparable text, and the baton
    executable started as a child process, and its worker processes found by name.  Include after
    check.h; needs _DEFAULT_SOURCE. */
#ifndef BATON_TESTS_RUNS_H
#define BATON_TESTS_RUNS_H

#include "baton/fileio.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*  The config section of the tiny model most run tests train (one layer, 32 wide, 64 positions),
    as string-literal text to splice into a config: `"{..." RUNS_MODEL_TINY " \"task\": ..."`. */
#define RUNS_MODEL_TINY                                                                            \
    " \"model\": {\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"       \
    "  \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"max_position_embeddings\": 64},"

/*  Runs a shell command; its stdout (add 2>&1 for stderr) goes into out, NUL-terminated, cut at
    cap - 1 bytes; returns the exit status (-1 when it did not exit normally). */
static inline int runs_capture(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, cap - 1, p) : 0;
    out[n] = '\0';
    int st = p ? pclose(p) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline int runs_cmp_lines(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*  Sorts lines[0..n), writes them to out (cap bytes) one per line, frees them; returns out. */
static inline char *runs_join_sorted(char **lines, size_t n, char *out, size_t cap) {
    size_t len = 0;
    qsort(lines, n, sizeof *lines, runs_cmp_lines);
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(out + len, cap - len, "%s\n", lines[i]);
        free(lines[i]);
    }
    free(lines);
    return out;
}

/*  DIR/metrics.jsonl with the fields that measure time or memory (and the speed-sized shard split)
    removed, the train lines' resource figures among them (docs/architecture.md, "Resource
    figures"), one compact JSON object per line, sorted: evaluations run beside training, so their
    lines interleave with it in any order.  Two runs that did the same work give the same text.
    With variant: only that variant's lines, without their "variant" field.  Caller frees; NULL
    when the file cannot be read. */
static inline char *runs_metrics_of(const char *dir, const char *variant) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return NULL;
    size_t cap = strlen(text) + 2, n = 0;
    char **lines = calloc(cap, sizeof *lines), *out = calloc(cap, 1);
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        CHECK(j != NULL);
        if (!j)
            continue;
        /* a name ending in '_' stands for every field it begins */
        const char *varying[] = {"time",   "tokens_per_s", "eval_s",       "peak_rss_mb",
                                 "shards", "shard_items",  "step_s",       "wait_slowest_s",
                                 "busy_",  "cpu_s_",       "peak_rss_mb_", "cuda_"};
        for (size_t k = 0; k < sizeof varying / sizeof *varying; k++) {
            size_t n = strlen(varying[k]);
            for (cJSON *f = j->child, *next; f; f = next) {
                next = f->next;
                if (varying[k][n - 1] == '_' ? !strncmp(f->string, varying[k], n)
                                             : !strcmp(f->string, varying[k]))
                    cJSON_Delete(cJSON_DetachItemViaPointer(j, f));
            }
        }
        const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(j, "variant"));
        if (variant && (!v || strcmp(v, variant))) {
            cJSON_Delete(j);
            continue;
        }
        if (variant)
            cJSON_DeleteItemFromObject(j, "variant");
        lines[n++] = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
    }
    free(text);
    return runs_join_sorted(lines, n, out, cap);
}

/*  DIR/events.jsonl as the decisions of the run: sorted compact lines without the fields that
    measure time, and without the events of one invocation (workers joining and leaving, the
    resume itself, the counters at its end) and of the checkpoint writer, whose saves finish when
    they finish.  What a resumed run must write as the uninterrupted one did. */
static inline char *runs_events(const char *dir) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return NULL;
    static const char *const invocation[] = {"worker_joined",
                                             "worker_left",
                                             "workers_ready",
                                             "trainer_active",
                                             "resumed",
                                             "counters",
                                             "variant_share",
                                             "workers_expired",
                                             "controller_stalled",
                                             "checkpoint_saved",
                                             "checkpoint_failed",
                                             "checkpoint_deferred",
                                             "checkpoint_skipped",
                                             "checkpoint_rejected",
                                             "checkpoint_cleaned",
                                             "config_changed"};
    size_t cap = strlen(text) + 2, n = 0;
    char **lines = calloc(cap, sizeof *lines), *out = calloc(cap, 1);
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        CHECK(j != NULL);
        const char *name = j ? cJSON_GetStringValue(cJSON_GetObjectItem(j, "event")) : NULL;
        bool skip = !name;
        for (size_t k = 0; name && k < sizeof invocation / sizeof *invocation; k++)
            skip |= !strcmp(name, invocation[k]);
        if (skip || !strncmp(name, "checkpoint_", 11)) {
            cJSON_Delete(j);
            continue;
        }
        const char *varying[] = {
            "time",        "seconds", "ms",    "held_ms",
            "deadline_ms", "dir",     "folder"}; /* paths name the run directory */
        for (size_t k = 0; k < sizeof varying / sizeof *varying; k++)
            cJSON_DeleteItemFromObject(j, varying[k]);
        lines[n++] = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
    }
    free(text);
    return runs_join_sorted(lines, n, out, cap);
}

static inline char *runs_metrics(const char *dir) {
    return runs_metrics_of(dir, NULL);
}

/*  Starts `PREFIX... $BATON_BIN ARGS...` ($BATON_BIN default ./baton): prefix (NULL-terminated,
    or NULL for none) is a command that runs the rest, such as {"ip", "netns", "exec", NS, NULL};
    args NULL-terminated, 40 words in all at most.  Its stdout and stderr go to log (appended), or
    are discarded when log is NULL.  address_space > 0 limits the child's virtual memory to that
    many bytes (RLIMIT_AS, set before it execs), so its allocations beyond it fail. */
static inline pid_t runs_spawn_limited(const char *const *prefix, const char *const *args,
                                       const char *log, size_t address_space) {
    fflush(NULL); /* or the child's freopen writes the parent's buffered output a second time */
    pid_t pid = fork();
    if (pid == 0) {
        const char *out = log ? log : "/dev/null";
        if (!freopen(out, "a", stdout) || !freopen(out, "a", stderr))
            _exit(126);
        struct rlimit limit = {(rlim_t)address_space, (rlim_t)address_space};
        if (address_space > 0 && setrlimit(RLIMIT_AS, &limit) != 0)
            _exit(126);
        setvbuf(stdout, NULL, _IONBF, 0);
        const char *bin = getenv("BATON_BIN") ? getenv("BATON_BIN") : "./baton";
        const char *argv[42];
        int n = 0;
        for (int i = 0; prefix && prefix[i] && n < 40; i++)
            argv[n++] = prefix[i];
        argv[n++] = bin;
        for (int i = 0; args[i] && n < 41; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static inline pid_t runs_spawn_in(const char *const *prefix, const char *const *args,
                                  const char *log) {
    return runs_spawn_limited(prefix, args, log, 0);
}

/*  Starts $BATON_BIN (default ./baton) with args (NULL-terminated, at most 30), its output
    discarded. */
static inline pid_t runs_spawn(const char *const *args) {
    return runs_spawn_in(NULL, args, NULL);
}

/*  Waits for a child; its exit status, or -1 when it did not exit (a signal). */
static inline int runs_wait(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*  The "train" lines DIR/metrics.jsonl holds so far. */
static inline int runs_train_steps(const char *dir) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return 0;
    int n = 0;
    for (char *p = strstr(text, "\"kind\":\"train\""); p; p = strstr(p + 1, "\"kind\":\"train\""))
        n++;
    free(text);
    return n;
}

/*  The pid of the child of parent whose command line names worker `name`; 0 when none. */
static inline pid_t runs_worker_pid(pid_t parent, const char *name) {
    DIR *d = opendir("/proc");
    pid_t found = 0;
    for (struct dirent *e = d ? readdir(d) : NULL; e && !found; e = readdir(d)) {
        pid_t pid = (pid_t)atoi(e->d_name);
        char path[64], buf[4096];
        if (pid <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        int ppid = 0;
        if (!f || fscanf(f, "%*d %*s %*c %d", &ppid) != 1 || ppid != parent) {
            if (f)
                fclose(f);
            continue;
        }
        fclose(f);
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        for (size_t i = 0; i + 1 < n; i++) /* the arguments are NUL-separated */
            if (!strcmp(buf + i, name) && (i == 0 || buf[i - 1] == '\0'))
                found = pid;
    }
    if (d)
        closedir(d);
    return found;
}

/*  With debug.log_prompts: true when the "trained" events of DIR/events.jsonl list every prompt
    index of [first, first + count) exactly once and nothing else (a lost or repeated prompt is
    reported on stderr). */
static inline bool runs_trained_once(const char *dir, uint64_t first, uint64_t count) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    if (bt_file_read(path, 1 << 26, &text, NULL) != BT_OK)
        return false;
    int *seen = calloc(count + 1, sizeof *seen);
    bool ok = seen != NULL;
    for (char *line = strtok(text, "\n"); ok && line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *ev = cJSON_GetObjectItem(j, "event"), *ids = cJSON_GetObjectItem(j, "prompts");
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "trained")) {
            const cJSON *id;
            cJSON_ArrayForEach(id, ids) {
                double v = cJSON_IsNumber(id) ? id->valuedouble : -1;
                if (v < (double)first || v >= (double)(first + count)) {
                    fprintf(stderr, "%s: trained prompt %g outside [%llu, %llu)\n", dir, v,
                            (unsigned long long)first, (unsigned long long)(first + count));
                    ok = false;
                } else {
                    seen[(uint64_t)v - first]++;
                }
            }
        }
        cJSON_Delete(j);
    }
    for (uint64_t i = 0; ok && i < count; i++)
        if (seen[i] != 1) {
            fprintf(stderr, "%s: prompt %llu trained %d times\n", dir,
                    (unsigned long long)(first + i), seen[i]);
            ok = false;
        }
    free(seen);
    free(text);
    return ok;
}

static inline void runs_sleep_ms(long ms) {
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

/*  `$BATON_BIN COMMAND ARGS` run in dir (COMMAND "" for none), stdout and stderr into out as
    runs_capture; the exit status. */
static inline int runs_baton(const char *dir, const char *command, const char *args, char *out,
                             size_t cap) {
    size_t n = strlen(dir) + strlen(command) + strlen(args) + 4096;
    char *cmd = malloc(n);
    if (!cmd)
        return -1;
    snprintf(cmd, n, "cd %s && %s %s %s 2>&1", dir, getenv("BATON_BIN"), command, args);
    int rc = runs_capture(cmd, out, cap);
    free(cmd);
    return rc;
}

/*  Stops the child pid with SIGTERM (a service's clean exit) and reaps it; pid <= 0: nothing. */
static inline void runs_term(pid_t pid) {
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
}

/*  Kills the child pid with SIGKILL and reaps it. */
static inline void runs_kill(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/*  Whether the child pid is still running (not reaped yet). */
static inline bool runs_alive(pid_t pid) {
    return waitpid(pid, NULL, WNOHANG) == 0;
}

/*  The highest train step in DIR/metrics.jsonl (of variant's lines; NULL: any); -1 when the file
    cannot be read. */
static inline int runs_last_step(const char *dir, const char *variant) {
    char path[256], *text = NULL, tag[96];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(tag, sizeof tag, "\"variant\":\"%s\"", variant ? variant : "");
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return -1;
    int best = -1;
    const char *key = "{\"kind\":\"train\",\"step\":";
    for (char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        const char *end = strchr(p, '\n');
        const char *at = variant ? strstr(p, tag) : p;
        int s = atoi(p + strlen(key));
        if (at && (!end || at < end) && s > best)
            best = s;
    }
    free(text);
    return best;
}

/*  The step DIR/ckpt/LATEST names, -1 when there is none. */
static inline int runs_latest(const char *dir) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/ckpt/LATEST", dir);
    if (bt_file_read(path, 256, &text, NULL) != BT_OK)
        return -1;
    int step = strncmp(text, "step-", 5) == 0 ? atoi(text + 5) : -1;
    free(text);
    return step;
}

/*  The highest step of a checkpoint folder (step-N) in DIR/ckpt below `below`; -1 when none. */
static inline int runs_step_below(const char *dir, int below) {
    char ckpt[256];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    DIR *d = opendir(ckpt);
    int best = -1;
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
        int step = !strncmp(e->d_name, "step-", 5) ? atoi(e->d_name + 5) : -1;
        best = step < below && step > best ? step : best;
    }
    if (d)
        closedir(d);
    return best;
}

/*  Waits while pid runs until the save of a checkpoint after step `after` is in flight (its
    .tmp-step-* folder exists); false if the run ended first. */
static inline bool runs_wait_saving(pid_t pid, const char *dir, int after) {
    char ckpt[256];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    while (runs_alive(pid)) {
        DIR *d = opendir(ckpt);
        bool found = false;
        for (struct dirent *e = d ? readdir(d) : NULL; e && !found; e = readdir(d))
            found = !strncmp(e->d_name, ".tmp-step-", 10) && atoi(e->d_name + 10) > after;
        if (d)
            closedir(d);
        if (found)
            return true;
        runs_sleep_ms(2);
    }
    return false;
}

/*  True when the file at path holds what; when not, says so on stderr with the file's text. */
static inline bool runs_file_has(const char *path, const char *what) {
    char *text = NULL;
    bool yes = bt_file_read(path, 1 << 26, &text, NULL) == BT_OK && strstr(text, what);
    if (!yes)
        fprintf(stderr, "%s lacks %s:\n%s\n", path, what, text ? text : "(none)");
    free(text);
    return yes;
}

/*  Replaces the first `from` in the file `name` of checkpoint folder ("state.json", with variants
    "NAME/state.json") with `to` and lists the new file in the folder's MANIFEST with its own hash,
    as a writer that got the value wrong would have: the checkpoint verifies, and the file is what
    a resume judges.  A value is replaced keeping the old one after it under another key, and put
    back by the reverse edit: `runs_edit_state(f, "state.json", "\"version\":\t",
    "\"version\":\t-1,\"was\":\t")`. */
static inline void runs_edit_state(const char *folder, const char *name, const char *from,
                                   const char *to) {
    char path[512], *text = NULL, *manifest = NULL, edited[1 << 16], line[512];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    CHECK_OK(bt_file_read(path, 1 << 16, &text, NULL));
    char *at = text ? strstr(text, from) : NULL;
    CHECK(at != NULL);
    if (!at) {
        free(text);
        return;
    }
    snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    CHECK_OK(bt_file_write(path, edited, strlen(edited)));
    snprintf(path, sizeof path, "%s/MANIFEST", folder);
    CHECK_OK(bt_file_read(path, 1 << 16, &manifest, NULL));
    snprintf(line, sizeof line, " %s\n", name);
    char *entry = manifest ? strstr(manifest, line) : NULL;
    CHECK(entry != NULL);
    while (entry && entry > manifest && entry[-1] != '\n')
        entry--;
    if (entry) {
        snprintf(line, sizeof line, "%016llx %zu %s\n",
                 (unsigned long long)bt_hash64(edited, strlen(edited)), strlen(edited), name);
        char *end = strchr(entry, '\n') + 1, out[1 << 16];
        snprintf(out, sizeof out, "%.*s%s%s", (int)(entry - manifest), manifest, line, end);
        CHECK_OK(bt_file_write(path, out, strlen(out)));
    }
    free(manifest);
    free(text);
}

/*  The run in dir wrote what the reference run in ref wrote: the same metrics (runs_metrics) and
    the same saved policy, byte for byte.  Checks both; a difference is printed. */
static inline void runs_check_same(const char *ref, const char *dir) {
    char *a = runs_metrics(ref), *b = runs_metrics(dir);
    CHECK(a && b && strcmp(a, b) == 0);
    if (a && b && strcmp(a, b) != 0)
        fprintf(stderr, "--- %s\n%s--- %s\n%s", ref, a, dir, b);
    free(a);
    free(b);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cmp -s %s/model/model.safetensors %s/model/model.safetensors", ref,
             dir);
    CHECK(system(cmd) == 0);
}

/*  The learning rate the train line of variant's step printed in metrics (the text of a
    metrics.jsonl: the rate AdamW applied), or NaN. */
/*  The number `field` of variant's train line of step in metrics (the text of metrics.jsonl), or
    NaN when that line has none. */
static inline double runs_train_value(const char *metrics, const char *variant, int step,
                                      const char *field) {
    char key[128], name[64];
    snprintf(key, sizeof key, "{\"kind\":\"train\",\"step\":%d,\"variant\":\"%s\",", step, variant);
    snprintf(name, sizeof name, "\"%s\":", field);
    const char *line = strstr(metrics, key), *end = line ? strchr(line, '\n') : NULL;
    const char *at = line ? strstr(line, name) : NULL;
    return at && (!end || at < end) ? strtod(at + strlen(name), NULL) : NAN;
}

static inline double runs_train_lr(const char *metrics, const char *variant, int step) {
    char key[128];
    snprintf(key, sizeof key, "{\"kind\":\"train\",\"step\":%d,\"variant\":\"%s\",", step, variant);
    const char *line = strstr(metrics, key), *lr = line ? strstr(line, "\"lr\":") : NULL;
    return lr ? strtod(lr + 5, NULL) : NAN;
}

/*  A TCP connection to 127.0.0.1:port: its fd, -1 when none was made. */
static inline int runs_connect_local(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/*  A free TCP port on 127.0.0.1 (bound, then let go): fd_out (or NULL) keeps it bound for the
    caller, who closes it when the port's real user is ready to bind it; -1 on failure. */
static inline int runs_free_port(int *fd_out) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    if (fd_out)
        *fd_out = fd;
    else
        close(fd);
    return ntohs(a.sin_port);
}

/*  A python3 with zmq, pip and setuptools: $BATON_PYTHON when set (only it), else python3 on the
    PATH, else Debian's.  NULL when none, with *missing the package the best one lacks. */
static inline const char *runs_python(const char **missing) {
    const char *env = getenv("BATON_PYTHON");
    const char *candidates[] = {env ? env : "python3", env ? NULL : "/usr/bin/python3"};
    const char *needs[] = {"-c 'import zmq'", "-m pip --version", "-c 'import setuptools'"};
    const char *packages[] = {"python3-zmq", "python3-pip", "python3-setuptools"};
    int best = -1;
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates && candidates[i]; i++) {
        int k = 0;
        for (; k < 3; k++) {
            char cmd[512];
            snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>&1", candidates[i], needs[k]);
            if (system(cmd) != 0)
                break;
        }
        if (k == 3)
            return candidates[i];
        best = k > best ? k : best;
    }
    *missing = packages[best < 0 ? 0 : best];
    return NULL;
}

/*  pip installs this checkout's python/ (copied first to tmp/pkg, so the build writes nothing into
    the source tree) into tmp/site, offline (tests/test_py_reward.c, tests/test_env_service.c);
    true when it did, else a failed check. */
static inline bool runs_pip_install(const char *python, const char *tmp) {
    const char *src = getenv("BATON_SOURCE_DIR") ? getenv("BATON_SOURCE_DIR") : ".";
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd,
             "cp -r '%s/python' '%s/pkg' && '%s' -m pip install --no-index --no-build-isolation "
             "--disable-pip-version-check --quiet --target '%s/site' '%s/pkg' 2>&1",
             src, tmp, python, tmp, tmp);
    int rc = runs_capture(cmd, out, sizeof out);
    if (rc != 0) { /* a failed check: the package must install offline */
        fprintf(stderr,
                "pip install --no-index --no-build-isolation --target DIR ./python failed "
                "(%d):\n%s\n",
                rc, out);
        s_check_failures++;
    }
    return rc == 0;
}

/*  Removes the test's folder tmp when every check passed; else keeps it and says so (where the
    services' stderr is: tmp/service.err). */
static inline void runs_cleanup(const char *tmp) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (s_check_failures == 0)
        CHECK(system(cmd) == 0);
    else
        fprintf(stderr, "kept %s (service.err: the services' stderr)\n", tmp);
}

/*  main's exit status for a test whose Python parts need runs_python's python: 77 (ctest's SKIP),
    saying what went untested and which package is missing, when there was none and nothing
    failed; else check_exit(). */
static inline int runs_python_exit(const char *python, const char *missing, const char *untested) {
    if (s_check_failures == 0 && !python) {
        printf("SKIP: no python3 with zmq, pip and setuptools (missing: %s; or set "
               "BATON_PYTHON): %s was not tested\n",
               missing, untested);
        return 77;
    }
    return check_exit();
}

/*  Starts argv[0] (a python, argv NULL-terminated) with PYTHONPATH=tmp/site (runs_pip_install's
    folder), its stdout to /dev/null and its stderr appended to tmp/service.err; its pid. */
static inline pid_t runs_python_start(const char *tmp, const char *const *argv) {
    char site[256], err[256];
    snprintf(site, sizeof site, "%s/site", tmp);
    snprintf(err, sizeof err, "%s/service.err", tmp);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("PYTHONPATH", site, 1);
        if (!freopen("/dev/null", "w", stdout) || !freopen(err, "a", stderr))
            _exit(126);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

#endif
