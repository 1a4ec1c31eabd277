/*  test_episode_faults.c — kill and resume in the middle of multi-turn episodes (issue 21): runs of
    `baton run` whose rollouts are 3-turn episodes of a number-guessing environment service
    (tests/ref/env_faults.py: tests/ref/env_guess.py's game served by python/baton_reward/env.py,
    logging every reset and step with the pid that sent it, and killing a process of the run when
    its Nth step request arrives, while that request's episodes wait on the answer).
    - A rollout worker (`baton run --procs`, two of them) killed with SIGKILL between two turns of
      its job's episodes: the run finishes, the controller's counters say 1 lost worker and a
      re-queued job, the environment saw the killed worker's episodes reset again by another
      worker (re-run from the reset, same episode ids), and metrics.jsonl is the undisturbed run's
      (timing fields aside).
    - The controller (`baton run`, workers as threads) killed with SIGKILL between two turns of a
      step's episodes, after its step-2 checkpoint: `baton run --resume` writes the undisturbed
      run's metrics, each train step once, and the environment saw that step's episodes reset again.
    In every run, read from the environment's own log: the set of episode ids reset is the
    undisturbed run's, and the turns it answered after each episode's last reset (its one attempt
    that counted) are exactly the turns the train lines count (sum of turns_mean x episodes per
    step): a re-run episode is counted once, its lost attempt not at all.  With debug.log_prompts
    every prompt is trained exactly once.  The environment's rewards count the turns of the
    episode's object, so a service whose second reset of an id continued the old game would fail
    the metrics check (checked by hand against such a baton_reward.env).  Both with synchronous
    turns (task.interleave 0) and, for the lost worker, interleaved ones (task.interleave 3: an
    answer used 3 decode steps after its turn, so which episodes decode together is the seed's
    alone and the lost worker's run equals its undisturbed run bit for bit; when answers were
    used as they came, even two undisturbed runs differed by ~1e-8).  Without a python3 that has
    zmq, pip and setuptools: SKIP naming the package, exit 77. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_tmp[64], s_config[128];
/*  The runs of a pass: the undisturbed run's name (the others are compared with it) and a --set
    all of them take (NULL: none). */
static const char *s_calm = "calm", *s_extra = NULL;

enum { S_STEPS = 6, S_PROMPTS = 4, S_GROUP = 2, S_EPISODES = S_PROMPTS * S_GROUP };

/*  3 model turns of 3 tokens per episode; the step-2 checkpoint is what the resume starts from.
    The evaluation is of perplexity, so every episode the service sees is a rollout's. */
static const char s_json[] =
    "{\"run\": {\"name\": \"epf\", \"seed\": 5, \"log_every\": 1}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "4,"
    "  \"env\": \"service\", \"env_service\": \"ipc:///nowhere\", \"max_turns\": 3,"
    "  \"max_episode_tokens\": 28, \"env_timeout_ms\": 30000, \"interleave\": 0},"
    " \"grpo\": {\"steps\": 6, \"group_size\": 2, \"prompts_per_step\": 4, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"heldout_count\": 4, \"datasets\": [{\"name\": \"ppl\", \"kind\": "
    "\"perplexity\"}]},"
    " \"checkpoint\": {\"full_every_steps\": 2},"
    " \"debug\": {\"log_prompts\": true},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 300}}";

/*  Starts tests/ref/env_faults.py at ipc://s_tmp/NAME.ipc, logging to s_tmp/NAME.env, with kill
    (its KILL argument) or none; its pid. */
static pid_t s_env_start(const char *python, const char *name, const char *kill_spec) {
    char script[1024], endpoint[160], log[160];
    const char *src = getenv("BATON_SOURCE_DIR") ? getenv("BATON_SOURCE_DIR") : ".";
    snprintf(script, sizeof script, "%s/tests/ref/env_faults.py", src);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/%s.ipc", s_tmp, name);
    snprintf(log, sizeof log, "%s/%s.env", s_tmp, name);
    const char *argv[] = {python, script, endpoint, log, kill_spec, NULL};
    return runs_python_start(s_tmp, argv);
}

