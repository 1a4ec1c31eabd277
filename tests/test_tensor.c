/*  test_tensor.c — the ATen shim: every differentiable op's gradient against central finite
    differences in float64, AdamW against a hand-computed reference, generator state restore,
    gradient clipping, arenas, readable errors instead of aborts (out of memory among them), and
    autocast scopes against products of bfloat16-rounded inputs computed on the host. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "baton/tensor.h"
#include "check.h"

#include <dlfcn.h>
#include <stdlib.h>

/* ---- an independent source of test data (not libtorch's generator) ----------------------------
 */
static uint64_t s_lcg = 88172645463325252ull;
static double s_uniform(double lo, double hi) {
    s_lcg ^= s_lcg << 13;
    s_lcg ^= s_lcg >> 7;
    s_lcg ^= s_lcg << 17;
    return lo + (hi - lo) * (double)(s_lcg >> 11) / 9007199254740992.0;
}

/* ---- finite-difference harness --------------------------------------------------------------- */
#define MAX_IN 3
typedef bt_tensor *(*op_fn)(bt_ctx *c, bt_tensor **in);
typedef struct {
    int ndim;
    int64_t shape[4];
} shape_t;

static int64_t s_numel(shape_t s) {
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++)
        n *= s.shape[i];
    return n;
}

/*  L = sum(f(x) * R) for fixed weights R (host doubles); NAN on failure. */
static double s_loss(bt_ctx *c, op_fn f, int n_in, const shape_t *shapes, double **x,
                     const double *r, bt_tensor **in, bool grad) {
    for (int i = 0; i < n_in; i++) {
        in[i] = bt_from_host(c, BT_F64, bt_cpu(), shapes[i].ndim, shapes[i].shape, x[i]);
        if (grad)
            bt_set_requires_grad(in[i], true);
    }
    bt_tensor *out = f(c, in);
    if (!out)
        return NAN;
    int64_t n = bt_numel(out);
    int64_t rshape[1] = {n};
    bt_tensor *rt = bt_from_host(c, BT_F64, bt_cpu(), 1, rshape, r);
    bt_tensor *l = bt_sum_all(c, bt_mul(c, bt_reshape(c, out, 1, rshape), rt));
    double v = NAN;
    if (bt_item(l, &v) != BT_OK)
        return NAN;
    if (grad && bt_backward(l) != BT_OK)
        return NAN;
    return v;
}

static void check_grad(const char *name, op_fn f, int n_in, const shape_t *shapes, double lo,
                       double hi) {
    bt_ctx *c = bt_ctx_new();
    double *x[MAX_IN];
    bt_tensor *in[MAX_IN];
    for (int i = 0; i < n_in; i++) {
        x[i] = malloc(sizeof(double) * (size_t)s_numel(shapes[i]));
        for (int64_t j = 0; j < s_numel(shapes[i]); j++)
            x[i][j] = s_uniform(lo, hi);
    }
    /* output size: one forward */
    for (int i = 0; i < n_in; i++)
        in[i] = bt_from_host(c, BT_F64, bt_cpu(), shapes[i].ndim, shapes[i].shape, x[i]);
    bt_tensor *probe = f(c, in);
    if (!probe) {
        fprintf(stderr, "%s: forward failed: %s\n", name, bt_last_error());
        s_check_failures++;
        goto out;
    }
    int64_t n_out = bt_numel(probe);
    double *r = malloc(sizeof(double) * (size_t)n_out);
    for (int64_t j = 0; j < n_out; j++)
        r[j] = s_uniform(-1, 1);
    bt_ctx_reset(c);

    s_loss(c, f, n_in, shapes, x, r, in, true);
    double worst = 0.0;
    for (int i = 0; i < n_in; i++) {
        int64_t n = s_numel(shapes[i]);
        double *g = malloc(sizeof(double) * (size_t)n);
        CHECK_OK(bt_to_host(bt_grad(c, in[i]), g, sizeof(double) * (size_t)n));
        bt_ctx *fd = bt_ctx_new();
        bool prev = bt_set_grad_enabled(false);
        for (int64_t j = 0; j < n; j++) {
            const double eps = 1e-6;
            bt_tensor *tmp[MAX_IN];
            double keep = x[i][j];
            x[i][j] = keep + eps;
            double lp = s_loss(fd, f, n_in, shapes, x, r, tmp, false);
            x[i][j] = keep - eps;
            double lm = s_loss(fd, f, n_in, shapes, x, r, tmp, false);
            x[i][j] = keep;
            bt_ctx_reset(fd);
            double num = (lp - lm) / (2 * eps);
            double err = fabs(num - g[j]) / fmax(1.0, fabs(num));
            if (!(err <= worst))
                worst = err;
        }
        bt_set_grad_enabled(prev);
        bt_ctx_destroy(&fd);
        free(g);
    }
    if (!(worst < 1e-6)) {
        fprintf(stderr, "%s: gradient differs from finite differences by %.3g\n", name, worst);
        s_check_failures++;
    }
    free(r);
out:
    for (int i = 0; i < n_in; i++)
        free(x[i]);
    bt_ctx_destroy(&c);
}

