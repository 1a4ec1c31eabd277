/*  bench_episodes.c — multi-turn episodes (issue 21): episodes/s of a rollout job's 64 episodes
    (16 prompts x 4 samples, temperature 1) of the demo-sized model (configs/arith.json's model:
    hidden 128, 4 layers, 4 heads; 128 positions instead of 64, room for 3 turns) and the byte
    tokenizer, over a C environment whose step call sleeps LATENCY ms (nanosleep, once per
    bt_env_step call: a batched service's round trip) and answers "<result>42</result>", ending
    the episode after its T-th turn.  The model's stop token is unreachable (vocab_limit 256:
    bytes only) and the environment's stop string "</calc>" all but so, so every episode takes
    exactly T turns, each of its per-turn limit: "uniform" turns of TOKENS ids, or "ragged" turns
    of TOKENS/2 .. 3 TOKENS/2 ids by episode (max_new_each), as a policy's turns are.
    Cases: latency 0 (compute only) and LATENCY ms x T = 1 and 3 x interleave on and off x slots
    64 (one per episode) and 16 (waiting episodes hold their slots) x uniform and ragged turns;
    REPS runs each, the 8 cases of a (slots, turn shape) group one after another (forwards, then
    backwards the next rep) so that the runs a ratio compares are close in time on a noisy
    machine.
    Prints one JSON line per case {"bench":"episodes", ...}: the best run's episodes_per_s,
    mean_turns, model_tokens_per_s, env_steps, env_s, waited_s, decode_steps, wall_s, cpu_s (the
    process's CPU time in the run), wall_median_s, and call_sizes (the episodes each step call
    carried, the first 64); then one per pair {"bench":"episodes_ratio", ...}: 3-turn / 1-turn
    and interleave on / off episodes/s, the median over reps of each rep's ratio, and the
    latency's cost (wall - the 0 ms case's wall, median over reps) against the synchronous
    prediction (env_steps x latency).
    Environment: BATON_BENCH_LATENCY_MS (20), BATON_BENCH_TOKENS (16), BATON_BENCH_REPS (5),
    BATON_BENCH_OBSERVATION (the step's answer, "<result>42</result>"; "": no observation ids),
    BATON_THREADS (libtorch's default), BATON_DEVICE (cpu). */
#define _POSIX_C_SOURCE 200809L

#include "baton/blas.h"
#include "baton/env.h"
#include "baton/episodes.h"
#include "baton/model.h"
#include "baton/rng.h"
#include "baton/sample.h"
#include "baton/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    PROMPTS = 16,
    SAMPLES = 4,
    N = PROMPTS * SAMPLES,
    SLOTS_FEW = 16,
    MAX_T = 3,
    S_REPS_MAX = 100,
    S_CALLS_MAX = 64
};

/* ---- the environment ----------------------------------------------------------------------- */

/*  Sleeps latency_ms per step call; episode e is done at its turns-th step. */
typedef struct s_env {
    long latency_ms;
    int turns;
    const char *obs; /* the observation of every step, obs_len bytes */
    size_t obs_len;
    int steps_of[N];            /* steps each episode has taken */
    int64_t sizes[S_CALLS_MAX]; /* episodes in each step call, the first S_CALLS_MAX */
    int n_calls;
} s_env;