/*  `baton run CONFIG --run-dir s_tmp/NAME` against NAME's environment, with --procs when procs,
    --resume when resume; its output appended to s_tmp/NAME.log. */
static pid_t s_run(const char *name, bool procs, bool resume) {
    char dir[128], log[160], set[192];
    snprintf(dir, sizeof dir, "%s/%s", s_tmp, name);
    snprintf(log, sizeof log, "%s/%s.log", s_tmp, name);
    snprintf(set, sizeof set, "task.env_service=ipc://%s/%s.ipc", s_tmp, name);
    const char *args[12] = {"run", s_config, "--run-dir", dir, "--set", set};
    int n = 6;
    if (s_extra) {
        args[n++] = "--set";
        args[n++] = s_extra;
    }
    if (procs)
        args[n++] = "--procs";
    if (resume)
        args[n++] = "--resume";
    args[n] = NULL;
    return runs_spawn_in(NULL, args, log);
}

/* ---- the environment's log, read by the test ------------------------------------------------ */

enum { S_MAX_LINES = 4096, S_MAX_EPISODES = 512 };

/*  What the environment's log says. */
typedef struct s_env_log {
    int resets, steps; /* lines */
    int episodes;      /* distinct episode ids reset */
    uint64_t ids[S_MAX_EPISODES];
    int rerun;           /* episodes reset more than once */
    int rerun_elsewhere; /* of them: first reset by the killed pid, last by another */
    int counted;         /* step lines after their episode's last reset */
    int senders;         /* distinct pids that sent a reset */
    long killed, held;   /* pids of the "kill" and "held" lines; 0 when none */
} s_env_log;

static int s_cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/*  The log's text ("reset PID EPISODE", "step PID EPISODE", "kill PID", "held PID" lines; freed
    here) as an s_env_log. */
static s_env_log s_env_parse(char *text) {
    s_env_log out = {0};
    static char kind[S_MAX_LINES];
    static long pid[S_MAX_LINES];
    static uint64_t ep[S_MAX_LINES];
    int n = 0;
    for (char *l = text ? strtok(text, "\n") : NULL; l && n < S_MAX_LINES; l = strtok(NULL, "\n")) {
        char word[8];
        long p = 0;
        unsigned long long e = 0;
        int got = sscanf(l, "%7s %ld %llu", word, &p, &e);
        CHECK(got >= 2);
        if (!strcmp(word, "kill"))
            out.killed = p;
        else if (!strcmp(word, "held"))
            out.held = p;
        else if (got == 3 && (!strcmp(word, "reset") || !strcmp(word, "step"))) {
            kind[n] = word[0], pid[n] = p, ep[n++] = e;
            out.resets += word[0] == 'r';
            out.steps += word[0] == 's';
        } else
            CHECK(!"a line of the environment's log the test does not know");
    }
    free(text);
    long seen_pids[64];
    for (int i = 0; i < n; i++) {
        if (kind[i] != 'r')
            continue;
        int k = 0;
        while (k < out.senders && seen_pids[k] != pid[i])
            k++;
        if (k == out.senders && out.senders < 64)
            seen_pids[out.senders++] = pid[i];
        bool first = true;
        for (int j = 0; j < i && first; j++)
            first = !(kind[j] == 'r' && ep[j] == ep[i]);
        if (!first)
            continue;
        CHECK(out.episodes < S_MAX_EPISODES);
        if (out.episodes < S_MAX_EPISODES)
            out.ids[out.episodes++] = ep[i];
        int last = i, again = 0;
        for (int j = i + 1; j < n; j++)
            if (kind[j] == 'r' && ep[j] == ep[i])
                last = j, again++;
        if (again) {
            out.rerun++;
            out.rerun_elsewhere += pid[i] == out.killed && pid[last] != out.killed;
        }
    }
    for (int i = 0; i < n; i++) {
        bool after_last = kind[i] == 's';
        for (int j = i + 1; j < n && after_last; j++)
            after_last = !(kind[j] == 'r' && ep[j] == ep[i]);
        out.counted += after_last;
    }
    qsort(out.ids, (size_t)out.episodes, sizeof *out.ids, s_cmp_u64);
    return out;
}

