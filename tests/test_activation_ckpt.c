/*  test_activation_ckpt.c — activation checkpointing (grpo.activation_checkpointing "layer"):
    bt_checkpoint recomputes its function in backward and gives a plain pass's gradients, and a
    small Llama's token log-prob loss has every parameter's gradient equal with checkpointing on
    and off, on padded and on packed rows (the trainer's SFT and GRPO paths), and with its weights
    held away and gathered a layer at a time (bt_model_set_units: ZeRO-3's seam). */
#include "baton/model.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*  fn of the bt_checkpoint test: y = silu(x w), counting its runs. */
typedef struct s_lin {
    bt_tensor *w; /* (4, 4) */
    int *runs;
} s_lin;

static bt_tensor *s_silu_linear(bt_ctx *ctx, bt_tensor *x, void *user) {
    const s_lin *c = user;
    (*c->runs)++;
    return bt_silu(ctx, bt_matmul(ctx, x, c->w));
}

/*  The largest |a - b| over the largest |b|, of two F32 tensors of equal size. */
static double s_rel_max_diff(bt_tensor *a, bt_tensor *b) {
    size_t n = (size_t)bt_numel(a);
    CHECK(bt_numel(b) == (int64_t)n);
    float *ha = malloc(n * sizeof *ha), *hb = malloc(n * sizeof *hb);
    CHECK_OK(bt_to_host(a, ha, n * sizeof *ha));
    CHECK_OK(bt_to_host(b, hb, n * sizeof *hb));
    double diff = 0, top = 0;
    for (size_t k = 0; k < n; k++) {
        diff = fmax(diff, fabs((double)ha[k] - hb[k]));
        top = fmax(top, fabs((double)hb[k]));
    }
    free(ha);
    free(hb);
    CHECK(top > 0);
    return diff / top;
}

/*  bt_checkpoint runs fn once forward and once more in backward (once only without grad), and
    the gradients of x and of the parameter w equal a plain pass's. */
static void test_checkpoint_call(void) {
    bt_ctx *ctx = bt_ctx_new();
    bt_gen *gen = bt_gen_new(3, bt_cpu());
    const int64_t shape[] = {4, 4};
    bt_tensor *w = bt_randn(ctx, gen, BT_F32, 2, shape), *x0 = bt_randn(ctx, gen, BT_F32, 2, shape);
    bt_tensor *grad_w[2], *grad_x[2];
    int runs = 0;
    for (int ck = 0; ck < 2; ck++) {
        bt_tensor *x = bt_clone(ctx, x0);
        CHECK_OK(bt_set_requires_grad(x, true));
        CHECK_OK(bt_set_requires_grad(w, true));
        const s_lin c = {.w = w, .runs = &runs};
        bt_tensor *y = ck ? bt_checkpoint(ctx, s_silu_linear, &c, sizeof c, x)
                          : s_silu_linear(ctx, x, (void *)&c);
        CHECK(runs == ck + 1); /* forward: once each */
        CHECK_OK(bt_backward(bt_sum_all(ctx, bt_mul(ctx, y, y))));
        CHECK(runs == (ck ? 3 : 1)); /* the checkpointed pass ran again in backward */
        grad_w[ck] = bt_clone(ctx, bt_grad(ctx, w));
        grad_x[ck] = bt_grad(ctx, x);
        bt_zero_grad(&w, 1);
    }
    CHECK(s_rel_max_diff(grad_w[1], grad_w[0]) < 1e-6);
    CHECK(s_rel_max_diff(grad_x[1], grad_x[0]) < 1e-6);
    bool grad = bt_set_grad_enabled(false);
    runs = 0;
    const s_lin c = {.w = w, .runs = &runs};
    CHECK(bt_checkpoint(ctx, s_silu_linear, &c, sizeof c, x0) != NULL && runs == 1);
    bt_set_grad_enabled(grad);
    bt_gen_destroy(&gen);
    bt_ctx_destroy(&ctx);
}

/*  The hooks' closure: which call, where to log, the call's weight and its plain gradient. */
typedef struct s_hooked {
    s_lin lin;
    int call;
    char *log; /* events appended: 'F' or 'B', then the call */
    bt_tensor *want_grad;
    double *grad_diff; /* the largest relative difference seen at after_backward */
    bool fail;
} s_hooked;

static bt_tensor *s_hooked_fn(bt_ctx *ctx, bt_tensor *x, void *user) {
    return s_silu_linear(ctx, x, &((s_hooked *)user)->lin);
}

static bt_status s_after_forward(void *user) {
    const s_hooked *h = user;
    size_t n = strlen(h->log);
    h->log[n] = 'F';
    h->log[n + 1] = (char)('0' + h->call);
    return BT_OK;
}

/*  The call's weight has its whole gradient by now (it is used in this call alone). */
static bt_status s_after_backward(void *user) {
    const s_hooked *h = user;
    size_t n = strlen(h->log);
    h->log[n] = 'B';
    h->log[n + 1] = (char)('0' + h->call);
    bt_ctx *tmp = bt_ctx_new();
    *h->grad_diff = fmax(*h->grad_diff, s_rel_max_diff(bt_grad(tmp, h->lin.w), h->want_grad));
    bt_ctx_destroy(&tmp);
    return h->fail ? bt_fail(BT_EIO, "hook %d refused", h->call) : BT_OK;
}