static void s_sleep_ms(long ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bt_status s_env_reset(void *user, const bt_env_reset_item *items, int64_t n,
                             bt_env_reply *out) {
    s_env *e = user;
    for (int64_t i = 0; i < n; i++) {
        if (items[i].episode >= N)
            return bt_fail(BT_EINVAL, "bench env: episode %llu out of range",
                           (unsigned long long)items[i].episode);
        e->steps_of[items[i].episode] = 0;
        out[i] = (bt_env_reply){.observation = "", .observation_len = 0};
    }
    return BT_OK;
}

static bt_status s_env_step(void *user, const bt_env_step_item *items, int64_t n,
                            bt_env_reply *out) {
    s_env *e = user;
    s_sleep_ms(e->latency_ms); /* one round trip per call, however many episodes it carries */
    if (e->n_calls < S_CALLS_MAX)
        e->sizes[e->n_calls] = n;
    e->n_calls++;
    for (int64_t i = 0; i < n; i++) {
        if (items[i].episode >= N)
            return bt_fail(BT_EINVAL, "bench env: episode %llu out of range",
                           (unsigned long long)items[i].episode);
        int k = ++e->steps_of[items[i].episode];
        out[i] = (bt_env_reply){
            .observation = e->obs, .observation_len = e->obs_len, .done = k >= e->turns};
    }
    return BT_OK;
}

static void s_env_destroy(void *user) {
    free(user);
}

static const bt_env_ops s_env_ops = {.reset = s_env_reset,
                                     .step = s_env_step,
                                     .destroy = s_env_destroy,
                                     .stop_strings = "</calc>\0"};

/* ---- one case ------------------------------------------------------------------------------ */

typedef struct s_case {
    long latency_ms;
    int turns;
    bool interleave;
    int64_t slots; /* 0: one per episode */
    bool ragged;
} s_case;

typedef struct s_result {
    double wall_s, cpu_s, mean_turns, env_s, waited_s;
    int64_t env_steps, model_tokens, decode_steps;
    int64_t sizes[S_CALLS_MAX]; /* episodes in each step call */
    int n_sizes;
    bool ok;
} s_result;

typedef struct s_bench {
    bt_model *model;
    bt_tokenizer_t *tok;
    int64_t tokens;  /* per-turn limit of uniform turns */
    const char *obs; /* the environment's observation */
    int32_t ids[N][16];
    const int32_t *rows[N];
    int64_t lens[N];
    uint64_t keys[N];
    char prompt_text[N][16];
    bt_env_reset_item items[N];
    int64_t each[N]; /* ragged per-turn limits */
} s_bench;

/*  The process's CPU time, seconds (every thread's: the engine's and the stepping thread's). */
static double s_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*  One run of case c; *r its figures (r->ok false on failure, the error printed). */
/*  task.interleave's decode steps when interleaving: BATON_BENCH_INTERLEAVE, else 4 (about 20 ms
    of the demo model's decode steps of 16 to 64 rows on this CPU). */
static int64_t s_lag(void) {
    const char *v = getenv("BATON_BENCH_INTERLEAVE");
    return v && atoll(v) > 0 ? atoll(v) : 4;
}

static void s_run_case(s_bench *b, const s_case *c, s_result *r) {
    memset(r, 0, sizeof *r);
    s_env *e = calloc(1, sizeof *e);
    bt_env_t *env = NULL;
    if (!e || bt_env_new(&s_env_ops, e, &env) != BT_OK) {
        fprintf(stderr, "bench_episodes: environment: %s\n", bt_last_error());
        return;
    }
    e->latency_ms = c->latency_ms;
    e->turns = c->turns;
    e->obs = b->obs;
    e->obs_len = strlen(b->obs);
    bt_episode_config ec;
    bt_episode_config_init(&ec);
    ec.max_turns = c->turns;
    /* interleaved: an answer is used s_lag() decode steps after its turn ended */
    ec.interleave = c->interleave ? s_lag() : 0;
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = c->ragged ? b->tokens * 3 / 2 : b->tokens;
    sc.max_new_each = c->ragged ? b->each : NULL;
    sc.temperature = 1.0;
    sc.n_stops = bt_tokenizer_stops(b->tok, sc.stops, BT_SAMPLE_MAX_STOPS);
    sc.vocab_limit = 256; /* bytes only: the stop token is never drawn */
    sc.slots = c->slots;
    /* T turns and T - 1 observations */
    ec.max_episode_tokens = c->turns * sc.max_new_tokens + (c->turns - 1) * (int64_t)strlen(b->obs);
    bt_episodes out;
    bt_episodes_init(&out);
    double t0 = bt_now(), c0 = s_cpu_s();
    bt_status st = bt_episodes_run(b->model, b->tok, env, &ec, &sc, b->rows, b->lens, b->items, N,
                                   b->keys, &out);
    r->wall_s = bt_now() - t0;
    r->cpu_s = s_cpu_s() - c0;
    if (st != BT_OK) {
        fprintf(stderr, "bench_episodes: %s\n", bt_last_error());
    } else {
        const int64_t W = out.g.max_new_tokens;
        int64_t turns = 0;
        for (int64_t i = 0; i < N; i++) {
            turns += out.g.n_turns[i];
            for (int64_t j = 0; j < out.g.lengths[i]; j++)
                r->model_tokens += out.g.loss_mask[i * W + j];
        }
        r->mean_turns = (double)turns / N;
        r->env_steps = out.env_steps;
        r->env_s = out.env_s;
        r->waited_s = out.waited_s;
        r->decode_steps = out.g.decode_steps;
        r->n_sizes = e->n_calls < S_CALLS_MAX ? e->n_calls : S_CALLS_MAX;
        memcpy(r->sizes, e->sizes, (size_t)r->n_sizes * sizeof *r->sizes);
        r->ok = true;
    }
    bt_episodes_release(&out);
    bt_env_destroy(&env);
}

/*  The median of x[0..n), n <= S_REPS_MAX, times scale. */
static double s_median(const double *in, long n, double scale) {
    double x[S_REPS_MAX];
    memcpy(x, in, (size_t)n * sizeof *x);
    for (long i = 1; i < n; i++) /* insertion sort: n is a handful */
        for (long j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
    return scale * (n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]));
}