/*  s_tmp/NAME.env, read. */
static s_env_log s_env_read(const char *name) {
    char path[160], *text = NULL;
    snprintf(path, sizeof path, "%s/%s.env", s_tmp, name);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    return s_env_parse(text);
}

/*  The pid of the "held" line of s_tmp/NAME.env so far; 0 when none (or no file yet). */
static long s_env_held(const char *name) {
    char path[160], *text = NULL;
    snprintf(path, sizeof path, "%s/%s.env", s_tmp, name);
    const char *at =
        bt_file_read(path, 1 << 24, &text, NULL) == BT_OK ? strstr(text, "held ") : NULL;
    long pid = at ? atol(at + 5) : 0;
    free(text);
    return pid;
}

/*  The model turns DIR/metrics.jsonl's train lines count (turns_mean x episodes, summed), and
 *lines_of[s] the train lines of step s (1..S_STEPS); -1 when a line is not what it should be. */
static long s_trained_turns(const char *dir, int *lines_of) {
    char path[160], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    long turns = 0;
    for (int s = 0; s <= S_STEPS; s++)
        lines_of[s] = 0;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(j, "kind"));
        if (kind && !strcmp(kind, "train")) {
            const cJSON *step = cJSON_GetObjectItem(j, "step");
            const cJSON *mean = cJSON_GetObjectItem(j, "turns_mean");
            int s = cJSON_IsNumber(step) ? step->valueint : -1;
            CHECK(s >= 1 && s <= S_STEPS && cJSON_IsNumber(mean));
            if (s >= 1 && s <= S_STEPS)
                lines_of[s]++;
            turns = cJSON_IsNumber(mean) && turns >= 0
                        ? turns + lround(mean->valuedouble * S_EPISODES)
                        : -1;
        }
        cJSON_Delete(j);
    }
    free(text);
    return turns;
}

/*  The number `key` of DIR/events.jsonl's "counters" event; -1 when none. */
static double s_counter(const char *dir, const char *key) {
    char path[160], *text = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    double v = -1;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const char *event = cJSON_GetStringValue(cJSON_GetObjectItem(j, "event"));
        const cJSON *n = cJSON_GetObjectItem(j, key);
        if (event && !strcmp(event, "counters") && cJSON_IsNumber(n))
            v = n->valuedouble;
        cJSON_Delete(j);
    }
    free(text);
    return v;
}

/*  The checks every run of the test passes against the undisturbed one (calm): its episodes
    are calm's, each counted once, every step trained once, the same metrics. */
static void s_check_counted_once(const char *name, const s_env_log *calm, const s_env_log *got) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", s_tmp, name);
    CHECK(got->episodes == S_STEPS * S_EPISODES);
    CHECK(got->episodes == calm->episodes &&
          !memcmp(got->ids, calm->ids, sizeof *got->ids * (size_t)got->episodes));
    int lines_of[S_STEPS + 1];
    long turns = s_trained_turns(dir, lines_of);
    CHECK(turns == got->counted);
    for (int s = 1; s <= S_STEPS; s++)
        CHECK(lines_of[s] == 1);
    CHECK(runs_trained_once(dir, 0, S_STEPS * S_PROMPTS));
    char ref[128];
    snprintf(ref, sizeof ref, "%s/%s", s_tmp, s_calm);
    if (strcmp(name, s_calm) != 0) {
        char *a = runs_metrics(ref), *b = runs_metrics(dir);
        CHECK(a && b && strcmp(a, b) == 0);
        if (a && b && strcmp(a, b) != 0)
            fprintf(stderr, "--- %s\n%s--- %s\n%s", ref, a, dir, b);
        free(a);
        free(b);
    }
    printf("%s: %d episodes (%d resets, %d re-run), %d turns answered, %ld trained\n", name,
           got->episodes, got->resets, got->rerun, got->steps, turns);
}

