/*  test_lora_run.c — a whole `baton run` with LoRA (model.lora.rank 4 on q_proj, v_proj and
    down_proj, an SFT warm start, GRPO with a KL penalty against the base): its checkpoints hold
    the adapters in PEFT's layout (adapter_model.safetensors with PEFT's names and
    adapter_config.json, no model.safetensors); the rollout worker's model after each sync gives
    the trainer's log-probs (mismatch_kl at rounding); killed after a checkpoint and resumed, it
   writes exactly the metrics of an uninterrupted run (so the adapters and their AdamW moments came
    back, and the rollout workers got them); the final policy folder loads as a LoRA model, and
    `baton export --merge` writes a plain folder whose logits are that model's. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "baton/model.h"
#include "baton/safetensors.h"
#include "check.h"
#include "runs.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"l\", \"seed\": 5},"
    " \"model\": {\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
    "  \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"max_position_embeddings\": 64,"
    "  \"lora\": {\"rank\": 4, \"alpha\": 8, \"targets\": [\"q_proj\", \"v_proj\", "
    "\"down_proj\"]}},"
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\","
    "  \"heldout_size\": 10, \"format_reward\": 0.5},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 16, \"lr\": 0.01},"
    " \"grpo\": {\"steps\": 12, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.01, \"kl_coef\": 0.02},"
    " \"eval\": {\"every_steps\": 4, \"heldout_count\": 10},"
    " \"checkpoint\": {\"full_every_steps\": 3, \"keep_last\": 5},"
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}";

static pid_t s_start(const char *dir, bool resume) {
    const char *args[8] = {"run", s_config, "--run-dir", dir, resume ? "--resume" : NULL, NULL};
    return runs_spawn(args);
}

/*  A checkpoint of the LoRA run: PEFT's files, PEFT's names, the adapters only. */
static void s_check_checkpoint(const char *run) {
    char path[256];
    snprintf(path, sizeof path, "%s/ckpt/step-00000003/model.safetensors", run);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/ckpt/step-00000003/adapter_config.json", run);
    char *config = NULL;
    CHECK_OK(bt_file_read(path, 1 << 20, &config, NULL));
    CHECK_STR_CONTAINS(config, "\"peft_type\":\t\"LORA\"");
    CHECK_STR_CONTAINS(config, "\"target_modules\":\t[\"q_proj\", \"v_proj\", \"down_proj\"]");
    free(config);
    snprintf(path, sizeof path, "%s/ckpt/step-00000003/adapter_model.safetensors", run);
    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(path, &st));
    CHECK(st && bt_safetensors_count(st) == 6); /* 1 layer x 3 targets x (A, B) */
    const bt_st_entry *b =
        st ? bt_safetensors_find(st, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight")
           : NULL;
    CHECK(b && b->ndim == 2 && b->shape[0] == 32 && b->shape[1] == 4);
    float top = 0; /* trained: B moved off 0 */
    for (int64_t i = 0; b && i < 32 * 4; i++) {
        float x;
        memcpy(&x, (const char *)b->data + i * sizeof x, sizeof x);
        top = fmaxf(top, fabsf(x));
    }
    CHECK(top > 1e-4f);
    bt_safetensors_destroy(&st);
}