static void s_print_case(const s_case *c, const s_result *r, double median_s, const char *dev) {
    printf(
        "{\"bench\":\"episodes\",\"device\":\"%s\",\"threads\":%d,\"episodes\":%d,"
        "\"slots\":%lld,\"turns\":%d,\"turn_tokens\":\"%s\",\"latency_ms\":%ld,"
        "\"interleave\":%lld,\"wall_s\":%.4f,\"wall_median_s\":%.4f,\"cpu_s\":%.4f,\"episodes_per_"
        "s\":%.2f,"
        "\"mean_turns\":%.3f,"
        "\"model_tokens\":%lld,\"model_tokens_per_s\":%.1f,\"decode_steps\":%lld,"
        "\"env_steps\":%lld,\"episodes_per_call\":%.1f,\"env_s\":%.4f,\"waited_s\":%.4f,\"call_"
        "sizes\":[",
        dev, bt_get_num_threads(), N, (long long)(c->slots ? c->slots : N), c->turns,
        c->ragged ? "ragged" : "uniform", c->latency_ms, c->interleave ? (long long)s_lag() : 0LL,
        r->wall_s, median_s, r->cpu_s, N / r->wall_s, r->mean_turns, (long long)r->model_tokens,
        (double)r->model_tokens / r->wall_s, (long long)r->decode_steps, (long long)r->env_steps,
        (double)N * c->turns / (double)r->env_steps, r->env_s, r->waited_s);
    for (int k = 0; k < r->n_sizes; k++)
        printf("%s%lld", k ? "," : "", (long long)r->sizes[k]);
    printf("]}\n");
}

/* ---- main ---------------------------------------------------------------------------------- */

static long s_env_long(const char *name, long fallback, long lo, long hi) {
    const char *v = getenv(name);
    if (!v || !*v)
        return fallback;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        fprintf(stderr, "bench_episodes: %s: expected an integer in [%ld, %ld], got \"%s\"\n", name,
                lo, hi, v);
        exit(1);
    }
    return x;
}