/*  The undisturbed run: every episode reset once, every turn answered counted. */
static s_env_log test_calm(const char *python) {
    pid_t env = s_env_start(python, s_calm, NULL);
    CHECK(runs_wait(s_run(s_calm, true, false)) == 0);
    runs_term(env);
    s_env_log calm = s_env_read(s_calm);
    CHECK(calm.rerun == 0 && calm.resets == calm.episodes && calm.counted == calm.steps);
    CHECK(calm.killed == 0 && calm.senders == 2); /* the two rollout workers */
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", s_tmp, s_calm);
    CHECK(s_counter(dir, "lost_workers") == 0 && s_counter(dir, "requeued") == 0);
    s_check_counted_once(s_calm, &calm, &calm);
    return calm;
}

/*  The 8th step request of a rollout worker (step 2's) kills that worker while its episodes
    wait on the answer. */
static void test_lost_worker(const char *python, const s_env_log *calm, const char *name) {
    pid_t env = s_env_start(python, name, "8:self:rollout");
    CHECK(runs_wait(s_run(name, true, false)) == 0);
    runs_term(env);
    s_env_log got = s_env_read(name);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", s_tmp, name);
    CHECK(got.killed > 0 && got.senders == 2);
    CHECK(s_counter(dir, "lost_workers") == 1 && s_counter(dir, "requeued") >= 1);
    char events[160];
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    CHECK(runs_file_has(events, "\"event\":\"workers_expired\""));
    CHECK(runs_file_has(events, "\"event\":\"task_requeued\""));
    /* the killed worker's job (2 prompts x 2 samples) was run again from its resets elsewhere */
    CHECK(got.rerun == S_EPISODES / 2 && got.rerun_elsewhere == got.rerun);
    CHECK(got.counted < got.steps);
    s_check_counted_once(name, calm, &got);
}

/*  The 14th step request (step 3's) is held until the step-2 checkpoint is written, then the
    whole run is killed while that step's episodes wait; --resume finishes it. */
static void test_killed_controller(const char *python, const s_env_log *calm) {
    char gate[160], dir[128];
    snprintf(gate, sizeof gate, "%s/go", s_tmp);
    snprintf(dir, sizeof dir, "%s/killed", s_tmp);
    char spec[200];
    snprintf(spec, sizeof spec, "14:self:run:%s", gate);
    pid_t env = s_env_start(python, "killed", spec);
    pid_t run = s_run("killed", false, false);
    bool held = false;
    while (!held && runs_alive(run))
        if (!(held = s_env_held("killed") == run))
            runs_sleep_ms(5);
    CHECK(held);
    int trained = runs_train_steps(dir);
    CHECK(trained == 2); /* step 3's episodes are the ones waiting */
    while (held && trained >= 2 && runs_alive(run) && runs_latest(dir) < 2)
        runs_sleep_ms(5);
    CHECK(runs_latest(dir) == 2);
    CHECK_OK(bt_file_write(gate, "", 0));
    CHECK(runs_wait(run) == -1); /* SIGKILL */
    CHECK(runs_train_steps(dir) == 2);
    CHECK(runs_wait(s_run("killed", false, true)) == 0);
    runs_term(env);
    s_env_log got = s_env_read("killed");
    CHECK(got.killed == run);
    char events[160];
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    CHECK(runs_file_has(events, "\"event\":\"resumed\""));
    /* step 3's episodes were reset again by the resumed run (another pid): re-run, not restored */
    CHECK(got.rerun == S_EPISODES && got.rerun_elsewhere == got.rerun);
    CHECK(got.counted < got.steps);
    s_check_counted_once("killed", calm, &got);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_epfault_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/ep.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    const char *missing = NULL, *python = runs_python(&missing);
    if (python && runs_pip_install(python, s_tmp)) {
        s_env_log calm = test_calm(python);
        test_lost_worker(python, &calm, "lost");
        test_killed_controller(python, &calm);
        /* interleaved turns (answers used 3 decode steps after their turn): the same holds, the
           lost worker's run equal to its own undisturbed run bit for bit */
        s_calm = "calm_il";
        s_extra = "task.interleave=3";
        s_env_log calm_il = test_calm(python);
        test_lost_worker(python, &calm_il, "lost_il");
    }
    runs_cleanup(s_tmp);
    return runs_python_exit(python, missing, "kill and resume in the middle of episodes");
}
