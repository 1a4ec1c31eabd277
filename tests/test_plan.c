/*  test_plan.c — the memory planner against measured figures: CPU memory tracking (the shim's
    allocator-level counter) against tensors of known sizes; the planner's weights, gradients and
    moments against the model's parameters counted; its trainer peak against the peak measured over
    one real GRPO step, for the demo config and a ~50M-parameter shape (within 15%). */
#define _DEFAULT_SOURCE
#include "baton/config.h"
#include "baton/fileio.h"
#include "baton/messages.h"
#include "baton/model.h"
#include "baton/plan.h"
#include "baton/tensor.h"
#include "baton/trainer.h"
#include "check.h"
#include "plan_measure.h"

#include <stdio.h>
#include <stdlib.h>

static size_t s_peak(void) {
    size_t peak = 0;
    CHECK_OK(bt_device_memory(bt_cpu(), NULL, &peak, NULL));
    return peak;
}

static size_t s_allocated(void) {
    size_t a = 0;
    CHECK_OK(bt_device_memory(bt_cpu(), &a, NULL, NULL));
    return a;
}

/*  Tensors of known sizes: the peak is their bytes exactly (c10 reports nbytes as asked). */
static void test_tracking(void) {
    bt_ctx *before = bt_ctx_new(), *ctx = bt_ctx_new();
    const int64_t big[] = {1000, 1000}, small[] = {333};
    bt_tensor *old = bt_zeros(before, BT_F32, bt_cpu(), 2, big); /* not tracked */
    CHECK(old != NULL);
    CHECK(!bt_memory_is_tracking());
    CHECK(s_peak() == 0);
    CHECK_OK(bt_memory_tracking_begin());
    CHECK(bt_memory_is_tracking());
    CHECK(s_allocated() == 0);
    bt_tensor *a = bt_zeros(ctx, BT_F32, bt_cpu(), 2, big);   /* 4,000,000 bytes */
    bt_tensor *b = bt_zeros(ctx, BT_F64, bt_cpu(), 1, small); /* 2,664 bytes */
    CHECK(a && b);
    CHECK(s_allocated() == 4000000 + 2664);
    bt_ctx_reset(ctx); /* frees a and b */
    CHECK(s_allocated() == 0);
    bt_tensor *c = bt_zeros(ctx, BT_I64, bt_cpu(), 1, small); /* 2,664 bytes */
    CHECK(c != NULL);
    CHECK(s_peak() == 4000000 + 2664);
    CHECK(s_allocated() == 2664);
    bt_ctx_destroy(&before); /* allocated before tracking: its free is not counted */
    CHECK(s_allocated() == 2664);
    CHECK_OK(bt_memory_tracking_begin()); /* again: the peak restarts at what is held */
    CHECK(s_peak() == 2664);
    bt_ctx_destroy(&ctx);
    bt_memory_tracking_end();
    CHECK(!bt_memory_is_tracking());
    CHECK(s_peak() == 0);
}

/*  The plan of cfg for micro-batch mb and prompt length P. */
static bt_plan s_plan(const bt_config *cfg, int64_t P, int64_t mb) {
    bt_plan p;
    char err[256] = "";
    bt_plan_input in = {.prompt_len = P, .micro_batch = mb};
    CHECK_OK(bt_plan_make(cfg, &cfg->model, &in, &p, err, sizeof err));
    return p;
}