/* ---- the ops under test ---------------------------------------------------------------------- */
static bt_tensor *op_add(bt_ctx *c, bt_tensor **x) {
    return bt_add(c, x[0], x[1]);
}
static bt_tensor *op_sub(bt_ctx *c, bt_tensor **x) {
    return bt_sub(c, x[0], x[1]);
}
static bt_tensor *op_mul(bt_ctx *c, bt_tensor **x) {
    return bt_mul(c, x[0], x[1]);
}
static bt_tensor *op_div(bt_ctx *c, bt_tensor **x) {
    return bt_div(c, x[0], x[1]);
}
static bt_tensor *op_matmul(bt_ctx *c, bt_tensor **x) {
    return bt_matmul(c, x[0], x[1]);
}
static bt_tensor *op_linear(bt_ctx *c, bt_tensor **x) {
    return bt_linear(c, x[0], x[1]);
}
static bt_tensor *op_scalars(bt_ctx *c, bt_tensor **x) {
    return bt_add_scalar(c, bt_mul_scalar(c, bt_neg(c, x[0]), 3.0), 0.5);
}
static bt_tensor *op_pow(bt_ctx *c, bt_tensor **x) {
    return bt_pow_scalar(c, x[0], 2.5);
}
static bt_tensor *op_exp(bt_ctx *c, bt_tensor **x) {
    return bt_exp(c, x[0]);
}
static bt_tensor *op_ln(bt_ctx *c, bt_tensor **x) {
    return bt_ln(c, x[0]);
}
static bt_tensor *op_sqrt(bt_ctx *c, bt_tensor **x) {
    return bt_sqrt(c, x[0]);
}
static bt_tensor *op_rsqrt(bt_ctx *c, bt_tensor **x) {
    return bt_rsqrt(c, x[0]);
}
static bt_tensor *op_abs(bt_ctx *c, bt_tensor **x) {
    return bt_abs(c, x[0]);
}
static bt_tensor *op_clamp(bt_ctx *c, bt_tensor **x) {
    return bt_clamp(c, x[0], -0.5, 0.5);
}
static bt_tensor *op_minmax(bt_ctx *c, bt_tensor **x) {
    return bt_add(c, bt_minimum(c, x[0], x[1]), bt_mul_scalar(c, bt_maximum(c, x[0], x[1]), 2));
}
static bt_tensor *op_where(bt_ctx *c, bt_tensor **x) {
    return bt_where(c, bt_gt_scalar(c, x[0], 0.0), x[0], bt_mul(c, x[0], x[1]));
}
static bt_tensor *op_masked_fill(bt_ctx *c, bt_tensor **x) {
    return bt_masked_fill(c, x[0], bt_lt_scalar(c, x[1], 0.0), 7.0);
}
static bt_tensor *op_silu(bt_ctx *c, bt_tensor **x) {
    return bt_silu(c, x[0]);
}
static bt_tensor *op_gelu_tanh(bt_ctx *c, bt_tensor **x) {
    return bt_gelu_tanh(c, x[0]);
}
static bt_tensor *op_tanh(bt_ctx *c, bt_tensor **x) {
    return bt_tanh(c, x[0]);
}
static bt_tensor *op_softmax(bt_ctx *c, bt_tensor **x) {
    return bt_softmax(c, x[0], -1);
}
static bt_tensor *op_log_softmax(bt_ctx *c, bt_tensor **x) {
    return bt_log_softmax(c, x[0], 1);
}
static bt_tensor *op_rms_norm(bt_ctx *c, bt_tensor **x) {
    return bt_rms_norm(c, x[0], x[1], 1e-5);
}
static bt_tensor *op_views(bt_ctx *c, bt_tensor **x) {
    /* (2,3,4) -> transpose, slice, permute, reshape, cat, unsqueeze, expand */
    bt_tensor *t = bt_transpose(c, x[0], 0, 2); /* (4,3,2) */
    bt_tensor *s = bt_slice(c, t, 0, 1, 4, 2);  /* (2,3,2) */
    int64_t perm[3] = {2, 0, 1}, flat[2] = {4, 3}, big[3] = {2, 4, 3};
    bt_tensor *p = bt_reshape(c, bt_permute(c, s, 3, perm), 2, flat); /* (4,3) */
    bt_tensor *e = bt_expand(c, bt_unsqueeze(c, p, 0), 3, big);       /* (2,4,3) */
    bt_tensor *parts[2] = {e, bt_contiguous(c, bt_transpose(c, x[0], 1, 2))};
    return bt_cat(c, parts, 2, 1); /* (2,8,3) */
}
static bt_tensor *op_reductions(bt_ctx *c, bt_tensor **x) {
    bt_tensor *parts[3] = {bt_sum(c, x[0], 1, false), bt_mean(c, x[0], 1, false),
                           bt_max(c, x[0], 1, false)};
    bt_tensor *m = bt_mean_all(c, x[0]);
    return bt_add(c, bt_cat(c, parts, 3, 0), bt_mul(c, m, bt_cumsum(c, bt_cat(c, parts, 3, 0), 0)));
}
static bt_tensor *s_ids(bt_ctx *c, int n, const int64_t *v) {
    int64_t shape[1] = {n};
    return bt_from_host(c, BT_I64, bt_cpu(), 1, shape, v);
}
static bt_tensor *op_embedding(bt_ctx *c, bt_tensor **x) {
    const int64_t ids[5] = {4, 0, 2, 2, 1};
    return bt_embedding(c, x[0], s_ids(c, 5, ids));
}
static bt_tensor *op_gather(bt_ctx *c, bt_tensor **x) {
    const int64_t idx[3] = {2, 0, 4};
    int64_t shape[2] = {3, 1};
    return bt_gather(c, x[0], 1, bt_reshape(c, s_ids(c, 3, idx), 2, shape));
}
static bt_tensor *op_index_select(bt_ctx *c, bt_tensor **x) {
    const int64_t idx[4] = {1, 1, 0, 2};
    return bt_index_select(c, x[0], 0, s_ids(c, 4, idx));
}
static bt_tensor *op_scatter(bt_ctx *c, bt_tensor **x) {
    const int64_t idx[3] = {1, 3, 0};
    int64_t shape[2] = {3, 1};
    return bt_scatter(c, x[0], 1, bt_reshape(c, s_ids(c, 3, idx), 2, shape), x[1]);
}
static bt_tensor *op_cross_entropy(bt_ctx *c, bt_tensor **x) {
    const int64_t tg[3] = {0, 4, 2};
    return bt_cross_entropy(c, x[0], s_ids(c, 3, tg));
}
static bt_tensor *op_rope(bt_ctx *c, bt_tensor **x) {
    const int64_t pos[6] = {0, 1, 2, 5, 6, 7};
    int64_t shape[2] = {2, 3};
    bt_tensor *cs = NULL, *sn = NULL;
    if (bt_rope_tables(c, bt_reshape(c, s_ids(c, 6, pos), 2, shape), 4, 10000.0, NULL, 1.0, BT_F64,
                       &cs, &sn) != BT_OK)
        return NULL;
    return bt_rope(c, x[0], cs, sn);
}
static bt_tensor *op_attention(bt_ctx *c, bt_tensor **x) {
    /* q (1,4,3,2), k v (1,2,3,2): GQA with 2 query heads per kv head; causal mask */
    uint8_t allow[9] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    int64_t shape[4] = {1, 1, 3, 3};
    bt_tensor *m = bt_to_dtype(c, bt_from_host(c, BT_U8, bt_cpu(), 4, shape, allow), BT_BOOL);
    return bt_attention(c, x[0], x[1], x[2], m);
}
static bt_tensor *op_attention_capped(bt_ctx *c, bt_tensor **x) {
    uint8_t allow[9] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    int64_t shape[4] = {1, 1, 3, 3};
    bt_tensor *m = bt_to_dtype(c, bt_from_host(c, BT_U8, bt_cpu(), 4, shape, allow), BT_BOOL);
    return bt_attention_capped(c, x[0], x[1], x[2], m, 0.7, 0.5);
}

