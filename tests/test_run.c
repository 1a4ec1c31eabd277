/*  test_run.c — whole runs through the controller and real worker threads over ZeroMQ: two runs
    with one seed write the same metrics (timing fields aside); malformed messages sent to a running
    controller are refused and counted while the run finishes; a host program's reward function
    reaches the metrics unchanged; run.precision reaches the workers. */
#define _DEFAULT_SOURCE
#include "baton/baton.h"
#include "baton/fileio.h"
#include "baton/msg.h"
#include "baton/safetensors.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

static const char s_config[] =
    "{\"run\": {\"name\": \"t\", \"seed\": 5},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 4, \"group_size\": 4, \"prompts_per_step\": 5, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 2, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 2, \"heartbeat_ms\": 50}}";

static char s_tmp[64];
static double s_last_accuracy; /* bt_run_progress at the end of the last s_run */

/*  Runs the config to the end in dir; returns the run's counters. */
static bt_controller_stats s_run(const char *dir, const char *endpoint, bt_reward_fn *reward,
                                 void *user, void (*after_start)(const char *endpoint)) {
    bt_controller_stats none = {0};
    bt_run_t *run = bt_run_new(s_config, "test", NULL, 0);
    CHECK(run != NULL);
    if (!run)
        return none;
    bt_run_set_dir(run, dir);
    if (endpoint)
        bt_run_set_endpoint(run, endpoint);
    if (reward)
        bt_run_set_reward(run, reward, user);
    CHECK_OK(bt_run_start(run));
    if (after_start)
        after_start(endpoint);
    bool done = false;
    int steps = 0;
    while (!done && steps < 100) {
        CHECK_OK(bt_run_step(run, &done));
        steps++;
    }
    CHECK(steps == 4);
    /* the host reads the latest metrics: the last evaluation is that of step 4 */
    bt_progress p = bt_run_progress(run);
    CHECK(p.step == 4 && p.total == 4 && !strcmp(p.phase, "rl"));
    CHECK(p.accuracy >= 0 && p.accuracy <= 1 && p.reward_mean >= 0);
    s_last_accuracy = p.accuracy;
    CHECK_OK(bt_run_finish(run));
    bt_controller_stats st = bt_run_stats(run);
    bt_run_destroy(&run);
    return st;
}

static void test_determinism_and_fields(void) {
    char a[128], b[128];
    snprintf(a, sizeof a, "%s/a", s_tmp);
    snprintf(b, sizeof b, "%s/b", s_tmp);
    s_run(a, NULL, NULL, NULL, NULL);
    s_run(b, NULL, NULL, NULL, NULL);
    char *ma = runs_metrics(a), *mb = runs_metrics(b);
    /* bt_run_progress agrees with the last eval line of metrics.jsonl */
    const char *last_eval =
        ma ? strstr(ma, "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":4,") : NULL;
    const char *acc = last_eval ? strstr(last_eval, "\"accuracy\":") : NULL;
    CHECK(acc && strtod(acc + strlen("\"accuracy\":"), NULL) == s_last_accuracy);
    CHECK(ma && mb && strcmp(ma, mb) == 0);
    /* the documented fields, and the step-0 evaluation */
    CHECK_STR_CONTAINS(ma, "{\"kind\":\"sft\",\"step\":1,\"variant\":\"main\"");
    CHECK_STR_CONTAINS(ma, "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":0,");
    const char *train = ma ? strstr(ma, "{\"kind\":\"train\",\"step\":4,") : NULL;
    CHECK(train != NULL);
    const char *keys[] = {"reward_mean", "loss",      "kl", "clip_frac",
                          "entropy",     "grad_norm", "lr", "response_len_mean",
                          "version"};
    for (size_t i = 0; train && i < sizeof keys / sizeof *keys; i++) {
        char k[64];
        snprintf(k, sizeof k, "\"%s\":", keys[i]);
        CHECK_STR_CONTAINS(train, k);
    }
    /* the sampler's log-probs (KV-cached decoding) against the trainer's (a packed forward): in
       float32 on one device they agree to rounding, so the KL between them is ~0 and every
       importance ratio is 1 within 1e-4 */
    int trains = 0;
    for (const char *t = ma ? strstr(ma, "{\"kind\":\"train\"") : NULL; t;
         t = strstr(t + 1, "{\"kind\":\"train\"")) {
        char line[4096];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(t, "\n"), t);
        cJSON *j = cJSON_Parse(line);
        double kl = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "mismatch_kl"));
        double lo = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "ratio_min"));
        double hi = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "ratio_max"));
        double sd = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "ratio_std"));
        printf("train: mismatch_kl %.3g, ratio in [%.9f, %.9f], std %.3g\n", kl, lo, hi, sd);
        CHECK(kl >= 0 && kl < 1e-8);
        CHECK(lo > 1 - 1e-4 && hi < 1 + 1e-4 && lo <= hi && sd >= 0 && sd < 1e-4);
        trains++;
        cJSON_Delete(j);
    }
    CHECK(trains == 4);
    CHECK_STR_CONTAINS(ma, "\"dataset\":\"heldout\"");
    CHECK_STR_CONTAINS(ma, "\"examples\":6,\"accuracy\":");
    /* versions: 3 SFT updates, then one per GRPO step */
    CHECK_STR_CONTAINS(ma, "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":4,");
    CHECK(train && strstr(train, "\"version\":7"));
    free(ma);
    free(mb);
}