static void s_check_peak(const char *name, const char *const *sets, int n_sets, int64_t mb) {
    char path[1024];
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/configs/arith.json", src ? src : "..");
    bt_config cfg;
    CHECK_OK(bt_config_load(path, sets, n_sets, &cfg));
    bt_plan plan = s_plan(&cfg, bt_plan_prompt_bound(&cfg, &cfg.model), mb);
    int64_t elements = 0;
    double measured = plan_measure(&cfg, &plan, bt_cpu(), &elements);
    /* the state: float32 weights, gradients and two moments, counted from the model's tensors */
    CHECK(plan.params == elements);
    if (cfg.run.precision == BT_CONFIG_PRECISION_FLOAT32) /* bf16 adds autocast's casts */
        CHECK(plan.trainer.weights == 4.0 * (double)elements);
    CHECK(plan.trainer.grads == 4.0 * (double)elements);
    CHECK(plan.trainer.moments == 8.0 * (double)elements);
    double err = (plan.trainer.total - measured) / measured;
    double state = plan.trainer.weights + plan.trainer.grads + plan.trainer.moments;
    double act_err = (plan.trainer.activations - (measured - state)) / (measured - state);
    printf("%s: %lld params, micro-batch %lld (%lld x %lld): planned %.1f MiB, measured %.1f MiB "
           "(%+.1f%%); activations planned %.1f MiB, measured %.1f MiB (%+.1f%%)\n",
           name, (long long)plan.params, (long long)plan.micro_batch, (long long)plan.rows,
           (long long)plan.width, plan.trainer.total / 1048576.0, measured / 1048576.0, 100.0 * err,
           plan.trainer.activations / 1048576.0, (measured - state) / 1048576.0, 100.0 * act_err);
    CHECK(fabs(err) <= 0.15);
    CHECK(fabs(act_err) <= 0.25); /* the part the state does not swamp */
}

/*  With LoRA the trained state is the adapters': gradients and moments counted from the adapters
    a model really gets (bt_model_add_lora), the frozen base whole beside them, no KL copy. */
static void test_lora_state(void) {
    char path[1024];
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/configs/arith.json", src ? src : "..");
    const char *sets[] = {"model.lora.rank=4", "model.lora.targets=[\"q_proj\",\"down_proj\"]",
                          "grpo.kl_coef=0.04"};
    bt_config cfg;
    CHECK_OK(bt_config_load(path, sets, 3, &cfg));
    bt_model *m = bt_model_new(&cfg.model, bt_cpu(), 1);
    CHECK(m != NULL);
    int64_t base = 0, adapters = 0;
    for (int i = 0; m && i < bt_model_num_params(m); i++)
        base += bt_numel(bt_model_params(m)[i]);
    CHECK(m && bt_model_add_lora(m, &cfg.lora, 1) == BT_OK);
    for (int i = 0; m && i < bt_model_num_params(m); i++)
        adapters += bt_numel(bt_model_params(m)[i]);
    bt_model_destroy(&m);
    bt_plan plan = s_plan(&cfg, bt_plan_prompt_bound(&cfg, &cfg.model), 8);
    CHECK(adapters > 0 && adapters < base / 10);
    CHECK(plan.trainer.grads == 4.0 * (double)adapters);
    CHECK(plan.trainer.moments == 8.0 * (double)adapters);
    CHECK(plan.trainer.weights == 4.0 * (double)(base + adapters));
    CHECK(plan.trainer.reference == 0.0);
}

/*  The demo (configs/arith.json as it ships) and a ~50M-parameter shape of it. */
static void test_trainer_peak(void) {
    s_check_peak("demo", NULL, 0, 0);
    const char *const ckpt[] = {"grpo.activation_checkpointing=layer"};
    s_check_peak("demo, checkpointed", ckpt, 1, 0);
    const char *const bf16[] = {"run.precision=bf16"};
    s_check_peak("demo, bf16", bf16, 1, 0);
    const char *const big[] = {"model.vocab_size=16384",
                               "model.hidden_size=512",
                               "model.intermediate_size=1408",
                               "model.num_hidden_layers=12",
                               "model.num_attention_heads=8",
                               "model.num_key_value_heads=8",
                               "model.max_position_embeddings=256",
                               "grpo.prompts_per_step=4",
                               "grpo.group_size=4",
                               "grpo.max_new_tokens=24"};
    s_check_peak("50M", big, 10, 8);
}

/*  "auto" and the largest micro-batch: the planner's own figure at that micro-batch fits the
    device, one more does not, and "auto" plans exactly it; without a device size nothing is
    judged. */