/*  The index of case (latency, turns, interleave, slots, ragged) in the table main builds. */
#define S_AT(lat, t, il, sl, rg) (((((lat)*2 + (t)) * 2 + (il)) * 2 + (sl)) * 2 + (rg))

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    const long latency = s_env_long("BATON_BENCH_LATENCY_MS", 20, 1, 10000);
    const long tokens = s_env_long("BATON_BENCH_TOKENS", 16, 2, 64);
    const char *obs = getenv("BATON_BENCH_OBSERVATION");
    if (!obs)
        obs = "<result>42</result>";
    if (strlen(obs) > 256) {
        fprintf(stderr,
                "bench_episodes: BATON_BENCH_OBSERVATION: expected at most 256 bytes, got "
                "%zu\n",
                strlen(obs));
        return 1;
    }
    const long reps = s_env_long("BATON_BENCH_REPS", 5, 1, S_REPS_MAX);
    if (bt_threads_from_env() != BT_OK) {
        fprintf(stderr, "bench_episodes: %s\n", bt_last_error());
        return 1;
    }
    bt_device device = bt_cpu();
    const char *env_device = getenv("BATON_DEVICE");
    if (env_device && bt_device_parse(env_device, &device) != BT_OK) {
        fprintf(stderr, "bench_episodes: BATON_DEVICE: %s\n", bt_last_error());
        return 1;
    }
    char dev[32];
    bt_device_format(device, dev, sizeof dev);

    bt_model_config mc; /* configs/arith.json's model */
    bt_model_config_init(&mc);
    mc.vocab_size = 259;
    mc.hidden_size = 128;
    mc.intermediate_size = 352;
    mc.num_hidden_layers = 4;
    mc.num_attention_heads = 4;
    mc.num_key_value_heads = 4;
    /* room for 7 prompt ids, 3 turns of up to 3/2 tokens and 2 observations: 128 by default */
    int64_t need = 7 + MAX_T * (tokens * 3 / 2) + (MAX_T - 1) * (int64_t)strlen(obs);
    mc.max_position_embeddings = need <= 128 ? 128 : (need + 63) / 64 * 64;
    static s_bench b;
    b.model = bt_model_new(&mc, device, 1);
    b.tok = bt_tokenizer_new_bytes();
    if (!b.model || !b.tok) {
        fprintf(stderr, "bench_episodes: %s\n", b.model ? "out of memory" : bt_last_error());
        return 1;
    }
    b.tokens = tokens;
    b.obs = obs;
    for (int i = 0; i < N; i++) { /* 16 prompts "a+b=", 4 samples each */
        int p = i / SAMPLES;
        snprintf(b.prompt_text[i], sizeof b.prompt_text[i], "%d+%d=", 10 + p * 5, 31 + p * 3);
        size_t n = 0;
        if (bt_tokenizer_encode(b.tok, b.prompt_text[i], strlen(b.prompt_text[i]), true, b.ids[i],
                                16, &n) != BT_OK) {
            fprintf(stderr, "bench_episodes: %s\n", bt_last_error());
            return 1;
        }
        b.rows[i] = b.ids[i];
        b.lens[i] = (int64_t)n;
        b.keys[i] = bt_rng_key(21, (uint64_t)i);
        b.items[i] =
            (bt_env_reset_item){.episode = (uint64_t)i, .prompt = b.prompt_text[i], .answer = "42"};
        b.each[i] = tokens / 2 + (i * 7) % (tokens + 1); /* tokens/2 .. 3 tokens/2, mean ~tokens */
    }

    /* the table: latency {0, L} x turns {1, 3} x interleave {off, on} x slots {64, 16} x turns
       {uniform, ragged} */
    enum { CASES = 32 };
    s_case cases[CASES];
    s_result best[CASES];
    for (int lat = 0; lat < 2; lat++)
        for (int t = 0; t < 2; t++)
            for (int il = 0; il < 2; il++)
                for (int sl = 0; sl < 2; sl++)
                    for (int rg = 0; rg < 2; rg++) {
                        int k = S_AT(lat, t, il, sl, rg);
                        cases[k] = (s_case){.latency_ms = lat ? latency : 0,
                                            .turns = t ? MAX_T : 1,
                                            .interleave = il == 1,
                                            .slots = sl ? SLOTS_FEW : 0,
                                            .ragged = rg == 1};
                        best[k].ok = false;
                    }
    s_result warm; /* page faults, the allocator's first growth */
    s_run_case(&b, &cases[S_AT(0, 1, 0, 0, 0)], &warm);
    int rc = warm.ok ? 0 : 1;
    /* a group, (slots, turn shape): its 8 cases (latency x turns x interleave) run one after
       another, forwards on even reps and backwards on odd, so the ratios within a group are of
       runs close in time (the machine's load drifts over seconds) */
    static double walls[CASES][S_REPS_MAX];
    for (long rep = 0; rep < reps && rc == 0; rep++)
        for (int g = 0; g < 4 && rc == 0; g++)
            for (int j = 0; j < 8 && rc == 0; j++) {
                int jj = rep % 2 ? 7 - j : j, sl = g / 2, rg = g % 2;
                int k = S_AT(jj / 4, (jj / 2) % 2, jj % 2, sl, rg);
                s_result r;
                s_run_case(&b, &cases[k], &r);
                rc = r.ok ? 0 : 1;
                walls[k][rep] = r.wall_s;
                if (r.ok && (!best[k].ok || r.wall_s < best[k].wall_s))
                    best[k] = r;
            }
    for (int k = 0; k < CASES && rc == 0; k++)
        s_print_case(&cases[k], &best[k], s_median(walls[k], reps, 1.0), dev);
    /* the ratios: the median over reps of each rep's ratio */
    double per[S_REPS_MAX];
    for (int lat = 0; lat < 2 && rc == 0; lat++)
        for (int sl = 0; sl < 2; sl++)
            for (int rg = 0; rg < 2; rg++)
                for (int il = 0; il < 2; il++) {
                    const double *one = walls[S_AT(lat, 0, il, sl, rg)];
                    const double *three = walls[S_AT(lat, 1, il, sl, rg)];
                    for (long i = 0; i < reps; i++)
                        per[i] = one[i] / three[i];
                    printf("{\"bench\":\"episodes_ratio\",\"ratio\":\"3turn_over_1turn\","
                           "\"latency_ms\":%ld,\"slots\":%d,\"turn_tokens\":\"%s\","
                           "\"interleave\":%s,\"episodes_per_s\":%.3f}\n",
                           lat ? latency : 0L, sl ? SLOTS_FEW : N, rg ? "ragged" : "uniform",
                           il ? "true" : "false", s_median(per, reps, 1.0));
                }
    for (int lat = 0; lat < 2 && rc == 0; lat++)
        for (int t = 0; t < 2; t++)
            for (int sl = 0; sl < 2; sl++)
                for (int rg = 0; rg < 2; rg++) {
                    const double *off = walls[S_AT(lat, t, 0, sl, rg)];
                    const double *on = walls[S_AT(lat, t, 1, sl, rg)];
                    const double *off0 = walls[S_AT(0, t, 0, sl, rg)];
                    const double *on0 = walls[S_AT(0, t, 1, sl, rg)];
                    double ratio, off_cost, on_cost;
                    for (long i = 0; i < reps; i++)
                        per[i] = off[i] / on[i];
                    ratio = s_median(per, reps, 1.0);
                    for (long i = 0; i < reps; i++)
                        per[i] = off[i] - off0[i];
                    off_cost = s_median(per, reps, 1.0);
                    for (long i = 0; i < reps; i++)
                        per[i] = on[i] - on0[i];
                    on_cost = s_median(per, reps, 1.0);
                    const s_result *boff = &best[S_AT(lat, t, 0, sl, rg)];
                    const s_result *bon = &best[S_AT(lat, t, 1, sl, rg)];
                    /* synchronous prediction: every step call a round nothing overlaps */
                    double predicted = (double)boff->env_steps * (double)latency / 1000.0;
                    printf("{\"bench\":\"episodes_ratio\",\"ratio\":\"interleave_on_over_off\","
                           "\"latency_ms\":%ld,\"turns\":%d,\"slots\":%d,\"turn_tokens\":\"%s\","
                           "\"episodes_per_s\":%.3f,\"off_latency_cost_s\":%.4f,"
                           "\"off_predicted_s\":%.4f,\"on_latency_cost_s\":%.4f,"
                           "\"env_steps_off\":%lld,\"env_steps_on\":%lld,\"waited_s_off\":%.4f,"
                           "\"waited_s_on\":%.4f,\"decode_steps_off\":%lld,"
                           "\"decode_steps_on\":%lld}\n",
                           lat ? latency : 0L, t ? MAX_T : 1, sl ? SLOTS_FEW : N,
                           rg ? "ragged" : "uniform", ratio, lat ? off_cost : 0.0,
                           lat ? predicted : 0.0, lat ? on_cost : 0.0, (long long)boff->env_steps,
                           (long long)bon->env_steps, boff->waited_s, bon->waited_s,
                           (long long)boff->decode_steps, (long long)bon->decode_steps);
                }
    bt_tokenizer_destroy(&b.tok);
    bt_model_destroy(&b.model);
    return rc;
}