/*  Two checkpointed calls in a row: after_forward runs after each forward in order, and
    after_backward in backward's order (the second call first), each seeing its weight's complete
    gradient, equal to a plain pass's; a failing after_backward fails the backward pass. */
static void test_checkpoint_hooks(void) {
    bt_ctx *ctx = bt_ctx_new();
    bt_gen *gen = bt_gen_new(5, bt_cpu());
    const int64_t shape[] = {4, 4};
    bt_tensor *w[2] = {bt_randn(ctx, gen, BT_F32, 2, shape), bt_randn(ctx, gen, BT_F32, 2, shape)};
    bt_tensor *x0 = bt_randn(ctx, gen, BT_F32, 2, shape), *plain[2];
    int runs = 0;
    for (int k = 0; k < 2; k++)
        CHECK_OK(bt_set_requires_grad(w[k], true));
    bt_tensor *x = bt_clone(ctx, x0); /* the plain pass: the gradients to expect */
    CHECK_OK(bt_set_requires_grad(x, true));
    for (int k = 0; k < 2; k++)
        x = s_silu_linear(ctx, x, &(s_lin){.w = w[k], .runs = &runs});
    CHECK_OK(bt_backward(bt_sum_all(ctx, bt_mul(ctx, x, x))));
    for (int k = 0; k < 2; k++)
        plain[k] = bt_clone(ctx, bt_grad(ctx, w[k]));
    for (int fail = 0; fail < 2; fail++) {
        bt_zero_grad(w, 2);
        char log[16] = {0};
        double diff = 0;
        x = bt_clone(ctx, x0);
        CHECK_OK(bt_set_requires_grad(x, true));
        for (int k = 0; k < 2; k++) {
            const s_hooked h = {.lin = {.w = w[k], .runs = &runs},
                                .call = k,
                                .log = log,
                                .want_grad = plain[k],
                                .grad_diff = &diff,
                                .fail = fail && k == 1};
            x = bt_checkpoint_hooked(ctx, s_hooked_fn, &h, sizeof h, x,
                                     (bt_checkpoint_hooks){s_after_forward, s_after_backward});
            CHECK(x != NULL);
        }
        CHECK(strcmp(log, "F0F1") == 0);
        bt_status st = bt_backward(bt_sum_all(ctx, bt_mul(ctx, x, x)));
        if (fail) {
            CHECK(st != BT_OK && strcmp(log, "F0F1B1") == 0);
            CHECK_STR_CONTAINS(bt_last_error(), "hook 1 refused");
        } else {
            CHECK_OK(st);
            CHECK(strcmp(log, "F0F1B1B0") == 0);
            CHECK(diff < 1e-6);
        }
    }
    bt_gen_destroy(&gen);
    bt_ctx_destroy(&ctx);
}

enum { B = 3, T = 12 };

/*  A small Llama: hidden 32, 3 layers, 4 heads, 2 key/value heads. */
static bt_model *s_model(bool checkpoint) {
    bt_model_config c;
    bt_model_config_init(&c);
    c.hidden_size = 32;
    c.intermediate_size = 88;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 64;
    bt_model *m = bt_model_new(&c, bt_cpu(), 7);
    CHECK(m != NULL);
    bt_model_set_activation_checkpointing(m, checkpoint);
    return m;
}

/*  Units (bt_model_set_units) as a sharded trainer would run them, from resident copies: a
    released unit's parameters point at an empty tensor, a gathered one's at its copy; the
    gradients a release with grads finds are collected and dropped, as a reduce-scatter would. */
typedef struct s_units {
    bt_model *m;
    bt_ctx *ctx;
    bt_tensor **copy, **grads; /* (n_params); grads NULL until collected */
    bt_tensor *empty;
    bool gathered[8];
    int layers_now, layers_max, gathers;
} s_units;

static bt_status s_units_gather(void *user, int unit) {
    s_units *u = user;
    if (u->gathered[unit])
        return BT_OK;
    for (int i = 0; i < bt_model_num_params(u->m); i++)
        if (bt_model_param_unit(u->m, i) == unit)
            BT_TRY(bt_set_data(bt_model_params(u->m)[i], u->copy[i]));
    u->gathered[unit] = true;
    u->gathers++;
    if (unit < 3)
        u->layers_max = u->layers_now + 1 > u->layers_max ? u->layers_now + 1 : u->layers_max;
    u->layers_now += unit < 3;
    return BT_OK;
}