static void test_gradients(void) {
    shape_t m23 = {2, {2, 3}}, m34 = {2, {3, 4}}, m43 = {2, {4, 3}}, v3 = {1, {3}};
    shape_t t234 = {3, {2, 3, 4}}, m35 = {2, {3, 5}}, m53 = {2, {5, 3}};
    shape_t two23[2] = {m23, m23}, mm[2] = {m23, m34}, lin[2] = {m23, m43}, rms[2] = {m23, v3};
    shape_t sc[2] = {m35, {2, {3, 1}}};
    check_grad("add", op_add, 2, (shape_t[]){m23, v3}, -1, 1);
    check_grad("sub", op_sub, 2, two23, -1, 1);
    check_grad("mul", op_mul, 2, two23, -1, 1);
    check_grad("div", op_div, 2, two23, 0.5, 2);
    check_grad("matmul", op_matmul, 2, mm, -1, 1);
    check_grad("linear", op_linear, 2, lin, -1, 1);
    check_grad("scalar ops", op_scalars, 1, &m23, -1, 1);
    check_grad("pow", op_pow, 1, &m23, 0.5, 2);
    check_grad("exp", op_exp, 1, &m23, -1, 1);
    check_grad("ln", op_ln, 1, &m23, 0.5, 2);
    check_grad("sqrt", op_sqrt, 1, &m23, 0.5, 2);
    check_grad("rsqrt", op_rsqrt, 1, &m23, 0.5, 2);
    check_grad("abs", op_abs, 1, &m23, 0.2, 1);
    check_grad("clamp", op_clamp, 1, &m23, -0.45, 0.45);
    check_grad("minimum/maximum", op_minmax, 2, two23, -1, 1);
    check_grad("where", op_where, 2, two23, -1, 1);
    check_grad("masked_fill", op_masked_fill, 2, two23, -1, 1);
    check_grad("silu", op_silu, 1, &m23, -2, 2);
    check_grad("gelu_tanh", op_gelu_tanh, 1, &m23, -3, 3);
    check_grad("tanh", op_tanh, 1, &m23, -2, 2);
    check_grad("softmax", op_softmax, 1, &m23, -2, 2);
    check_grad("log_softmax", op_log_softmax, 1, &m23, -2, 2);
    check_grad("rms_norm", op_rms_norm, 2, rms, 0.1, 1);
    check_grad("views", op_views, 1, &t234, -1, 1);
    check_grad("reductions", op_reductions, 1, &m34, -1, 1);
    check_grad("embedding", op_embedding, 1, &m53, -1, 1);
    check_grad("gather", op_gather, 1, &m35, -1, 1);
    check_grad("index_select", op_index_select, 1, &m34, -1, 1);
    check_grad("scatter", op_scatter, 2, sc, -1, 1);
    check_grad("cross_entropy", op_cross_entropy, 1, &m35, -2, 2);
    check_grad("rope", op_rope, 1, (shape_t[]){{4, {2, 2, 3, 4}}}, -1, 1);
    check_grad("attention", op_attention, 3,
               (shape_t[]){{4, {1, 4, 3, 2}}, {4, {1, 2, 3, 2}}, {4, {1, 2, 3, 2}}}, -1, 1);
    check_grad("attention_capped", op_attention_capped, 3,
               (shape_t[]){{4, {1, 4, 3, 2}}, {4, {1, 2, 3, 2}}, {4, {1, 2, 3, 2}}}, -1, 1);
}

