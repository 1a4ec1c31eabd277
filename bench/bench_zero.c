/*  bench_zero.c — sharded training state (workers.shard, issue 19 section 1): for each stage
    (none, optimizer, gradients, parameters) and 1, 2 and 4 data-parallel ranks, STEPS GRPO
    steps of a ~58M parameter model (hidden 512, 8 layers, SwiGLU 2.6875 x hidden, vocab 32000,
    untied head) on one batch of 8 sequences (prompts of 32 tokens, completions of 32), every
    rank a process of its own over Gloo on loopback.  Per rank: the bytes of AdamW state it
    holds (counted from the tensors allocated), the gradient bytes AdamW is given, the weights
    resident between steps (rank 0's and the largest other rank's), the allocator's own peak
    (bt_device_memory: on the CPU the tracking of the rank's thread, one ATen thread; on CUDA the
    caching allocator's) of everything the rank allocated, and the median step time after the
    first.  One JSON line per (stage, ranks), with ratios to the replicated run of as many ranks;
    each run's final weights are compared with the replicated 1-rank run's.  Usage: bench_zero
   [STEPS] (3).  Threads: BATON_THREADS per rank (default 1).  BENCH_DEVICE "cuda" puts rank r on
   cuda:r (NCCL); BENCH_RANKS the rank counts ("1 2 4"). */
#define _POSIX_C_SOURCE 200809L

#include "../tests/grpo_reference.h"
#include "baton/blas.h"
#include "baton/messages.h"
#include "baton/model.h"
#include "baton/tensor.h"
#include "baton/trainer.h"
#include "bench_shape.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { S_HIDDEN = 512, S_LAYERS = 8, S_VOCAB = 32000, S_PROMPT = 32, S_COMP = 32, S_SEQS = 8 };

/*  What one rank measured. */
typedef struct s_report {
    double optimizer_bytes, grad_bytes, weights_bytes, alloc_peak, step_s, checksum;
} s_report;

static void s_fail(const char *what) {
    fprintf(stderr, "bench_zero: %s: %s\n", what, bt_last_error());
    exit(1);
}

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*  A free TCP port on loopback (the rendezvous store's; rank 0 serves it). */
static int s_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        s_fail("port");
    close(fd);
    return ntohs(a.sin_port);
}

/*  The batch: 2 prompts x 4 completions, fixed tokens, behaviour log-probs -4. */
static void s_batch(bt_rollout_batch *b, double *adv) {
    bt_rollout_batch_init(b);
    if (bt_rollout_batch_alloc(b, 2, 4, S_PROMPT, S_COMP) != BT_OK)
        s_fail("batch");
    b->temperature = 1.0;
    b->version = 0;
    for (int64_t c = 0; c < S_SEQS; c++) {
        for (int64_t i = 0; i < S_PROMPT; i++)
            b->prompt_tokens[c * S_PROMPT + i] = (int32_t)((c / 4 * 131 + i * 17) % S_VOCAB);
        for (int64_t j = 0; j < S_COMP; j++) {
            b->tokens[c * S_COMP + j] = (int32_t)((c * 977 + j * 31) % S_VOCAB);
            b->logprobs[c * S_COMP + j] = -4.0f;
        }
        b->prompt_lens[c] = S_PROMPT;
        b->lengths[c] = S_COMP;
        adv[c] = c % 2 ? -1.0 : 1.0;
    }
}

