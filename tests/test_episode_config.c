/*  test_episode_config.c — the environment a config names, built by the workers as they start
    (workers/worker.c; docs/config.md, "Multi-turn episodes"): a run whose task.env_service has
    no service behind it stops before any step, naming task.env_service (or the data source's
    key) and the endpoint, with no task failed or re-queued; a CURVE environment service on
    tcp:// (tests/ref/env_guess.py, served by python/baton_reward/env.py) answers the hello of
    workers given its public key as task.env_server_key, and one given another key gets no
    answer, and the run says so; a run with the built-in tools starts and ends.  (task.env
    "python" without python3 is not tested: the machine has one.)  The CURVE part needs a python3
   with zmq, pip and setuptools: without one, SKIP naming the package, exit 77. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "baton/security.h"
#include "check.h"
#include "runs.h"

#include <stdlib.h>
#include <unistd.h>

static char s_tmp[64];

/*  A run of no steps: its workers start (and build their environments), evaluate once and stop. */
static const char s_json[] =
    "{\"run\": {\"name\": \"ep\", \"seed\": 3}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"heldout_size\": 4},"
    " \"grpo\": {\"steps\": 0, \"group_size\": 2, \"prompts_per_step\": 2, \"max_new_tokens\": 3},"
    " \"eval\": {\"heldout_count\": 4},"
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}";

/*  Runs `baton run CONFIG --run-dir DIR` with the --set values of sets (NULL-terminated, at most
    8), its output into DIR.log, read into *log (caller frees); its exit status. */
static int s_run(const char *name, const char *const *sets, char **log) {
    char config[128], dir[128], log_path[160];
    snprintf(config, sizeof config, "%s/ep.json", s_tmp);
    snprintf(dir, sizeof dir, "%s/%s", s_tmp, name);
    snprintf(log_path, sizeof log_path, "%s.log", dir);
    const char *args[24] = {"run", config, "--run-dir", dir};
    int n = 4;
    for (int i = 0; sets[i] && i < 8; i++) {
        args[n++] = "--set";
        args[n++] = sets[i];
    }
    args[n] = NULL;
    int rc = runs_wait(runs_spawn_in(NULL, args, log_path));
    *log = NULL;
    CHECK_OK(bt_file_read(log_path, 1 << 20, log, NULL));
    return rc;
}

/*  DIR's events.jsonl holds no failed or re-queued task, and its metrics no train line. */
static void s_check_nothing_ran(const char *name) {
    char path[160], *text = NULL;
    snprintf(path, sizeof path, "%s/%s/events.jsonl", s_tmp, name);
    CHECK_OK(bt_file_read(path, 1 << 20, &text, NULL));
    CHECK(text && !strstr(text, "\"task_failed\"") && !strstr(text, "\"task_requeued\""));
    free(text);
    text = NULL;
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", s_tmp, name);
    if (bt_file_read(path, 1 << 20, &text, NULL) == BT_OK)
        CHECK(!strstr(text, "\"kind\":\"train\""));
    free(text);
}

/*  Nobody at the endpoint: the workers' hello gets no reply and the run stops as it starts. */
static void test_no_service(void) {
    char endpoint[128], set[192], want[512], *log = NULL;
    snprintf(endpoint, sizeof endpoint, "ipc://%s/nobody.ipc", s_tmp);
    snprintf(set, sizeof set, "task.env_service=%s", endpoint);
    const char *sets[] = {"task.env=service", set, "task.env_timeout_ms=300", "task.env_retries=0",
                          NULL};
    CHECK(s_run("nobody", sets, &log) == 1);
    snprintf(want, sizeof want,
             "cannot start: task.env_service: environment service %s: no reply within 300 ms (1 "
             "attempt) to the hello a worker sends as it starts",
             endpoint);
    CHECK_STR_CONTAINS(log, "baton: run failed: worker ");
    CHECK_STR_CONTAINS(log, want);
    free(log);
    s_check_nothing_ran("nobody");

    /* a data source's own: named by the source */
    char sources[512];
    snprintf(sources, sizeof sources,
             "data.sources=[{\"name\": \"plain\"}, {\"name\": \"game\", \"env\": \"service\", "
             "\"env_service\": \"%s\", \"env_timeout_ms\": 200, \"env_retries\": 0}]",
             endpoint);
    const char *by_source[] = {sources, NULL};
    CHECK(s_run("source", by_source, &log) == 1);
    snprintf(want, sizeof want,
             "cannot start: data.sources[1].env_service: environment service %s: no reply within "
             "200 ms (1 attempt)",
             endpoint);
    CHECK_STR_CONTAINS(log, want);
    free(log);
    s_check_nothing_ran("source");
}