/*  torch.optim.AdamW, worked out by hand in plain C for three steps with known gradients. */
static void test_adamw(void) {
    bt_ctx *c = bt_ctx_new();
    double p0[4] = {0.5, -1.0, 2.0, 0.0};
    double g[3][4] = {{0.1, -0.2, 0.3, 0.0}, {-0.5, 0.4, 0.1, 1.0}, {0.2, 0.2, -0.3, 0.5}};
    int64_t shape[1] = {4};
    bt_tensor *p = bt_from_host(c, BT_F64, bt_cpu(), 1, shape, p0);
    bt_set_requires_grad(p, true);
    bt_adamw_config cfg = {0.9, 0.95, 1e-8, 0.1};
    bt_adamw *opt = bt_adamw_new(&p, 1, cfg);
    double ref[4], m[4] = {0}, v[4] = {0}, lr = 0.01;
    memcpy(ref, p0, sizeof ref);
    for (int s = 0; s < 3; s++) {
        bt_ctx *tmp = bt_ctx_new();
        bt_tensor *gt = bt_from_host(tmp, BT_F64, bt_cpu(), 1, shape, g[s]);
        bt_zero_grad(&p, 1);
        CHECK_OK(bt_backward(bt_sum_all(tmp, bt_mul(tmp, p, gt)))); /* dL/dp = g */
        CHECK_OK(bt_adamw_step(opt, lr));
        bt_ctx_destroy(&tmp);
        for (int i = 0; i < 4; i++) {
            ref[i] -= lr * cfg.weight_decay * ref[i];
            m[i] = cfg.beta1 * m[i] + (1 - cfg.beta1) * g[s][i];
            v[i] = cfg.beta2 * v[i] + (1 - cfg.beta2) * g[s][i] * g[s][i];
            double mhat = m[i] / (1 - pow(cfg.beta1, s + 1));
            double vhat = v[i] / (1 - pow(cfg.beta2, s + 1));
            ref[i] -= lr * mhat / (sqrt(vhat) + cfg.eps);
        }
    }
    double got[4];
    CHECK_OK(bt_to_host(p, got, sizeof got));
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(got[i], ref[i], 1e-12);
    CHECK(bt_adamw_steps(opt) == 3);
    bt_tensor *em = NULL, *ev = NULL;
    CHECK_OK(bt_adamw_moments(opt, 0, &em, &ev));
    double mg[4];
    CHECK_OK(bt_to_host(em, mg, sizeof mg));
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(mg[i], m[i], 1e-15);
    CHECK(bt_adamw_moments(opt, 1, &em, &ev) == BT_ERANGE);
    bt_adamw_destroy(&opt);
    CHECK(opt == NULL);
    bt_adamw_destroy(&opt); /* idempotent */
    bt_ctx_destroy(&c);
}