static void test_largest(void) {
    char path[1024];
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/configs/arith.json", src ? src : "..");
    const char *const sets[] = {"grpo.micro_batch=auto", "grpo.share_prefix=false"};
    bt_config cfg;
    CHECK_OK(bt_config_load(path, sets, 2, &cfg));
    CHECK(cfg.grpo.micro_batch == 0);
    char err[256];
    bt_plan p, at;
    bt_plan_input in = {.gpus = 4};
    CHECK_OK(bt_plan_make(&cfg, &cfg.model, &in, &p, err, sizeof err));
    CHECK(!p.judged && !p.fits && p.max_micro_batch == -1 && p.micro_batch == 1);
    in.device_bytes = 64.0 * 1024 * 1024; /* 64 MiB: between the state and the whole batch */
    CHECK_OK(bt_plan_make(&cfg, &cfg.model, &in, &p, err, sizeof err));
    CHECK(p.judged && p.max_micro_batch > 1 && p.max_micro_batch < 512);
    CHECK(p.micro_batch == p.max_micro_batch);
    CHECK(p.trainer_device <= in.device_bytes);
    in.micro_batch = p.max_micro_batch + 1;
    CHECK_OK(bt_plan_make(&cfg, &cfg.model, &in, &at, err, sizeof err));
    CHECK(at.trainer_device > in.device_bytes);
    /* rows grow with the micro-batch (no shared prefixes: one sequence a row) */
    CHECK(p.rows == p.max_micro_batch && at.rows == p.max_micro_batch + 1);
    printf("64 MiB: largest micro-batch %lld\n", (long long)p.max_micro_batch);
}

/*  A run with grpo.micro_batch "auto" trains with the planner's choice and says so in an event:
    the whole step's batch (512 sequences) on a machine whose available memory holds the plan of
    it with the trainer's headroom (90%), fewer otherwise. */
static void test_auto_run(void) {
    const char *bin = getenv("BATON_BIN"), *src = getenv("BATON_SOURCE_DIR");
    if (!bin || !src)
        return;
    char dir[] = "/tmp/baton_plan_XXXXXX", cmd[4096], path[1200], *events = NULL;
    CHECK(mkdtemp(dir) != NULL);
    snprintf(cmd, sizeof cmd,
             "'%s' run '%s/configs/arith.json' --run-dir '%s/run' --set grpo.micro_batch=auto "
             "--set grpo.steps=1 --set sft.steps=1 --set workers.eval=0 --set eval.every_steps=0 "
             "--set grpo.dynamic_sampling=false >/dev/null 2>&1",
             bin, src, dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/run/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 20, &events, NULL));
    const char *e = events ? strstr(events, "\"event\":\"micro_batch_auto\"") : NULL;
    const char *m = e ? strstr(e, "\"micro_batch\":") : NULL;
    long chosen = m ? strtol(m + strlen("\"micro_batch\":"), NULL, 10) : -1;
    snprintf(path, sizeof path, "%s/configs/arith.json", src);
    bt_config cfg;
    CHECK_OK(bt_config_load(path, NULL, 0, &cfg));
    bt_plan whole = s_plan(&cfg, bt_plan_prompt_bound(&cfg, &cfg.model), 512);
    size_t avail = 0;
    CHECK_OK(bt_device_available(bt_cpu(), &avail));
    printf("auto run: micro-batch %ld (%.1f GiB available)\n", chosen, (double)avail / (1 << 30));
    if (0.9 * (double)avail > 2 * whole.trainer.total) /* clearly room: the whole batch */
        CHECK(chosen == 512);
    else
        CHECK(chosen >= 1 && chosen <= 512);
    free(events);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    bt_set_num_threads(1); /* the counter sees the calling thread's allocations only */
    test_tracking();
    test_largest();
    test_lora_state();
    test_auto_run();
    test_trainer_peak();
    return check_exit();
}