/*  One rank in this (child) process. */
static void s_rank(bt_shard shard, int rank, int world, int port, int steps, bool cuda,
                   s_report *out) {
    bt_device dev = cuda ? (bt_device){BT_DEVICE_CUDA, rank} : bt_cpu();
    if (!getenv("BATON_THREADS"))
        setenv("BATON_THREADS", "1", 1);
    if (bt_threads_from_env() != BT_OK)
        s_fail("environment");
    if (!cuda && bt_memory_tracking_begin() != BT_OK) /* the CPU allocator's own counts */
        s_fail("memory tracking");
    bt_store *store = rank == 0 && world > 1 ? bt_store_serve(port, NULL) : NULL;
    if (rank == 0 && world > 1 && !store)
        s_fail("store");
    bt_model_config mc = bench_llama_shape(S_HIDDEN, S_LAYERS, S_VOCAB, S_PROMPT + S_COMP);
    bt_model *m = bt_model_new(&mc, dev, 7);
    if (!m)
        s_fail("model");
    bt_trainer_config tc;
    bt_trainer_config_init(&tc);
    tc.micro_batch = 4;
    tc.shard = shard;
    bt_trainer_t *tr = bt_trainer_new(&m, &tc);
    if (!tr)
        s_fail("trainer");
    bt_group *g = NULL;
    if (world > 1) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "z%d-%d", (int)shard, world);
        bt_group_config gc = {.store_host = "127.0.0.1",
                              .store_port = port,
                              .prefix = prefix,
                              .rank = rank,
                              .world = world,
                              .local_addr = "127.0.0.1",
                              .device = dev,
                              .timeout_ms = 600000};
        g = bt_group_new(&gc);
        if (!g)
            s_fail("group");
        bt_trainer_set_group(tr, g);
        if (bt_trainer_sync(tr, 0) != BT_OK)
            s_fail("sync");
    }
    /* AdamW's state and the gradients it is given, counted from the tensors: replicated, the
       moments of every parameter and the whole gradients; sharded, the moments of this
       rank's slice, and with sharded gradients only their shard */
    bt_adamw *opt = bt_trainer_optimizer(tr);
    bt_model *policy = bt_trainer_policy(tr);
    int64_t total = 0, held = 0;
    for (int i = 0; i < bt_model_num_params(policy); i++)
        total += bt_numel(bt_model_params(policy)[i]);
    for (int i = 0; i < (shard == BT_SHARD_NONE ? bt_model_num_params(policy) : 1); i++) {
        bt_tensor *m1, *m2;
        if (bt_adamw_moments(opt, i, &m1, &m2) != BT_OK)
            s_fail("moments");
        held += bt_numel(m1);
    }
    /* sharded weights: the master slice is a tensor of its own (else a view of the weights) */
    out->optimizer_bytes = (shard == BT_SHARD_PARAMETERS ? 12.0 : 8.0) * (double)held;
    out->grad_bytes = 4.0 * (double)(shard >= BT_SHARD_GRADIENTS ? held : total);
    bt_rollout_batch b;
    double adv[S_SEQS], times[16];
    s_batch(&b, adv);
    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.0; /* no reference model */
    for (int s = 0; s < steps; s++) {
        double t0 = bt_now();
        bt_trainer_stats st;
        if (bt_trainer_grpo_step(tr, &b, adv, 1e-4, &cfg, &st) != BT_OK)
            s_fail("step");
        times[s] = bt_now() - t0;
    }
    size_t peak = 0;
    bt_device_memory(dev, NULL, &peak, NULL);
    out->alloc_peak = (double)peak; /* the model, the trainer's state and a step's peak */
    out->weights_bytes = 0; /* resident between steps: none on ranks > 0 with sharded weights */
    for (int i = 0; i < bt_model_num_params(policy); i++)
        out->weights_bytes += 4.0 * (double)bt_numel(bt_model_params(policy)[i]);
    double sum = 0;
    bt_ctx *ctx = bt_ctx_new();
    for (int i = 0; i < bt_model_num_params(policy); i++) {
        double v = 0;
        bt_item(bt_sum_all(ctx, bt_abs(ctx, bt_model_params(policy)[i])), &v);
        sum += v;
        bt_ctx_reset(ctx);
    }
    bt_ctx_destroy(&ctx);
    out->checksum = sum;
    qsort(times + 1, (size_t)(steps - 1), sizeof *times, s_cmp);
    out->step_s = steps > 1 ? times[1 + (steps - 1) / 2] : times[0];
    bt_rollout_batch_release(&b);
    bt_trainer_set_group(tr, NULL);
    bt_group_destroy(&g);
    bt_trainer_destroy(&tr);
    bt_store_destroy(&store);
}