static void test_clip(void) {
    bt_ctx *c = bt_ctx_new();
    double a0[2] = {1, 1}, b0[1] = {1};
    int64_t s2[1] = {2}, s1[1] = {1};
    bt_tensor *p[2] = {bt_from_host(c, BT_F64, bt_cpu(), 1, s2, a0),
                       bt_from_host(c, BT_F64, bt_cpu(), 1, s1, b0)};
    bt_set_requires_grad(p[0], true);
    bt_set_requires_grad(p[1], true);
    double ga[2] = {3, 0}, gb[1] = {4}; /* global norm 5 */
    bt_tensor *l =
        bt_add(c, bt_sum_all(c, bt_mul(c, p[0], bt_from_host(c, BT_F64, bt_cpu(), 1, s2, ga))),
               bt_sum_all(c, bt_mul(c, p[1], bt_from_host(c, BT_F64, bt_cpu(), 1, s1, gb))));
    CHECK_OK(bt_backward(l));
    double norm = 0;
    CHECK_OK(bt_clip_grad_norm(p, 2, 1.0, &norm));
    CHECK_NEAR(norm, 5.0, 1e-12);
    double out[2];
    CHECK_OK(bt_to_host(bt_grad(c, p[0]), out, sizeof out));
    CHECK_NEAR(out[0], 3.0 / (5.0 + 1e-6), 1e-12);
    CHECK_OK(bt_clip_grad_norm(p, 2, 10.0, &norm)); /* below the bound: unchanged */
    CHECK_NEAR(norm, 5.0 / (5.0 + 1e-6), 1e-9);
    bt_ctx_destroy(&c);
}

static void test_generator(void) {
    bt_ctx *c = bt_ctx_new();
    bt_gen *g = bt_gen_new(1234, bt_cpu());
    int64_t shape[1] = {16};
    size_t n = bt_gen_state_size(g);
    CHECK(n > 0);
    void *state = malloc(n);
    CHECK_OK(bt_gen_get_state(g, state, n));
    double a[16], b[16], d[16];
    CHECK_OK(bt_to_host(bt_randn(c, g, BT_F64, 1, shape), a, sizeof a));
    CHECK_OK(bt_gen_set_state(g, state, n));
    CHECK_OK(bt_to_host(bt_randn(c, g, BT_F64, 1, shape), b, sizeof b));
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* a fresh generator with the same seed gives the same draws; another seed does not */
    bt_gen *same = bt_gen_new(1234, bt_cpu()), *other = bt_gen_new(1235, bt_cpu());
    CHECK_OK(bt_to_host(bt_randn(c, same, BT_F64, 1, shape), d, sizeof d));
    CHECK(memcmp(a, d, sizeof a) == 0);
    CHECK_OK(bt_to_host(bt_randn(c, other, BT_F64, 1, shape), d, sizeof d));
    CHECK(memcmp(a, d, sizeof a) != 0);
    /* multinomial draws are reproducible after a restore too */
    double w[4] = {0.1, 0.2, 0.3, 0.4};
    int64_t ws[2] = {1, 4};
    bt_tensor *probs =
        bt_expand(c, bt_from_host(c, BT_F64, bt_cpu(), 2, ws, w), 2, (int64_t[]){64, 4});
    int64_t s1[64], s2[64];
    CHECK_OK(bt_gen_get_state(g, state, n));
    CHECK_OK(bt_to_host(bt_multinomial(c, g, bt_contiguous(c, probs)), s1, sizeof s1));
    CHECK_OK(bt_gen_set_state(g, state, n));
    CHECK_OK(bt_to_host(bt_multinomial(c, g, bt_contiguous(c, probs)), s2, sizeof s2));
    CHECK(memcmp(s1, s2, sizeof s1) == 0);
    CHECK(bt_gen_set_state(g, state, 3) != BT_OK); /* wrong size: an error, not a crash */
    free(state);
    bt_gen_destroy(&g);
    bt_gen_destroy(&same);
    bt_gen_destroy(&other);
    CHECK(g == NULL);
    bt_ctx_destroy(&c);
}

/*  Element-wise comparisons and boolean ops, broadcasting as the model's masks use them: a column
    of segment ids against a row of them gives the block structure, checked element by element. */
static void test_comparisons(void) {
    bt_ctx *c = bt_ctx_new();
    const int64_t seg[4] = {1, 1, 3, 0}, col[2] = {4, 1}, row[2] = {1, 4};
    bt_tensor *q = bt_from_host(c, BT_I64, bt_cpu(), 2, col, seg);
    bt_tensor *k = bt_from_host(c, BT_I64, bt_cpu(), 2, row, seg);
    bt_tensor *same = bt_eq(c, q, k);                                  /* (4, 4) */
    bt_tensor *either = bt_logical_or(c, same, bt_eq_scalar(c, k, 0)); /* or the key is 0 */
    bool s[16], e[16];
    CHECK_OK(bt_to_host(same, s, sizeof s));
    CHECK_OK(bt_to_host(either, e, sizeof e));
    CHECK(bt_dtype_of(same) == BT_BOOL && bt_dtype_of(either) == BT_BOOL);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            CHECK(s[i * 4 + j] == (seg[i] == seg[j]));
            CHECK(e[i * 4 + j] == (seg[i] == seg[j] || seg[j] == 0));
        }
    bt_ctx_destroy(&c);
}