/*  logits of ids under the model folder dir. */
static double s_logit_diff(const char *a_dir, const char *b_dir, bool *lora_a, bool *lora_b) {
    bt_model *a = bt_model_load(a_dir, bt_cpu()), *b = bt_model_load(b_dir, bt_cpu());
    CHECK(a && b);
    if (!a || !b) {
        bt_model_destroy(&a);
        bt_model_destroy(&b);
        return INFINITY;
    }
    *lora_a = bt_model_lora(a) != NULL;
    *lora_b = bt_model_lora(b) != NULL;
    bt_ctx *ctx = bt_ctx_new();
    const int64_t ids[] = {256, 49, 43, 55, 61, 50}, ones[] = {1, 1, 1, 1, 1, 1}, shape[] = {1, 6};
    bt_tensor *ti = bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ids);
    bt_tensor *tm = bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ones);
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *d = bt_abs(
        ctx, bt_sub(ctx, bt_model_forward(a, ctx, ti, tm), bt_model_forward(b, ctx, ti, tm)));
    bt_set_grad_enabled(grad);
    double diff = INFINITY;
    CHECK_OK(bt_item(bt_max(ctx, bt_reshape(ctx, d, 1, (const int64_t[]){-1}), 0, false), &diff));
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&a);
    bt_model_destroy(&b);
    return diff;
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_lora_run_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/l.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char ref[128], cut[128], out[128], policy[160], cmd[512], text[4096];
    snprintf(ref, sizeof ref, "%s/ref", s_tmp);
    snprintf(cut, sizeof cut, "%s/cut", s_tmp);
    snprintf(out, sizeof out, "%s/merged", s_tmp);
    CHECK(runs_wait(s_start(ref, false)) == 0); /* uninterrupted */
    char *reference = runs_metrics(ref);
    CHECK(reference && runs_last_step(ref, NULL) == 12);
    s_check_checkpoint(ref);
    /* the rollout worker samples from its model after each sync; the trainer recomputes the same
       tokens' log-probs: their KL (mismatch_kl) is rounding only when the worker's adapters are
       the trainer's, at every step (the adapters change at each) */
    double worst_mismatch = 0;
    for (int step = 1; step <= 12; step++) {
        double kl = runs_train_value(reference, "main", step, "mismatch_kl");
        double v = runs_train_value(reference, "main", step, "version");
        CHECK(kl == kl && v == 3 + step); /* 3 SFT updates, then one per step */
        worst_mismatch = fmax(worst_mismatch, fabs(kl));
    }
    printf("{\"test\":\"lora_run_sync\",\"max_mismatch_kl\":%.3g}\n", worst_mismatch);
    CHECK(worst_mismatch < 1e-9);

    pid_t pid = s_start(cut, false); /* killed once a checkpoint is written, then resumed */
    char latest[160];
    snprintf(latest, sizeof latest, "%s/ckpt/LATEST", cut);
    while (runs_alive(pid) && (runs_last_step(cut, NULL) < 4 || access(latest, F_OK) != 0))
        runs_sleep_ms(2);
    kill(pid, SIGKILL);
    runs_wait(pid);
    CHECK(runs_last_step(cut, NULL) < 12); /* the kill cut the run short */
    CHECK(runs_wait(s_start(cut, true)) == 0);
    runs_check_same(ref, cut); /* the metrics, and the policy's base */
    snprintf(cmd, sizeof cmd,
             "cmp -s %s/model/adapter_model.safetensors %s/model/adapter_model.safetensors", ref,
             cut);
    CHECK(system(cmd) == 0); /* and its adapters, byte for byte */
    free(reference);

    snprintf(cmd, sizeof cmd, "%s export --merge %s %s 2>&1",
             getenv("BATON_BIN") ? getenv("BATON_BIN") : "./baton", ref, out);
    CHECK(runs_capture(cmd, text, sizeof text) == 0);
    snprintf(policy, sizeof policy, "%s/model", ref);
    bool lora_policy = false, lora_merged = true;
    double diff = s_logit_diff(policy, out, &lora_policy, &lora_merged);
    printf("{\"test\":\"lora_run_export\",\"max_abs_logit_diff\":%.3g}\n", diff);
    CHECK(lora_policy && !lora_merged && diff < 1e-5);
    snprintf(cmd, sizeof cmd, "%s export %s %s/x 2>&1",
             getenv("BATON_BIN") ? getenv("BATON_BIN") : "./baton", ref, s_tmp);
    CHECK(runs_capture(cmd, text, sizeof text) == 2); /* only --merge is built */
    CHECK_STR_CONTAINS(text, "export: only --merge is built");

    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