/*  The built-in tools: made as the workers start (the python tool runs "pass" in its sandbox
    once), and the run goes on to its end. */
static void test_tools(void) {
    char *log = NULL;
    const char *sets[] = {"task.env=tools", "task.max_turns=2", NULL};
    CHECK(s_run("tools", sets, &log) == 0);
    free(log);
}

/*  The service's public key in the config: the workers (with no keys of their own: a fresh pair
    each) say hello over CURVE and the run goes on to its end; another key: no answer. */
static void test_curve(const char *python) {
    if (bt_curve_available() != BT_OK) {
        printf("curve: this libzmq has no CURVE: not tested\n");
        return;
    }
    char keys[128], path[256], endpoint[64], pub[BT_KEY_LEN + 1], other[BT_KEY_LEN + 1];
    snprintf(keys, sizeof keys, "%s/keys", s_tmp);
    CHECK_OK(bt_keygen(keys, "env", pub));
    CHECK_OK(bt_keygen(keys, "other", other));
    int port = runs_free_port(NULL);
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    char src_path[1024];
    const char *src = getenv("BATON_SOURCE_DIR") ? getenv("BATON_SOURCE_DIR") : ".";
    snprintf(src_path, sizeof src_path, "%s/tests/ref/env_guess.py", src);
    snprintf(path, sizeof path, "%s/env.key", keys);
    const char *argv[] = {python, src_path, endpoint, path, NULL};
    pid_t service = runs_python_start(s_tmp, argv);

    char set_endpoint[128], set_key[128], *log = NULL;
    snprintf(set_endpoint, sizeof set_endpoint, "task.env_service=%s", endpoint);
    snprintf(set_key, sizeof set_key, "task.env_server_key=%s", pub);
    /* generous: the hello waits for the interpreter to start and bind */
    const char *sets[] = {"task.env=service", set_endpoint, set_key, "task.env_timeout_ms=30000",
                          NULL};
    CHECK(s_run("curve", sets, &log) == 0);
    free(log);
    char metrics[160], *text = NULL;
    snprintf(metrics, sizeof metrics, "%s/curve/metrics.jsonl", s_tmp);
    CHECK_OK(bt_file_read(metrics, 1 << 20, &text, NULL));
    CHECK_STR_CONTAINS(text, "\"kind\":\"eval\""); /* the eval worker started and evaluated */
    free(text);

    snprintf(set_key, sizeof set_key, "task.env_server_key=%s", other);
    const char *wrong[] = {"task.env=service",        set_endpoint,         set_key,
                           "task.env_timeout_ms=500", "task.env_retries=0", NULL};
    CHECK(s_run("wrong_key", wrong, &log) == 1);
    char want[256];
    snprintf(want, sizeof want,
             "cannot start: task.env_service: environment service %s: no reply within 500 ms",
             endpoint);
    CHECK_STR_CONTAINS(log, want);
    free(log);
    printf("curve: %s answered the workers' hello with its key; another key unanswered\n",
           endpoint);
    runs_kill(service);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_epcfg_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char config[128];
    snprintf(config, sizeof config, "%s/ep.json", s_tmp);
    CHECK_OK(bt_file_write(config, s_json, strlen(s_json)));
    test_no_service(); /* needs no Python */
    test_tools();
    const char *missing = NULL, *python = runs_python(&missing);
    if (python && runs_pip_install(python, s_tmp))
        test_curve(python);
    runs_cleanup(s_tmp);
    return runs_python_exit(python, missing, "the CURVE environment service of a run");
}