/*  bt_gelu_tanh against its closed form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in
    float64, from -6 to 6: to 1e-15 in float64, 1e-6 in float32; it differs from the exact gelu
    0.5 x (1 + erf(x / sqrt(2))) (by 2e-4 near |x| = 2), so a switch to the exact one shows. */
static void test_gelu_tanh(void) {
    enum { N = 49 };
    double x[N], want[N], exact_gap = 0;
    for (int i = 0; i < N; i++) {
        x[i] = -6.0 + 12.0 * i / (N - 1);
        want[i] = 0.5 * x[i] *
                  (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x[i] + 0.044715 * pow(x[i], 3))));
        exact_gap = fmax(exact_gap, fabs(want[i] - 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)))));
    }
    bt_ctx *c = bt_ctx_new();
    const int64_t n = N;
    bt_tensor *t = bt_from_host(c, BT_F64, bt_cpu(), 1, &n, x);
    double got[N], worst64 = 0, worst32 = 0;
    float got32[N];
    CHECK_OK(bt_to_host(bt_gelu_tanh(c, t), got, sizeof got));
    CHECK_OK(bt_to_host(bt_gelu_tanh(c, bt_to_dtype(c, t, BT_F32)), got32, sizeof got32));
    for (int i = 0; i < N; i++) {
        worst64 = fmax(worst64, fabs(got[i] - want[i]));
        worst32 = fmax(worst32, fabs(got32[i] - want[i]));
    }
    printf("gelu_tanh: max |diff| %.3g (float64), %.3g (float32); %.3g from exact gelu\n", worst64,
           worst32, exact_gap);
    CHECK(worst64 < 1e-15 && worst32 < 1e-6 && exact_gap > 1e-4);
    bt_ctx_destroy(&c);
}

/*  bt_attention_capped against plain C in float64: two query heads sharing one key/value head,
    three causal positions, head width 2, scores scaled by 0.7 and capped to 0.5 tanh(s / 0.5)
    before the mask; to 1e-14.  Scaled by 1/sqrt(2) and uncapped it is bt_attention. */
static void test_attention_capped(void) {
    enum { H = 2, T = 3, D = 2 };
    const double q[H * T * D] = {0.9, -1.3, 0.4, 2.0, -0.7, 0.1, 1.5, 0.6, -1.1, -0.4, 0.3, 1.8};
    const double k[T * D] = {1.2, -0.5, -0.8, 0.9, 0.2, 1.4};
    const double v[T * D] = {0.5, 1.0, -1.5, 0.25, 2.0, -0.75};
    double want[H * T * D], got[H * T * D], plain[H * T * D], fused[H * T * D];
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            double w[T], sum = 0;
            for (int j = 0; j <= i; j++) {
                double sc =
                    0.7 * (q[(h * T + i) * D] * k[j * D] + q[(h * T + i) * D + 1] * k[j * D + 1]);
                w[j] = exp(0.5 * tanh(sc / 0.5));
                sum += w[j];
            }
            for (int d = 0; d < D; d++) {
                want[(h * T + i) * D + d] = 0;
                for (int j = 0; j <= i; j++)
                    want[(h * T + i) * D + d] += w[j] / sum * v[j * D + d];
            }
        }
    bt_ctx *c = bt_ctx_new();
    const int64_t qs[4] = {1, H, T, D}, ks[4] = {1, 1, T, D}, ms[4] = {1, 1, T, T};
    const uint8_t allow[T * T] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    bt_tensor *tq = bt_from_host(c, BT_F64, bt_cpu(), 4, qs, q);
    bt_tensor *tk = bt_from_host(c, BT_F64, bt_cpu(), 4, ks, k);
    bt_tensor *tv = bt_from_host(c, BT_F64, bt_cpu(), 4, ks, v);
    bt_tensor *m = bt_to_dtype(c, bt_from_host(c, BT_U8, bt_cpu(), 4, ms, allow), BT_BOOL);
    CHECK_OK(bt_to_host(bt_attention_capped(c, tq, tk, tv, m, 0.7, 0.5), got, sizeof got));
    CHECK_OK(
        bt_to_host(bt_attention_capped(c, tq, tk, tv, m, 1 / sqrt(2.0), 0), plain, sizeof plain));
    CHECK_OK(bt_to_host(bt_attention(c, tq, tk, tv, m), fused, sizeof fused));
    double worst = 0, same = 0;
    for (int i = 0; i < H * T * D; i++) {
        worst = fmax(worst, fabs(got[i] - want[i]));
        same = fmax(same, fabs(plain[i] - fused[i]));
    }
    printf("attention_capped: max |diff| %.3g against plain C, %.3g uncapped against "
           "bt_attention\n",
           worst, same);
    CHECK(worst < 1e-14 && same < 1e-14);
    bt_ctx_destroy(&c);
}