/*  Sends raw frames, as a hostile peer would. */
static void s_send_frames(void *sock, const char *const *frames, const size_t *lens, int n) {
    for (int i = 0; i < n; i++)
        zmq_send(sock, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0);
}

static void *s_intruder_ctx, *s_intruder;

static void s_attack(const char *endpoint) {
    s_intruder_ctx = zmq_ctx_new();
    s_intruder = zmq_socket(s_intruder_ctx, ZMQ_DEALER);
    CHECK(zmq_connect(s_intruder, endpoint) == 0);
    const char *bad_json[] = {"{\"v\":1,\"type\":"};
    const char *frames_missing[] = {
        "{\"v\":1,\"type\":\"PING\",\"run\":\"t\",\"id\":0,"
        "\"tensors\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[2]}]}"};
    const char *huge[] = {"{\"v\":1,\"type\":\"PING\",\"run\":\"t\",\"id\":0,"
                          "\"tensors\":[{\"name\":\"x\",\"dtype\":\"F32\","
                          "\"shape\":[4294967296,4294967296]}]}",
                          "abcd"};
    const char *unknown[] = {"{\"v\":1,\"type\":\"STEAL\",\"run\":\"t\",\"id\":0}"};
    size_t l1 = strlen(bad_json[0]), l2 = strlen(frames_missing[0]);
    size_t l3[2] = {strlen(huge[0]), 4}, l4 = strlen(unknown[0]);
    s_send_frames(s_intruder, bad_json, &l1, 1);
    s_send_frames(s_intruder, frames_missing, &l2, 1);
    s_send_frames(s_intruder, huge, l3, 2);
    s_send_frames(s_intruder, unknown, &l4, 1);
    /* a well-formed message from a peer that never said HELLO */
    const char *ping[] = {"{\"v\":1,\"type\":\"PING\",\"run\":\"t\",\"id\":1}"};
    size_t l5 = strlen(ping[0]);
    s_send_frames(s_intruder, ping, &l5, 1);
}