static bt_status s_units_release(void *user, int unit, bool grads) {
    s_units *u = user;
    for (int i = 0; i < bt_model_num_params(u->m); i++) {
        bt_tensor *p = bt_model_params(u->m)[i];
        if (bt_model_param_unit(u->m, i) != unit)
            continue;
        if (grads) {
            bt_tensor *g = bt_clone(u->ctx, bt_grad(u->ctx, p));
            u->grads[i] = u->grads[i] ? bt_add(u->ctx, u->grads[i], g) : g;
            bt_zero_grad(&p, 1);
        }
        BT_TRY(bt_set_data(p, u->empty));
    }
    u->layers_now -= unit < 3 && u->gathered[unit];
    u->gathered[unit] = false;
    return BT_OK;
}

static void s_units_init(s_units *u, bt_model *m, bt_model_units *cb) {
    int n = bt_model_num_params(m);
    *u = (s_units){.m = m, .ctx = bt_ctx_new()};
    u->copy = calloc((size_t)n, sizeof *u->copy);
    u->grads = calloc((size_t)n, sizeof *u->grads);
    u->empty = bt_zeros(u->ctx, BT_F32, bt_cpu(), 1, (const int64_t[]){0});
    for (int i = 0; i < n; i++)
        u->copy[i] = bt_clone(u->ctx, bt_detach(u->ctx, bt_model_params(m)[i]));
    for (int unit = 0; unit <= 3; unit++) { /* every weight away from the model */
        u->gathered[unit] = true;
        u->layers_now += unit < 3;
        CHECK_OK(s_units_release(u, unit, false));
    }
    *cb = (bt_model_units){s_units_gather, s_units_release, u};
    bt_model_set_units(m, cb);
}

static void s_units_release_all(s_units *u) {
    free(u->copy);
    free(u->grads);
    bt_ctx_destroy(&u->ctx);
}

/*  Every parameter's gradient of sum(w_t * logp_t) over B rows of T tokens, left-padded (packed
    false: lengths 12, 7, 4) or packed (two segments a row, positions restarting), with
    checkpointing on and off: equal to 1e-6 (largest difference over largest value). */
static void s_model_grads_agree(bool packed) {
    bt_ctx *ctx = bt_ctx_new();
    int64_t ids[B * T], mask[B * T], seg[B * T], pos[B * T];
    const int64_t lens[B] = {12, 7, 4};
    float weight[B * (T - 1)];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int64_t i = b * T + t, cut = 5 + b;
            ids[i] = (b * 37 + t * 11) % 250;
            mask[i] = t >= T - lens[b];
            seg[i] = t < cut ? 1 : 2;
            pos[i] = t < cut ? t : t - cut;
            if (t < T - 1)
                weight[b * (T - 1) + t] = (float)((t % 3) - 1) * 0.5f + 0.1f * (float)b;
        }
    const int64_t shape[] = {B, T}, wshape[] = {B, T - 1};
    bt_model *m[3] = {s_model(false), s_model(true), s_model(false)};
    s_units units;
    bt_model_units cb;
    s_units_init(&units, m[2], &cb);
    double worst = 0, worst_units = 0;
    for (int k = 0; k < 3; k++) {
        bt_tensor *tid = bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ids);
        bt_tensor *logp =
            packed ? bt_model_token_logprobs_packed(
                         m[k], ctx, tid, bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, seg),
                         bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, pos), 1.0, NULL)
                   : bt_model_token_logprobs(m[k], ctx, tid,
                                             bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, mask),
                                             1.0, NULL);
        bt_tensor *w = bt_from_host(ctx, BT_F32, bt_cpu(), 2, wshape, weight);
        CHECK_OK(bt_backward(bt_sum_all(ctx, bt_mul(ctx, logp, w))));
    }
    CHECK(units.gathered[3] && !units.gathered[0] && !units.gathered[1] && !units.gathered[2]);
    CHECK(units.layers_max == 1 && units.gathers == 1 + 2 * 3); /* each layer: forward, backward */
    CHECK_OK(s_units_release(&units, 3, true)); /* the caller's part: the rest's gradients */
    for (int i = 0; i < bt_model_num_params(m[0]); i++) {
        bt_tensor *plain = bt_grad(ctx, bt_model_params(m[0])[i]);
        bt_tensor *ckpt = bt_grad(ctx, bt_model_params(m[1])[i]);
        worst = fmax(worst, s_rel_max_diff(ckpt, plain));
        CHECK(units.grads[i] != NULL);
        if (units.grads[i])
            worst_units = fmax(worst_units, s_rel_max_diff(units.grads[i], plain));
        CHECK(bt_numel(bt_model_params(m[2])[i]) == 0); /* every weight released again */
    }
    printf("%s rows: gradients with checkpointing differ by %.3g at most, with units gathered a "
           "layer at a time by %.3g (max abs diff / max abs, %d parameters)\n",
           packed ? "packed" : "padded", worst, worst_units, bt_model_num_params(m[0]));
    CHECK(worst < 1e-6 && worst_units < 1e-6);
    for (int k = 0; k < 3; k++)
        bt_model_destroy(&m[k]);
    s_units_release_all(&units);
    bt_ctx_destroy(&ctx);
}

int main(void) {
    test_checkpoint_call();
    test_checkpoint_hooks();
    s_model_grads_agree(false);
    s_model_grads_agree(true);
    return check_exit();
}