/*  world ranks of stage shard, each a child process; their reports into out. */
static void s_run(bt_shard shard, int world, int steps, bool cuda, s_report *out) {
    int port = world > 1 ? s_free_port() : 0, fd[4][2];
    pid_t pid[4];
    for (int r = 0; r < world; r++) {
        if (pipe(fd[r]) != 0)
            s_fail("pipe");
        pid[r] = fork();
        if (pid[r] < 0)
            s_fail("fork");
        if (pid[r] == 0) {
            close(fd[r][0]);
            s_report rep;
            s_rank(shard, r, world, port, steps, cuda, &rep);
            _exit(write(fd[r][1], &rep, sizeof rep) == (ssize_t)sizeof rep ? 0 : 1);
        }
        close(fd[r][1]);
    }
    for (int r = 0; r < world; r++) {
        int status = 0;
        bool ok = read(fd[r][0], &out[r], sizeof out[r]) == (ssize_t)sizeof out[r];
        close(fd[r][0]);
        if (waitpid(pid[r], &status, 0) != pid[r] || !ok || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            s_fail("rank");
    }
}

int main(int argc, char **argv) {
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    if (steps < 1 || steps > 16) {
        fprintf(stderr, "usage: bench_zero [STEPS in 1..16]\n");
        return 2;
    }
    const char *device = getenv("BENCH_DEVICE"), *list = getenv("BENCH_RANKS");
    bool cuda = device && !strcmp(device, "cuda");
    int worlds[3] = {1, 2, 4}, nw = 3;
    if (list) { /* the fewest ranks first: less contention on a small machine */
        nw = sscanf(list, "%d %d %d", &worlds[0], &worlds[1], &worlds[2]);
        for (int w = 0; w < nw; w++)
            if (worlds[w] < 1 || worlds[w] > 4 || (w > 0 && worlds[w] <= worlds[w - 1]))
                nw = -1;
        if (nw < 1 || worlds[0] != 1) {
            fprintf(stderr, "bench_zero: BENCH_RANKS: rising counts in 1..4, starting at 1\n");
            return 2;
        }
    }
    static const char *const names[4] = {"none", "optimizer", "gradients", "parameters"};
    s_report rep[4][3][4];
    for (int w = 0; w < nw; w++)
        for (int s = 0; s < 4; s++)
            s_run((bt_shard)s, worlds[w], steps, cuda, rep[s][w]);
    double one = rep[0][0][0].checksum;
    for (int s = 0; s < 4; s++)
        for (int w = 0; w < nw; w++) {
            const s_report *r = rep[s][w], *base = rep[0][w];
            double opt = 0, grad = 0, alloc = 0, step = 0;
            double other = worlds[w] > 1 ? 0 : r[0].weights_bytes; /* ranks 1.. (alone: 0's) */
            for (int k = 0; k < worlds[w]; k++) {
                other = k > 0 ? fmax(other, r[k].weights_bytes) : other;
                opt = fmax(opt, r[k].optimizer_bytes);
                grad = fmax(grad, r[k].grad_bytes);
                alloc = fmax(alloc, r[k].alloc_peak);
                step = fmax(step, r[k].step_s);
            }
            printf("{\"bench\":\"zero\",\"device\":\"%s\",\"shard\":\"%s\",\"ranks\":%d,"
                   "\"steps\":%d,\"optimizer_mib_per_rank\":%.1f,\"optimizer_vs_none\":%.4f,"
                   "\"grad_mib_at_update\":%.1f,\"weights_mib_rank0\":%.1f,"
                   "\"weights_mib_others\":%.1f,\"alloc_peak_mib\":%.1f,"
                   "\"alloc_peak_vs_none\":%.3f,\"step_s\":%.3f,"
                   "\"step_vs_none\":%.3f,\"weights_abs_sum_rel_diff\":%.3g}\n",
                   cuda ? "cuda" : "cpu", names[s], worlds[w], steps, opt / (1 << 20),
                   opt / base[0].optimizer_bytes, grad / (1 << 20), r[0].weights_bytes / (1 << 20),
                   other / (1 << 20), alloc / (1 << 20), alloc / fmax(base[0].alloc_peak, 1.0),
                   step, step / base[0].step_s, fabs(r[0].checksum - one) / one);
        }
    return 0;
}