static void test_malformed_messages(void) {
    char dir[128], endpoint[128];
    snprintf(dir, sizeof dir, "%s/m", s_tmp);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/ctl.sock", s_tmp);
    bt_controller_stats st = s_run(dir, endpoint, NULL, NULL, s_attack);
    CHECK(st.malformed == 4);
    CHECK(st.unknown_peer == 1);
    CHECK(st.lost_workers == 0 && st.failed_tasks == 0);
    /* the peer that skipped HELLO was told so */
    bt_msg_t *reply = NULL;
    int timeout = 2000;
    zmq_setsockopt(s_intruder, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    CHECK_OK(bt_msg_recv(s_intruder, &reply, NULL, NULL, 0));
    CHECK(reply && bt_msg_type_of(reply) == BT_MSG_INVALID);
    const char *reason = NULL;
    if (reply)
        CHECK_OK(bt_msg_get_str(reply, "reason", 200, &reason));
    CHECK_STR_CONTAINS(reason, "HELLO");
    bt_msg_destroy(&reply);
    zmq_close(s_intruder);
    zmq_ctx_term(s_intruder_ctx);
    /* and the run itself completed: its last evaluation is in the metrics */
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    CHECK_STR_CONTAINS(text, "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":4,");
    free(text);
}

/*  A host's reward: 0.25 per digit in the completion; it keeps its own tally. */
typedef struct {
    double sum;
    int64_t calls;
} s_tally;

static double s_digit_reward(const char *prompt, const char *completion, size_t len,
                             const char *answer, void *user) {
    s_tally *t = user;
    double r = 0;
    for (size_t i = 0; i < len; i++)
        r += completion[i] >= '0' && completion[i] <= '9' ? 0.25 : 0;
    CHECK(prompt && strchr(prompt, '+') && answer);
    t->sum += r;
    t->calls++;
    return r;
}

static void test_host_reward(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/h", s_tmp);
    s_tally tally = {0, 0};
    s_run(dir, NULL, s_digit_reward, &tally, NULL);
    /* every completion scored by the host: 4 steps x 5 prompts x 4 samples in rollouts, and
       6 held-out examples in each of the 3 evaluations (steps 0, 2, 4) */
    CHECK(tally.calls == 4 * 5 * 4 + 3 * 6);
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    double from_metrics = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const char *kind = cJSON_GetObjectItem(j, "kind")->valuestring;
        cJSON *r = cJSON_GetObjectItem(j, "reward_mean");
        if (!strcmp(kind, "train"))
            from_metrics += r->valuedouble * 20;
        else if (!strcmp(kind, "eval"))
            from_metrics += r->valuedouble * 6;
        cJSON_Delete(j);
    }
    free(text);
    CHECK_NEAR(from_metrics, tally.sum, 1e-6);
}

/*  The run to its end with overrides; returns its counters. */
static bt_controller_stats s_run_set(const char *dir, const char *const *sets, int n) {
    bt_controller_stats none = {0};
    bt_run_t *run = bt_run_new(s_config, "test", sets, n);
    CHECK(run != NULL);
    if (!run)
        return none;
    bt_run_set_dir(run, dir);
    CHECK_OK(bt_run_start(run));
    for (bool done = false; !done;)
        if (bt_run_step(run, &done) != BT_OK) {
            CHECK(!"step failed");
            break;
        }
    CHECK_OK(bt_run_finish(run));
    bt_controller_stats st = bt_run_stats(run);
    bt_run_destroy(&run);
    return st;
}

/*  rollout-0 dies silently on its 3rd task (no BYE, no heartbeat, the task never answered): the
    controller expires it, re-queues the task under its id, and the run writes exactly the metrics
    of the run without the crash, so no prompt was lost or trained twice. */
static void test_worker_crash(void) {
    char a[128], b[128];
    snprintf(a, sizeof a, "%s/calm", s_tmp);
    snprintf(b, sizeof b, "%s/crash", s_tmp);
    const char *calm[] = {"workers.expiry_ms=300"};
    const char *crash[] = {"workers.expiry_ms=300", "debug.kill_rollout_at_task=3"};
    bt_controller_stats sa = s_run_set(a, calm, 1);
    bt_controller_stats sb = s_run_set(b, crash, 2);
    CHECK(sa.lost_workers == 0 && sa.requeued == 0);
    CHECK(sb.lost_workers == 1 && sb.requeued >= 1);
    char *ma = runs_metrics(a), *mb = runs_metrics(b);
    CHECK(ma && mb && strcmp(ma, mb) == 0);
    free(ma);
    free(mb);
}

/*  The loss of the "sft" line of step 1 in DIR/metrics.jsonl; NAN when there is none. */
static double s_sft1_loss(const char *dir) {
    char *m = runs_metrics(dir);
    const char *line = m ? strstr(m, "{\"kind\":\"sft\",\"step\":1,") : NULL;
    const char *loss = line ? strstr(line, "\"loss\":") : NULL;
    double v = loss ? strtod(loss + strlen("\"loss\":"), NULL) : NAN;
    free(m);
    return v;
}

/*  run.precision reaches the workers through the WELCOME config, as run.device does: the bf16 run
    writes the key in its resolved config, finishes, and its first SFT loss (the same weights, the
    same batch) differs from float32's by bf16 rounding: not at all would mean no autocast.  Its
    WEIGHTS carried the matrix weights as bfloat16: the saved policy (float32, model.save_dtype
    auto of a random model) holds them exactly bfloat16-representable (low 16 bits zero), and the
    embedding, which travelled as float32, not. */
static void test_precision(void) {
    char a[128], b[128], path[160], *cfg = NULL;
    snprintf(a, sizeof a, "%s/a", s_tmp); /* test_determinism_and_fields' float32 run */
    snprintf(b, sizeof b, "%s/bf16", s_tmp);
    const char *bf16[] = {"run.precision=bf16"};
    s_run_set(b, bf16, 1);
    snprintf(path, sizeof path, "%s/config.json", b);
    CHECK_OK(bt_file_read(path, 1 << 20, &cfg, NULL));
    CHECK_STR_CONTAINS(cfg, "\"precision\":\t\"bf16\"");
    free(cfg);
    CHECK(runs_train_steps(b) == 4);
    double l32 = s_sft1_loss(a), l16 = s_sft1_loss(b);
    printf("first SFT loss: float32 %.9g, bf16 %.9g\n", l32, l16);
    CHECK(l32 != l16 && fabs(l16 - l32) <= 0.01 * l32);

    snprintf(path, sizeof path, "%s/model/model.safetensors", b);
    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(path, &st));
    int matrices = 0, rounded = 0;
    bool embed_rounded = true;
    for (int i = 0; st && i < bt_safetensors_count(st); i++) {
        const bt_st_entry *e = bt_safetensors_entry(st, i);
        bool low_zero = e->dtype == BT_F32;
        for (size_t k = 0; low_zero && k < e->nbytes / 4; k++) {
            uint32_t bits;
            memcpy(&bits, (const char *)e->data + 4 * k, 4);
            low_zero = (bits & 0xffffu) == 0;
        }
        if (!strcmp(e->name, "model.embed_tokens.weight"))
            embed_rounded = low_zero;
        else if (e->ndim == 2) {
            matrices++;
            rounded += low_zero;
        }
    }
    bt_safetensors_destroy(&st);
    CHECK(matrices > 0 && rounded == matrices && !embed_rounded);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_run_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    test_determinism_and_fields();
    test_malformed_messages();
    test_host_reward();
    test_worker_crash();
    test_precision();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