static void test_errors_and_arenas(void) {
    bt_ctx *c = bt_ctx_new();
    int64_t sa[2] = {2, 3}, sb[2] = {4, 5};
    bt_tensor *a = bt_zeros(c, BT_F32, bt_cpu(), 2, sa), *b = bt_zeros(c, BT_F32, bt_cpu(), 2, sb);
    bt_clear_error();
    bt_tensor *bad = bt_matmul(c, a, b);
    CHECK(bad == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "bt_matmul");
    CHECK_STR_CONTAINS(bt_last_error(), "cannot be multiplied");
    /* the first error survives a chain of ops on the NULL result */
    CHECK(bt_exp(c, bt_add(c, bad, a)) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "cannot be multiplied");
    float buf[3];
    CHECK(bt_to_host(a, buf, sizeof buf) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "needs 24");
    int64_t neg[1] = {-3};
    CHECK(bt_zeros(c, BT_F32, bt_cpu(), 1, neg) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "negative size");
    bt_device d;
    CHECK(bt_device_parse("gpu0", &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "\"gpu0\"");
    CHECK_OK(bt_device_parse("cuda:3", &d));
    CHECK(d.type == BT_DEVICE_CUDA && d.index == 3);
    char name[16];
    bt_device_format(d, name, sizeof name);
    CHECK(strcmp(name, "cuda:3") == 0);

    /* arenas: every tensor of a step goes with one reset */
    CHECK(bt_ctx_size(c) >= 2);
    bt_ctx_reset(c);
    CHECK(bt_ctx_size(c) == 0);

    /* no-grad scope: results do not require grad; the previous mode comes back */
    bt_tensor *w = bt_zeros(c, BT_F32, bt_cpu(), 2, sa);
    bt_set_requires_grad(w, true);
    bool prev = bt_set_grad_enabled(false);
    CHECK(prev == true);
    CHECK(!bt_requires_grad(bt_mul_scalar(c, w, 2.0)));
    bt_set_grad_enabled(prev);
    CHECK(bt_requires_grad(bt_mul_scalar(c, w, 2.0)));
    /* a raw pointer reads the data; a non-contiguous view has none */
    float *raw = bt_data_ptr(w);
    CHECK(raw != NULL && raw[0] == 0.0f);
    CHECK(bt_data_ptr(bt_transpose(c, w, 0, 1)) == NULL);
    bt_ctx_destroy(&c);
    CHECK(c == NULL);
    bt_ctx_destroy(&c);
}

/*  x rounded to bfloat16 (8 significant bits, round to nearest even) on the host: an independent
    reference for what autocast computes. */
static float s_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/*  Host copy of a (2-D) tensor as floats. */
static void s_floats(bt_ctx *c, bt_tensor *t, float *out, size_t n) {
    CHECK_OK(bt_to_host(bt_to_dtype(c, t, BT_F32), out, n * sizeof *out));
}

/*  An autocast scope: x W^T in bfloat16, as the product of the inputs rounded to bfloat16,
    accumulated in (at least) float32 and rounded to bfloat16; other ops keep their dtypes; scopes
    nest; a weight changed between two scopes is seen by the second (the casts a scope cached go
    with it). */
static void test_autocast(void) {
    bt_ctx *c = bt_ctx_new();
    enum { R = 4, K = 16, N = 3 };
    float x[R * K], w[N * K], ref[R * N], exact[R * N], y[R * N], y2[R * N];
    for (int i = 0; i < R * K; i++)
        x[i] = (float)s_uniform(-2, 2);
    for (int i = 0; i < N * K; i++)
        w[i] = (float)s_uniform(-1, 1);
    for (int r = 0; r < R; r++)
        for (int n = 0; n < N; n++) {
            double acc = 0, acc32 = 0;
            for (int k = 0; k < K; k++) {
                acc += (double)s_bf16(x[r * K + k]) * (double)s_bf16(w[n * K + k]);
                acc32 += (double)x[r * K + k] * (double)w[n * K + k];
            }
            ref[r * N + n] = s_bf16((float)acc);
            exact[r * N + n] = (float)acc32;
        }
    const int64_t sx[2] = {R, K}, sw[2] = {N, K};
    bt_tensor *X = bt_from_host(c, BT_F32, bt_cpu(), 2, sx, x);
    bt_tensor *W = bt_from_host(c, BT_F32, bt_cpu(), 2, sw, w);
    CHECK_OK(bt_set_requires_grad(W, true)); /* a weight: autocast caches its cast */

    bt_autocast outer, inner;
    CHECK_OK(bt_autocast_enter(bt_cpu(), BT_BF16, &outer));
    CHECK(outer.active);
    bt_tensor *Y = bt_linear(c, X, W);
    CHECK(Y && bt_dtype_of(Y) == BT_BF16);
    CHECK(bt_dtype_of(W) == BT_F32);                       /* the weight itself is untouched */
    CHECK(bt_dtype_of(bt_add(c, X, X)) == BT_F32);         /* not a product: its own dtype */
    CHECK_OK(bt_autocast_enter(bt_cpu(), BT_F32, &inner)); /* an empty scope changes nothing */
    CHECK(!inner.active && bt_dtype_of(bt_matmul(c, X, bt_transpose(c, W, 0, 1))) == BT_BF16);
    bt_autocast_exit(&inner);
    CHECK_OK(bt_autocast_enter(bt_cpu(), BT_BF16, &inner));
    bt_autocast_exit(&inner);
    CHECK(bt_dtype_of(bt_linear(c, X, W)) == BT_BF16); /* the outer scope is still on */
    bt_autocast_exit(&outer);
    CHECK(!outer.active);
    CHECK(bt_dtype_of(bt_linear(c, X, W)) == BT_F32);

    s_floats(c, Y, y, R * N);
    double worst = 0, moved = 0;
    for (int i = 0; i < R * N; i++) {
        /* one bfloat16 step (2^-7 relative) of slack: the two accumulation orders may round the
           last bit differently */
        worst = fmax(worst, fabs(y[i] - ref[i]) / fmax(fabs(ref[i]), 1e-3));
        moved = fmax(moved, fabs(y[i] - exact[i]) / fmax(fabs(exact[i]), 1e-3));
    }
    CHECK(worst <= 0x1p-7);
    CHECK(moved > 1e-4); /* far above float32 rounding: the product really ran in bfloat16 */

    /* the weight doubled between two scopes: the second sees it */
    bool grad = bt_set_grad_enabled(false);
    CHECK_OK(bt_copy_(W, bt_mul_scalar(c, W, 2.0)));
    bt_set_grad_enabled(grad);
    CHECK_OK(bt_autocast_enter(bt_cpu(), BT_BF16, &outer));
    s_floats(c, bt_linear(c, X, W), y2, R * N);
    bt_autocast_exit(&outer);
    for (int i = 0; i < R * N; i++)
        CHECK_NEAR(y2[i], 2 * y[i], 0x1p-7 * fabs(2 * y[i]) + 1e-6);

    CHECK(bt_autocast_enter(bt_cpu(), BT_I64, &outer) == BT_EINVAL && !outer.active);
    CHECK_STR_CONTAINS(bt_last_error(), "BF16");
    bt_autocast_exit(&outer); /* leaving a scope never entered does nothing */
    bt_ctx_destroy(&c);
}

/*  An allocation the machine cannot serve (2^62 bytes: beyond any address space) is BT_ENOMEM
    with the size asked for, not a libtorch error; the device memory functions are no-ops on the
    CPU. */
static void test_out_of_memory(void) {
    bt_ctx *c = bt_ctx_new();
    const int64_t huge[2] = {1LL << 30, 1LL << 30};
    bt_clear_error();
    CHECK(bt_zeros(c, BT_F32, bt_cpu(), 2, huge) == NULL);
    CHECK(bt_last_status() == BT_ENOMEM);
    CHECK_STR_CONTAINS(bt_last_error(),
                       "bt_zeros: out of memory (tried to allocate 4611686018427387904 bytes)");
    /* a chain of ops on the failed result keeps that status and its message */
    CHECK(bt_exp(c, bt_zeros(c, BT_F32, bt_cpu(), 2, huge)) == NULL);
    CHECK(bt_last_status() == BT_ENOMEM);
    bt_clear_error();
    CHECK(bt_last_status() == BT_OK);
    size_t allocated = 1, peak = 1, reserved = 1;
    CHECK_OK(bt_device_memory(bt_cpu(), &allocated, &peak, &reserved));
    CHECK(allocated == 0 && peak == 0 && reserved == 0);
    bt_device_release_cache(bt_cpu());
    bt_ctx_destroy(&c);
}

/*  bt_set_num_threads sizes OpenBLAS's pool too (a worker with run.threads 1 must not run its
    GEMMs on every core); checked through OpenBLAS's own getter where that is the BLAS. */
static void test_threads(void) {
    int (*get)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    bt_set_num_threads(2);
    CHECK(bt_get_num_threads() == 2);
    if (get)
        CHECK(get() == 2);
    bt_set_num_threads(1);
    CHECK(bt_get_num_threads() == 1);
    if (get)
        CHECK(get() == 1);
    else
        fprintf(stderr, "test_threads: the BLAS is not OpenBLAS; its pool is not checked\n");
}

int main(void) {
    test_threads();
    bt_set_num_threads(1);
    test_gradients();
    test_adamw();
    test_clip();
    test_generator();
    test_comparisons();
    test_gelu_tanh();
    test_attention_capped();
    test_errors_and_arenas();
    test_autocast();
    test_out_of_memory();
    return check_exit();
}
