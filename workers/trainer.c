/*  trainer.c — GRPO and SFT updates of a policy from batches of completions, with exact gradient
    accumulation over micro-batches. */
#include "baton/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bt_trainer {
    bt_trainer_config cfg;
    bt_model *policy;
    bt_model *reference; /* NULL unless cfg.reference, and under LoRA */
    bool base_reference; /* cfg.reference under LoRA: the policy with its adapters off */
    bt_adamw *opt;
    int64_t version;
    bt_group *group; /* borrowed; NULL: a single trainer */
    /* cfg.shard != BT_SHARD_NONE: opt is NULL and this rank's shard of the flat parameters is
       stepped instead (bt_group_reduce_scatter_grads: the layout) */
    struct {
        int rank, world;   /* the layout's: a state formed for another group is not used */
        int64_t size;      /* elements per shard: ceil(parameters' elements / world) */
        bt_ctx *ctx;       /* flat, master, grad */
        bt_tensor *flat;   /* (world x size): the weights' storage (bt_flatten_into) */
        bt_tensor *master; /* (size): this rank's slice of flat, the tensor AdamW steps */
        bt_tensor *grad;   /* (size): BT_SHARD_GRADIENTS, the reduce-scattered gradient sum */
        bt_adamw *opt;     /* over master alone */
        /* BT_SHARD_PARAMETERS: master is a tensor of its own and the weights are gathered per
           unit (bt_model_set_units) from the ranks owning its ranges; between jobs rank 0 holds
           them all (it publishes and snapshots them), the others none */
        struct s_unit *units; /* (n_units): the model's layers, then the rest */
        int n_units;
        bt_model_units cb;
        bt_tensor *empty; /* what a released parameter points at */
    } sh;
    int64_t (*shape)[2]; /* (n_params): each parameter's shape, kept while it is released */
    int *ndim;
};

/*  A unit's parameters: one or two runs of consecutive parameters (the rest: the embedding at
    the start, the final norm and head at the end), each a range of the flat parameters. */
typedef struct s_unit {
    int first[2], count[2]; /* parameters [first, first + count) of each run; count 0: none */
    int64_t lo[2], len[2];  /* each run's range in the flat parameters */
    bt_ctx *views;          /* while gathered: the runs' buffers, the parameters' views */
    bool gathered;
} s_unit;

static int64_t s_param_elements(const bt_model *m) {
    int64_t total = 0;
    for (int i = 0; i < bt_model_num_params(m); i++)
        total += bt_numel(bt_model_params(m)[i]);
    return total;
}

static void s_shard_release(bt_trainer_t *self) {
    for (int u = 0; u < self->sh.n_units; u++)
        bt_ctx_destroy(&self->sh.units[u].views);
    free(self->sh.units);
    self->sh.units = NULL;
    self->sh.n_units = 0;
    self->sh.empty = NULL;
    bt_model_set_units(self->policy, NULL);
    bt_adamw_destroy(&self->sh.opt);
    bt_ctx_destroy(&self->sh.ctx);
    self->sh.flat = self->sh.master = self->sh.grad = NULL;
    self->sh.world = 0;
}

static bt_status s_unit_gather(void *user, int u);
static bt_status s_unit_release(void *user, int u, bool grads);

/*  Every released parameter pointed at zeros of its shape again (their values are whatever a
    restore or a broadcast writes next). */
static bt_status s_materialize(bt_trainer_t *self) {
    bt_status st = BT_OK;
    for (int i = 0; i < bt_model_num_params(self->policy) && st == BT_OK; i++) {
        bt_tensor *p = bt_model_params(self->policy)[i];
        if (bt_numel(p) > 0)
            continue;
        bt_tensor *z = bt_zeros(self->sh.ctx, BT_F32, bt_model_device(self->policy), self->ndim[i],
                                self->shape[i]);
        st = z ? bt_set_data(p, z) : BT_ETORCH; /* the parameter holds the storage now */
    }
    return st;
}

/*  The units of the model's parameters (bt_model_param_unit), each a run or two of the flat
    parameters. */
static bt_status s_units_form(bt_trainer_t *self) {
    int L = (int)bt_model_get_config(self->policy)->num_hidden_layers;
    self->sh.units = calloc((size_t)L + 1, sizeof *self->sh.units);
    if (!self->sh.units)
        return bt_fail(BT_ENOMEM, "trainer: out of memory");
    self->sh.n_units = L + 1;
    int64_t off = 0;
    for (int i = 0; i < bt_model_num_params(self->policy); i++) {
        s_unit *un = &self->sh.units[bt_model_param_unit(self->policy, i)];
        int r = un->count[0] == 0 ? 0 : un->first[0] + un->count[0] == i ? 0 : 1;
        if (r == 1 && un->count[1] > 0 && un->first[1] + un->count[1] != i)
            return bt_fail(BT_EINVAL, "trainer: a unit of more than two runs of parameters");
        if (un->count[r] == 0) {
            un->first[r] = i;
            un->lo[r] = off;
        }
        un->count[r]++;
        int64_t n = bt_numel(bt_model_params(self->policy)[i]);
        un->len[r] += n;
        off += n;
    }
    for (int u = 0; u <= L; u++) {
        self->sh.units[u].gathered = true; /* the weights are resident when a layout forms */
        self->sh.units[u].views = bt_ctx_new();
        if (!self->sh.units[u].views)
            return bt_fail(BT_ENOMEM, "trainer: out of memory");
    }
    const int64_t none = 0;
    self->sh.empty = bt_zeros(self->sh.ctx, BT_F32, bt_model_device(self->policy), 1, &none);
    self->sh.cb = (bt_model_units){s_unit_gather, s_unit_release, self};
    return self->sh.empty ? BT_OK : BT_ETORCH;
}

/*  The sharded state laid out for the trainer's group (alone: a group of one), from the weights
    as they are: moments zero, step count steps.  Optimizer and gradients: the weights re-pointed
    into one flat buffer, this rank's slice of it stepped in place.  Parameters: this rank's
    slice copied out as its master, and the weights released on every rank but 0. */
static bt_status s_shard_form(bt_trainer_t *self, int64_t steps) {
    int rank = self->group ? bt_group_rank(self->group) : 0;
    int world = self->group ? bt_group_world(self->group) : 1;
    bt_tensor *const *params = bt_model_params(self->policy);
    int n = bt_model_num_params(self->policy);
    bool whole = self->cfg.shard == BT_SHARD_PARAMETERS;
    bool grad = bt_set_grad_enabled(false);
    s_shard_release(self); /* the weights keep an earlier buffer alive until they move out */
    self->sh.ctx = bt_ctx_new();
    bt_status st = self->sh.ctx ? BT_OK : BT_ENOMEM;
    if (st == BT_OK && whole)
        st = s_materialize(self);
    int64_t total = s_param_elements(self->policy); /* every parameter resident */
    int64_t size = (total + world - 1) / world;
    if (st == BT_OK && whole) {
        self->sh.master = bt_flat_range(self->sh.ctx, params, n, false, rank * size, size);
    } else if (st == BT_OK) {
        self->sh.flat = bt_flatten_into(self->sh.ctx, params, n, world * size);
        self->sh.master =
            bt_slice(self->sh.ctx, self->sh.flat, 0, rank * size, (rank + 1) * size, 1);
    }
    if (st == BT_OK && self->sh.master && self->cfg.shard >= BT_SHARD_GRADIENTS)
        self->sh.grad = bt_zeros(self->sh.ctx, BT_F32, bt_model_device(self->policy), 1, &size);
    if (st == BT_OK)
        st = self->sh.master && (self->cfg.shard < BT_SHARD_GRADIENTS || self->sh.grad) ? BT_OK
                                                                                        : BT_ETORCH;
    if (st == BT_OK) {
        self->sh.opt = bt_adamw_new(&self->sh.master, 1, self->cfg.adamw);
        st = self->sh.opt ? BT_OK : BT_ETORCH;
    }
    if (st == BT_OK) {
        bt_adamw_set_steps(self->sh.opt, steps);
        self->sh.rank = rank;
        self->sh.world = world;
        self->sh.size = size;
    }
    if (st == BT_OK && whole)
        st = s_units_form(self);
    for (int u = 0; st == BT_OK && whole && rank != 0 && u < self->sh.n_units; u++)
        st = s_unit_release(self, u, false);
    if (st == BT_OK && whole)
        bt_model_set_units(self->policy, &self->sh.cb);
    bt_set_grad_enabled(grad);
    if (st != BT_OK)
        s_shard_release(self);
    return st;
}

/* ---- sharded parameters: gathering and releasing a unit ------------------------------------- */

/*  The ranks owning part of run r of unit un: k0 .. k1. */
static void s_owners(const bt_trainer_t *self, const s_unit *un, int r, int *k0, int *k1) {
    *k0 = (int)(un->lo[r] / self->sh.size);
    *k1 = (int)((un->lo[r] + un->len[r] - 1) / self->sh.size);
}

/*  The part [*a, *b) of run r of unit un (in the flat parameters) that rank k owns. */
static void s_owned(const bt_trainer_t *self, const s_unit *un, int r, int k, int64_t *a,
                    int64_t *b) {
    int64_t lo = un->lo[r], hi = un->lo[r] + un->len[r], first = k * self->sh.size;
    *a = lo > first ? lo : first;
    *b = hi < first + self->sh.size ? hi : first + self->sh.size;
}

/*  Unit u's weights, from the master slices of the ranks owning its ranges (each broadcasts its
    part); its parameters pointed at them.  A no-op when gathered (every rank agrees on that:
    gathers and releases come in the same order everywhere). */
static bt_status s_unit_gather(void *user, int u) {
    bt_trainer_t *self = user;
    s_unit *un = &self->sh.units[u];
    if (un->gathered)
        return BT_OK;
    bt_ctx *ctx = un->views;
    bt_tensor *const *params = bt_model_params(self->policy);
    bool grad = bt_set_grad_enabled(false);
    bt_status st = BT_OK;
    for (int r = 0; r < 2 && un->count[r] > 0 && st == BT_OK; r++) {
        bt_tensor *buf = bt_zeros(ctx, BT_F32, bt_model_device(self->policy), 1, &un->len[r]);
        int k0, k1;
        s_owners(self, un, r, &k0, &k1);
        for (int k = k0; k <= k1 && st == BT_OK; k++) {
            int64_t a, b;
            s_owned(self, un, r, k, &a, &b);
            bt_tensor *piece = bt_slice(ctx, buf, 0, a - un->lo[r], b - un->lo[r], 1);
            if (k == self->sh.rank) {
                bt_tensor *mine = bt_slice(ctx, self->sh.master, 0, a - k * self->sh.size,
                                           b - k * self->sh.size, 1);
                st = piece && mine ? bt_copy_(piece, mine) : BT_ETORCH;
            }
            if (st == BT_OK && self->group)
                st = piece ? bt_group_broadcast(self->group, &piece, 1, k) : BT_ETORCH;
        }
        int64_t off = 0;
        for (int i = un->first[r]; i < un->first[r] + un->count[r] && st == BT_OK; i++) {
            int64_t numel = self->shape[i][0] * (self->ndim[i] > 1 ? self->shape[i][1] : 1);
            bt_tensor *v = bt_reshape(ctx, bt_slice(ctx, buf, 0, off, off + numel, 1),
                                      self->ndim[i], self->shape[i]);
            st = v ? bt_set_data(params[i], v) : BT_ETORCH;
            off += numel;
        }
    }
    bt_set_grad_enabled(grad);
    un->gathered = st == BT_OK;
    return st;
}

/*  Unit u's weights freed (its parameters pointed at an empty tensor); with grads, its
    parameters' gradients first reduced to the ranks owning its ranges, added to their gradient
    shards, and dropped. */
static bt_status s_unit_release(void *user, int u, bool grads) {
    bt_trainer_t *self = user;
    s_unit *un = &self->sh.units[u];
    bt_ctx *ctx = un->views;
    bt_tensor *const *params = bt_model_params(self->policy);
    bool grad = bt_set_grad_enabled(false);
    bt_status st = BT_OK;
    for (int r = 0; r < 2 && un->count[r] > 0 && grads && st == BT_OK; r++) {
        bt_tensor *g = bt_flat_range(ctx, params + un->first[r], un->count[r], true, 0, un->len[r]);
        st = g ? BT_OK : BT_ETORCH;
        int k0, k1;
        s_owners(self, un, r, &k0, &k1);
        for (int k = k0; k <= k1 && st == BT_OK; k++) {
            int64_t a, b;
            s_owned(self, un, r, k, &a, &b);
            bt_tensor *piece = bt_slice(ctx, g, 0, a - un->lo[r], b - un->lo[r], 1);
            if (self->group)
                st = piece ? bt_group_reduce(self->group, piece, k) : BT_ETORCH;
            if (st == BT_OK && k == self->sh.rank) {
                bt_tensor *mine = bt_slice(ctx, self->sh.grad, 0, a - k * self->sh.size,
                                           b - k * self->sh.size, 1);
                bt_tensor *sum = bt_add(ctx, mine, piece);
                st = sum ? bt_copy_(mine, sum) : BT_ETORCH;
            }
        }
        bt_zero_grad(params + un->first[r], un->count[r]);
    }
    for (int r = 0; r < 2 && un->count[r] > 0 && st == BT_OK; r++)
        for (int i = un->first[r]; i < un->first[r] + un->count[r] && st == BT_OK; i++)
            st = bt_set_data(params[i], self->sh.empty);
    bt_set_grad_enabled(grad);
    bt_ctx_reset(ctx);
    un->gathered = false;
    return st;
}

/*  Rank 0's weights freed without collectives: every rank then holds none, where a job's first
    gather starts. */
static bt_status s_units_drop(bt_trainer_t *self) {
    bt_status st = BT_OK;
    for (int u = 0; u < self->sh.n_units && st == BT_OK; u++)
        if (self->sh.units[u].gathered)
            st = s_unit_release(self, u, false);
    return st;
}

/*  Every unit gathered once, kept on rank 0 alone: what a job leaves (rank 0 publishes and
    snapshots the weights). */
static bt_status s_units_hold(bt_trainer_t *self) {
    bt_status st = BT_OK;
    for (int u = 0; u < self->sh.n_units && st == BT_OK; u++) {
        st = s_unit_gather(self, u);
        if (st == BT_OK && self->sh.rank != 0)
            st = s_unit_release(self, u, false);
    }
    return st;
}

/*  With sharded parameters a job starts with no rank holding weights and leaves them gathered
    on rank 0 alone (s_units_drop, s_units_hold); run does the job in between. */
static bt_status s_units_begin(bt_trainer_t *self) {
    return self->cfg.shard == BT_SHARD_PARAMETERS ? s_units_drop(self) : BT_OK;
}
static bt_status s_units_end(bt_trainer_t *self, bt_status st) {
    if (st != BT_OK || self->cfg.shard != BT_SHARD_PARAMETERS)
        return st;
    return s_units_hold(self);
}

/*  The collectives of one micro-batch without its compute, for a rank with fewer micro-batches
    than another: a forward's gathers and, with backward, a backward's gathers and reductions (of
    no gradients), in the model's order. */
static bt_status s_units_idle_round(bt_trainer_t *self, bool backward) {
    int L = self->sh.n_units - 1;
    bt_status st = s_unit_gather(self, L);
    for (int l = 0; l < L && st == BT_OK; l++) {
        st = s_unit_gather(self, l);
        if (st == BT_OK)
            st = s_unit_release(self, l, false);
    }
    for (int l = L - 1; backward && l >= 0 && st == BT_OK; l--) {
        st = s_unit_gather(self, l);
        if (st == BT_OK)
            st = s_unit_release(self, l, true);
    }
    return st == BT_OK ? s_unit_release(self, L, backward) : st;
}

/*  BT_ESTATE unless the sharded state was formed for the trainer's group as it is now. */
static bt_status s_shard_check(const bt_trainer_t *self) {
    int rank = self->group ? bt_group_rank(self->group) : 0;
    int world = self->group ? bt_group_world(self->group) : 1;
    if (self->sh.world == world && self->sh.rank == rank)
        return BT_OK;
    return bt_fail(BT_ESTATE,
                   "trainer: the sharded optimizer state is rank %d of %d, the group rank %d of "
                   "%d: it must be restored",
                   self->sh.rank, self->sh.world, rank, world);
}

void bt_trainer_config_init(bt_trainer_config *cfg) {
    cfg->adamw = bt_adamw_defaults();
    cfg->max_grad_norm = 1.0;
    cfg->micro_batch = 32;
    cfg->batching = BT_BATCHING_BUCKET;
    cfg->pack_tokens = 0;
    cfg->share_prefix = true;
    cfg->reference = false;
    cfg->shard = BT_SHARD_NONE;
}

bt_trainer_t *bt_trainer_new(bt_model **policy_p, const bt_trainer_config *cfg) {
    BT_ASSERT(policy_p && cfg);
    bt_model *policy = *policy_p;
    *policy_p = NULL;
    if (!policy) {
        bt_fail(BT_EINVAL, "trainer: no policy model");
        return NULL;
    }
    if (cfg->micro_batch < 1) {
        bt_fail(BT_EINVAL, "trainer: micro_batch must be >= 1, got %lld",
                (long long)cfg->micro_batch);
        bt_model_destroy(&policy);
        return NULL;
    }
    if ((unsigned)cfg->shard > BT_SHARD_PARAMETERS) {
        bt_fail(BT_EINVAL, "trainer: unknown shard stage %d", (int)cfg->shard);
        bt_model_destroy(&policy);
        return NULL;
    }
    if ((unsigned)cfg->batching > BT_BATCHING_PACK || cfg->pack_tokens < 0) {
        bt_fail(BT_EINVAL, "trainer: unknown batching %d or pack_tokens %lld < 0",
                (int)cfg->batching, (long long)cfg->pack_tokens);
        bt_model_destroy(&policy);
        return NULL;
    }
    bt_trainer_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "trainer: out of memory");
        bt_model_destroy(&policy);
        return NULL;
    }
    self->cfg = *cfg;
    self->policy = policy;
    int n = bt_model_num_params(policy);
    self->shape = calloc((size_t)n, sizeof *self->shape);
    self->ndim = calloc((size_t)n, sizeof *self->ndim);
    bool ok = self->shape && self->ndim;
    for (int i = 0; ok && i < n; i++) {
        bt_tensor *p = bt_model_params(policy)[i];
        self->ndim[i] = bt_ndim(p);
        ok = self->ndim[i] >= 1 && self->ndim[i] <= 2;
        for (int d = 0; ok && d < self->ndim[i]; d++)
            self->shape[i][d] = bt_dim(p, d);
    }
    if (!ok) {
        bt_fail(BT_EINVAL, "trainer: a parameter of neither one nor two dimensions");
        bt_trainer_destroy(&self);
        return NULL;
    }
    if (cfg->shard == BT_SHARD_NONE) {
        self->opt = bt_adamw_new(bt_model_params(policy), bt_model_num_params(policy), cfg->adamw);
        ok = self->opt != NULL;
    } else {
        ok = s_shard_form(self, 0) == BT_OK;
    }
    self->base_reference = cfg->reference && bt_model_lora(policy);
    if (ok && cfg->reference && !self->base_reference) { /* a frozen copy of the policy */
        self->reference = bt_model_new(bt_model_get_config(policy), bt_model_device(policy), 0);
        ok = self->reference && bt_weights_copy(self->reference, policy) == BT_OK &&
             bt_model_set_precision(self->reference, bt_model_precision(policy)) == BT_OK;
        for (int i = 0; ok && i < bt_model_num_params(self->reference); i++)
            ok = bt_set_requires_grad(bt_model_params(self->reference)[i], false) == BT_OK;
    }
    if (!ok)
        bt_trainer_destroy(&self);
    return self;
}

void bt_trainer_destroy(bt_trainer_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_trainer_t *self = *self_p;
    bt_adamw_destroy(&self->opt);
    s_shard_release(self);
    bt_model_destroy(&self->reference);
    bt_model_destroy(&self->policy);
    free(self->shape);
    free(self->ndim);
    free(self);
    *self_p = NULL;
}

int64_t bt_trainer_micro_batch(const bt_trainer_t *self) {
    return self->cfg.micro_batch;
}

void bt_trainer_set_micro_batch(bt_trainer_t *self, int64_t micro_batch) {
    BT_ASSERT(micro_batch >= 1);
    self->cfg.micro_batch = micro_batch;
}

bt_model *bt_trainer_policy(bt_trainer_t *self) {
    return self->policy;
}
bt_model *bt_trainer_reference(bt_trainer_t *self) {
    return self->reference;
}
bt_adamw *bt_trainer_optimizer(bt_trainer_t *self) {
    return self->opt ? self->opt : self->sh.opt;
}
int64_t bt_trainer_version(const bt_trainer_t *self) {
    return self->version;
}
void bt_trainer_set_version(bt_trainer_t *self, int64_t version) {
    self->version = version;
}

bt_status bt_trainer_freeze_reference(bt_trainer_t *self) {
    if (!self->reference)
        return BT_OK;
    if (self->cfg.shard != BT_SHARD_PARAMETERS)
        return bt_weights_copy(self->reference, self->policy);
    /* every rank's reference is whole: each unit gathered everywhere, copied, released */
    bt_status st = s_units_drop(self);
    bool grad = bt_set_grad_enabled(false);
    for (int u = 0; u < self->sh.n_units && st == BT_OK; u++) {
        st = s_unit_gather(self, u);
        for (int i = 0; i < bt_model_num_params(self->policy) && st == BT_OK; i++)
            if (bt_model_param_unit(self->policy, i) == u)
                st =
                    bt_copy_(bt_model_params(self->reference)[i], bt_model_params(self->policy)[i]);
        if (st == BT_OK)
            st = s_unit_release(self, u, false);
    }
    bt_set_grad_enabled(grad);
    return s_units_end(self, st);
}

void bt_trainer_set_group(bt_trainer_t *self, bt_group *group) {
    self->group = group;
}

bt_status bt_trainer_sync(bt_trainer_t *self, int root) {
    if (!self->group)
        return BT_OK;
    /* released weights take part as zeros of their shapes (a re-formed sharded group is
       restored by the controller) */
    if (self->cfg.shard == BT_SHARD_PARAMETERS)
        BT_TRY(s_materialize(self));
    bool sharded = self->cfg.shard != BT_SHARD_NONE; /* moments: root holds only its shard */
    int n = bt_model_num_params(self->policy), parts = (self->reference ? 2 : 1) + !sharded * 2;
    bt_tensor **all = malloc(sizeof *all * (size_t)(parts * n)), **next = all;
    if (!all)
        return bt_fail(BT_ENOMEM, "trainer: out of memory");
    bt_status st = BT_OK;
    for (int i = 0; i < n && st == BT_OK; i++) {
        *next++ = bt_model_params(self->policy)[i];
        if (!sharded) {
            st = bt_adamw_moments(self->opt, i, next, next + 1);
            next += 2;
        }
        if (self->reference)
            *next++ = bt_model_params(self->reference)[i];
    }
    if (st == BT_OK)
        st = bt_group_broadcast(self->group, all, parts * n, root);
    free(all);
    bt_adamw *opt = bt_trainer_optimizer(self);
    double counters[2] = {(double)self->version, (double)bt_adamw_steps(opt)};
    if (bt_group_rank(self->group) != root)
        counters[0] = counters[1] = 0.0;
    if (st == BT_OK) /* a sum in which only root's values are not zero */
        st = bt_group_allreduce_f64(self->group, counters, 2, BT_REDUCE_SUM);
    if (st == BT_OK) {
        self->version = (int64_t)counters[0];
        bt_adamw_set_steps(opt, (int64_t)counters[1]);
    }
    /* a new layout from the common weights; the moments of a trained group are restored by the
       controller (a re-formed sharded group is restored from its snapshot) */
    if (st == BT_OK && sharded)
        st = s_shard_form(self, (int64_t)counters[1]);
    return st;
}

/*  The rows of an n-row batch this rank computes: all of them alone, else a contiguous share. */
static void s_rows(const bt_trainer_t *self, int64_t n, int64_t *lo, int64_t *hi) {
    int64_t rank = self->group ? bt_group_rank(self->group) : 0;
    int64_t world = self->group ? bt_group_world(self->group) : 1;
    *lo = n * rank / world;
    *hi = n * (rank + 1) / world;
}

/*  With a group: sums values[0..n_sum) and takes the maximum of values[n_sum..n_sum+n_max) over
    the ranks.  values[0] is this rank's "ok" (1 or 0): when any rank failed, every rank fails
    here, so no rank updates alone. */
static bt_status s_reduce_stats(bt_trainer_t *self, double *values, int n_sum, int n_max) {
    if (!self->group)
        return BT_OK;
    bool failed_here = values[0] != 1.0;
    BT_TRY(bt_group_allreduce_f64(self->group, values, n_sum, BT_REDUCE_SUM));
    if (n_max > 0)
        BT_TRY(bt_group_allreduce_f64(self->group, values + n_sum, n_max, BT_REDUCE_MAX));
    if (values[0] == (double)bt_group_world(self->group))
        return BT_OK;
    if (failed_here) /* this rank's own error (out of memory, say) is the one to report */
        return BT_EIO;
    return bt_fail(BT_EIO, "trainer: %g of %d ranks failed this step",
                   bt_group_world(self->group) - values[0], bt_group_world(self->group));
}

/* ---- sequences ------------------------------------------------------------------------------ */

static bt_status s_check_batch(const bt_trainer_t *self, const bt_rollout_batch *b) {
    if (b->n < 1)
        return bt_fail(BT_EINVAL, "trainer: empty batch");
    const bt_model_config *mc = bt_model_get_config(self->policy);
    for (int64_t c = 0; c < b->n; c++) {
        if (b->prompt_lens[c] < 1 || b->prompt_lens[c] > b->max_prompt_len || b->lengths[c] < 0 ||
            b->lengths[c] > b->max_new_tokens)
            return bt_fail(BT_EINVAL,
                           "trainer: completion %lld: prompt length %lld or completion length "
                           "%lld out of range",
                           (long long)c, (long long)b->prompt_lens[c], (long long)b->lengths[c]);
        if (b->has_turn_rewards && (b->n_turns[c] < 1 || b->n_turns[c] > BT_MAX_TURNS))
            return bt_fail(BT_EINVAL, "trainer: completion %lld: n_turns %lld outside [1, %d]",
                           (long long)c, (long long)b->n_turns[c], BT_MAX_TURNS);
        for (int64_t j = 0; b->has_turn_rewards && j < b->lengths[c]; j++)
            if (b->turn[c * b->max_new_tokens + j] >= b->n_turns[c])
                return bt_fail(BT_EINVAL,
                               "trainer: completion %lld: token %lld of turn %d, of %lld turns",
                               (long long)c, (long long)j, b->turn[c * b->max_new_tokens + j],
                               (long long)b->n_turns[c]);
        if (b->prompt_lens[c] + b->lengths[c] > mc->max_position_embeddings)
            return bt_fail(BT_ERANGE,
                           "trainer: completion %lld: %lld tokens exceed max_position_embeddings "
                           "%lld",
                           (long long)c, (long long)(b->prompt_lens[c] + b->lengths[c]),
                           (long long)mc->max_position_embeddings);
    }
    return BT_OK;
}

/* ---- micro-batches -------------------------------------------------------------------------- */

/*  Tokens of completion c that train (its loss_mask's sum within its length). */
static int64_t s_trained(const bt_rollout_batch *b, int64_t c) {
    int64_t n = 0;
    for (int64_t j = 0; j < b->lengths[c]; j++)
        n += b->loss_mask[c * b->max_new_tokens + j] != 0;
    return n;
}

/*  The advantage of token j of completion c: advantages (n) per episode, or (n, BT_MAX_TURNS)
    per turn when the batch holds turn rewards. */
static double s_token_adv(const bt_rollout_batch *b, const double *advantages, int64_t c,
                          int64_t j) {
    if (!b->has_turn_rewards)
        return advantages[c];
    return advantages[c * BT_MAX_TURNS + b->turn[c * b->max_new_tokens + j]];
}

/*  Where one item sits: its micro-batch's row and the column of its first token.  An item is the
    sequences seq .. seq+n-1 of the batch: one sequence (n = 1) laid out as prompt ++ completion,
    or (shared prefix) a run of sequences with the same prompt tokens, laid out as the prompt once,
    then each completion in batch order. */
typedef struct s_slot {
    int64_t seq, n, row, col;
} s_slot;

/*  A step's micro-batches: micro-batch k is rows[k] rows of width[k] tokens holding the items
    slots[first[k] .. first[k+1]). */
typedef struct s_plan {
    int64_t n;
    int64_t *first;        /* (n + 1) */
    int64_t *rows, *width; /* (n) */
    s_slot *slots;         /* one per item */
    double shared;         /* prompt tokens not computed again: (n - 1) * P per item */
} s_plan;

static void s_plan_release(s_plan *p) {
    free(p->first);
    free(p->rows);
    free(p->width);
    free(p->slots);
    *p = (s_plan){0};
}

static int64_t s_seq_len(const bt_rollout_batch *b, int64_t c) {
    return b->prompt_lens[c] + b->lengths[c];
}

/*  Whether completions c and d of b have the same prompt tokens. */
static bool s_same_prompt(const bt_rollout_batch *b, int64_t c, int64_t d) {
    return b->prompt_lens[c] == b->prompt_lens[d] &&
           !memcmp(b->prompt_tokens + c * b->max_prompt_len,
                   b->prompt_tokens + d * b->max_prompt_len,
                   (size_t)b->prompt_lens[c] * sizeof *b->prompt_tokens);
}

/*  Longest first, then batch order: a deterministic order whatever qsort does with ties. */
typedef struct s_by_len {
    int64_t len, item;
} s_by_len;

static int s_longest_first(const void *a, const void *b) {
    const s_by_len *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->item < y->item ? -1 : x->item > y->item;
}

/*  Rows [lo, hi) of b into micro-batches as cfg batching says; with share, each run of consecutive
    sequences with the same prompt tokens (at most micro_batch of them) is one item.  pad and
    bucket put one item in a row and at most micro_batch sequences in a micro-batch; pack packs
    items into rows as wide as the widest and takes micro_batch rows (or pack_tokens slots) per
    micro-batch.  Every micro-batch gets rows and a width of at least 2
    (bt_model_token_logprobs needs two tokens). */
static bt_status s_plan_make(const bt_trainer_config *cfg, const bt_rollout_batch *b, int64_t lo,
                             int64_t hi, bool share, s_plan *p) {
    int64_t n = hi - lo, n_items = 0, n_rows = 0, widest = 2;
    size_t cap = (size_t)(n > 0 ? n : 1);
    *p = (s_plan){0};
    s_by_len *order = malloc(cap * sizeof *order);
    s_slot *items = malloc(cap * sizeof *items);  /* in batch order, then placed */
    int64_t *fill = malloc(cap * sizeof *fill);   /* per row: its width so far */
    int64_t *seqs = calloc(cap, sizeof *seqs);    /* per row: its sequences */
    int64_t *mb = malloc(cap * sizeof *mb);       /* per row: its micro-batch */
    int64_t *local = malloc(cap * sizeof *local); /* per row: its row there */
    p->slots = malloc(cap * sizeof *p->slots);
    p->first = malloc((size_t)(n + 2) * sizeof *p->first);
    p->rows = malloc(cap * sizeof *p->rows);
    p->width = malloc(cap * sizeof *p->width);
    bt_status st =
        order && items && fill && seqs && mb && local && p->slots && p->first && p->rows && p->width
            ? BT_OK
            : bt_fail(BT_ENOMEM, "trainer: out of memory");
    if (st != BT_OK)
        goto out_free;
    for (int64_t c = lo; c < hi; n_items++) { /* items, and their lengths */
        int64_t k = 1, len = s_seq_len(b, c);
        for (; share && k < cfg->micro_batch && c + k < hi && s_same_prompt(b, c, c + k); k++)
            len += b->lengths[c + k];
        p->shared += (double)((k - 1) * b->prompt_lens[c]);
        items[n_items] = (s_slot){c, k, 0, 0};
        order[n_items] = (s_by_len){len, n_items};
        widest = len > widest ? len : widest;
        c += k;
    }
    if (cfg->batching != BT_BATCHING_PAD)
        qsort(order, (size_t)n_items, sizeof *order, s_longest_first);
    /* rows: one item each, or first-fit decreasing into rows of the widest's width */
    for (int64_t i = 0; i < n_items; i++) {
        s_slot *it = &items[order[i].item];
        int64_t r = n_rows;
        if (cfg->batching == BT_BATCHING_PACK)
            for (r = 0; r < n_rows && fill[r] + order[i].len > widest; r++)
                ;
        if (r == n_rows)
            fill[n_rows++] = 0;
        it->row = r;
        it->col = fill[r];
        fill[r] += order[i].len;
        seqs[r] += it->n;
    }
    /* micro-batches: consecutive rows, up to rows_per rows and seqs_per sequences each */
    int64_t rows_per = n_rows, seqs_per = cfg->micro_batch;
    if (cfg->batching == BT_BATCHING_PACK) {
        rows_per = cfg->micro_batch;
        seqs_per = n;
        if (cfg->pack_tokens > 0)
            rows_per = cfg->pack_tokens / widest > 1 ? cfg->pack_tokens / widest : 1;
    }
    for (int64_t r = 0, in_rows = 0, in_seqs = 0; r < n_rows; r++) {
        if (in_rows > 0 && (in_rows == rows_per || in_seqs + seqs[r] > seqs_per)) {
            p->n++;
            in_rows = in_seqs = 0;
        }
        mb[r] = p->n;
        local[r] = in_rows++;
        in_seqs += seqs[r];
    }
    p->n += n_rows > 0;
    for (int64_t k = 0; k <= p->n; k++) {
        p->first[k] = 0;
        if (k < p->n)
            p->rows[k] = p->width[k] = 0;
    }
    for (int64_t r = 0; r < n_rows; r++)
        p->rows[mb[r]]++;
    for (int64_t i = 0; i < n_items; i++) /* counting sort of the items by micro-batch */
        p->first[mb[items[i].row] + 1]++;
    for (int64_t k = 0; k < p->n; k++) {
        p->first[k + 1] += p->first[k];
        p->width[k] = 2;
    }
    for (int64_t i = 0; i < n_items; i++) { /* in placement order, as before items existed */
        const s_slot *it = &items[order[i].item];
        int64_t k = mb[it->row];
        p->slots[p->first[k]++] = (s_slot){it->seq, it->n, local[it->row], it->col};
        int64_t end = it->col + order[i].len;
        p->width[k] = end > p->width[k] ? end : p->width[k];
    }
    for (int64_t k = p->n; k > 0; k--) /* first[k] now holds the end of k: shift back */
        p->first[k] = p->first[k - 1];
    p->first[0] = 0;
out_free:
    free(order);
    free(items);
    free(fill);
    free(seqs);
    free(mb);
    free(local);
    if (st != BT_OK)
        s_plan_release(p);
    return st;
}

/*  Micro-batch k of a plan as tensors: R rows of width T. */
typedef struct s_micro {
    bt_tensor *ids;    /* (R, T) I64: the items, then pad */
    bt_tensor *seg;    /* (R, T) I64: a segment's first column + 1 on its tokens, 0 on padding */
    bt_tensor *prefix; /* (R, T) I64: on a shared prompt's completions its segment id, else 0;
                          NULL when no item of the micro-batch shares its prompt */
    bt_tensor *pos;    /* (R, T) I64: positions, 0 at each prompt's first token */
    bt_tensor *cmask;  /* (R, T-1) F32: 1 where element t predicts a completion token the policy
                          sampled (loss_mask 1), 0 at prompts, padding and environment tokens */
    bt_tensor *old;    /* (R, T-1) F32: behaviour log-probs there, 0 elsewhere */
    bt_tensor *adv;    /* (R, T-1) F32: the token's advantage there (its sequence's, or its
                          turn's), or NULL */
    bt_tensor *len;    /* (R, T-1) F32: the sequence's trained tokens there, or NULL */
} s_micro;

static bt_status s_micro_build(bt_ctx *ctx, const bt_model *model, const bt_rollout_batch *b,
                               const s_plan *plan, int64_t k, const double *advantages,
                               s_micro *m) {
    const bt_model_config *mc = bt_model_get_config(model);
    const int64_t pad = mc->pad_token_id >= 0 ? mc->pad_token_id : 0;
    const bt_device dev = bt_model_device(model);
    const int64_t R = plan->rows[k], T = plan->width[k];
    size_t cells = (size_t)(R * T);
    int64_t *ids = malloc(cells * sizeof *ids), *seg = calloc(cells, sizeof *seg);
    int64_t *pos = calloc(cells, sizeof *pos), *pre = calloc(cells, sizeof *pre);
    float *cmask = calloc(cells, sizeof *cmask), *old = calloc(cells, sizeof *old);
    float *adv = calloc(cells, sizeof *adv), *len = calloc(cells, sizeof *len);
    bool shared = false;
    bt_status st = BT_OK;
    if (!ids || !seg || !pos || !pre || !cmask || !old || !adv || !len)
        st = bt_fail(BT_ENOMEM, "trainer: out of memory");
    for (size_t i = 0; i < cells && st == BT_OK; i++)
        ids[i] = pad;
    for (int64_t i = plan->first[k]; i < plan->first[k + 1] && st == BT_OK; i++) {
        const s_slot *s = &plan->slots[i];
        int64_t P = b->prompt_lens[s->seq], at = s->row * T + s->col; /* the prompt's cell */
        const int32_t *prompt = b->prompt_tokens + s->seq * b->max_prompt_len;
        for (int64_t t = 0; t < P; t++) {
            ids[at + t] = prompt[t];
            seg[at + t] = s->col + 1;
            pos[at + t] = t;
        }
        shared = shared || s->n > 1;
        for (int64_t c = s->seq, col = s->col + P; c < s->seq + s->n; c++) {
            int64_t L = b->lengths[c], id = s->n > 1 ? col + 1 : s->col + 1;
            const int32_t *tokens = b->tokens + c * b->max_new_tokens;
            const float *lp = b->logprobs + c * b->max_new_tokens;
            const uint8_t *trains = b->loss_mask + c * b->max_new_tokens;
            float trained = (float)s_trained(b, c);
            for (int64_t j = 0; j < L; j++) { /* element col-1+j predicts completion token j */
                int64_t cell = s->row * T + col + j, e = s->row * (T - 1) + col - 1 + j;
                ids[cell] = tokens[j]; /* an environment token: input to attention, no loss */
                seg[cell] = id;
                pre[cell] = s->n > 1 ? s->col + 1 : 0;
                pos[cell] = P + j;
                if (!trains[j])
                    continue;
                cmask[e] = 1.0f;
                old[e] = lp[j];
                adv[e] = advantages ? (float)s_token_adv(b, advantages, c, j) : 0.0f;
                len[e] = trained;
            }
            col += L;
        }
    }
    if (st == BT_OK) {
        const int64_t s_ids[] = {R, T}, s_lp[] = {R, T - 1};
        m->ids = bt_from_host(ctx, BT_I64, dev, 2, s_ids, ids);
        m->seg = bt_from_host(ctx, BT_I64, dev, 2, s_ids, seg);
        m->prefix = shared ? bt_from_host(ctx, BT_I64, dev, 2, s_ids, pre) : NULL;
        m->pos = bt_from_host(ctx, BT_I64, dev, 2, s_ids, pos);
        m->cmask = bt_from_host(ctx, BT_F32, dev, 2, s_lp, cmask);
        m->old = bt_from_host(ctx, BT_F32, dev, 2, s_lp, old);
        m->adv = advantages ? bt_from_host(ctx, BT_F32, dev, 2, s_lp, adv) : NULL;
        m->len = advantages ? bt_from_host(ctx, BT_F32, dev, 2, s_lp, len) : NULL;
        if (!m->ids || !m->seg || (shared && !m->prefix) || !m->pos || !m->cmask || !m->old ||
            (advantages && (!m->adv || !m->len)))
            st = BT_ETORCH;
    }
    free(ids);
    free(seg);
    free(pos);
    free(pre);
    free(cmask);
    free(old);
    free(adv);
    free(len);
    return st;
}

/*  Token slots of a plan: rows x width over its micro-batches. */
static double s_plan_slots(const s_plan *p) {
    double slots = 0;
    for (int64_t k = 0; k < p->n; k++)
        slots += (double)(p->rows[k] * p->width[k]);
    return slots;
}

/*  Sums the gradients over the group's ranks, clips, steps, version++; drops the gradients either
    way. */
/*  The sharded update: this rank's shard of the summed gradients (optimizer: all-reduced and
    clipped as the replicated update does, then cut; gradients: reduce-scattered, its norm summed
    over the shards), one AdamW step of this rank's master slice, then every slice all-gathered
    into the weights.  AdamW is elementwise, so each element takes the replicated update's step. */
static bt_status s_update_sharded(bt_trainer_t *self, double lr, double max_norm,
                                  double *grad_norm) {
    bt_tensor *const *params = bt_model_params(self->policy);
    int n = bt_model_num_params(self->policy);
    BT_TRY(s_shard_check(self));
    bt_ctx *ctx = bt_ctx_new();
    if (!ctx)
        return bt_fail(BT_ENOMEM, "trainer: out of memory");
    bool grad_mode = bt_set_grad_enabled(false);
    bt_status st = BT_OK;
    bt_tensor *g = NULL;
    if (self->cfg.shard == BT_SHARD_OPTIMIZER) {
        st = self->group ? bt_group_allreduce_grads(self->group, params, n) : BT_OK;
        if (st == BT_OK)
            st = bt_clip_grad_norm(params, n, max_norm, grad_norm);
        if (st == BT_OK) {
            g = bt_flat_range(ctx, params, n, true, self->sh.rank * self->sh.size, self->sh.size);
            st = g ? BT_OK : BT_ETORCH;
        }
    } else {
        g = self->sh.grad; /* parameters: reduced to it unit by unit during backward */
        if (self->cfg.shard == BT_SHARD_GRADIENTS)
            st = bt_group_reduce_scatter_grads(self->group, params, n, g, false);
        bt_zero_grad(params, n); /* the whole gradients are not needed past here */
        double sq = 0.0;
        bt_tensor *t = bt_sum_all(ctx, bt_pow_scalar(ctx, bt_to_dtype(ctx, g, BT_F64), 2.0));
        if (st == BT_OK)
            st = t ? bt_item(t, &sq) : BT_ETORCH;
        if (st == BT_OK && self->group)
            st = bt_group_allreduce_f64(self->group, &sq, 1, BT_REDUCE_SUM);
        *grad_norm = sqrt(sq);
        double coef = max_norm / (*grad_norm + 1e-6); /* as bt_clip_grad_norm */
        if (st == BT_OK && coef < 1.0) {
            t = bt_mul_scalar(ctx, g, coef);
            st = t ? bt_copy_(g, t) : BT_ETORCH;
        }
    }
    if (st == BT_OK)
        st = bt_set_grad(self->sh.master, g);
    if (st == BT_OK)
        st = bt_adamw_step(self->sh.opt, lr);
    if (st == BT_OK && self->cfg.shard != BT_SHARD_PARAMETERS)
        st = bt_group_allgather_flat(self->group, self->sh.flat);
    if (self->cfg.shard == BT_SHARD_PARAMETERS) { /* the next step's sums start from zero */
        bt_tensor *z = bt_mul_scalar(ctx, g, 0.0);
        bt_status zs = z ? bt_copy_(g, z) : BT_ETORCH;
        st = st != BT_OK ? st : zs;
    }
    bt_set_grad(self->sh.master, NULL);
    bt_set_grad_enabled(grad_mode);
    bt_ctx_destroy(&ctx);
    return st;
}

static bt_status s_update(bt_trainer_t *self, double lr, double *grad_norm) {
    bt_tensor *const *params = bt_model_params(self->policy);
    int n = bt_model_num_params(self->policy);
    double max_norm = self->cfg.max_grad_norm > 0 ? self->cfg.max_grad_norm : INFINITY;
    if (self->cfg.shard != BT_SHARD_NONE) {
        bt_status st = s_update_sharded(self, lr, max_norm, grad_norm);
        bt_zero_grad(params, n);
        if (st == BT_OK)
            self->version++;
        return st;
    }
    bt_status st = self->group ? bt_group_allreduce_grads(self->group, params, n) : BT_OK;
    if (st == BT_OK)
        st = bt_clip_grad_norm(params, n, max_norm, grad_norm);
    if (st == BT_OK)
        st = bt_adamw_step(self->opt, lr);
    bt_zero_grad(params, n);
    if (st == BT_OK)
        self->version++;
    return st;
}

/* ---- GRPO ----------------------------------------------------------------------------------- */

/*  Forward, loss and backward of micro-batch k; adds its loss and sums. */
static bt_status s_grpo_micro(bt_trainer_t *self, bt_ctx *ctx, const bt_rollout_batch *b,
                              const s_plan *plan, int64_t k, const double *advantages,
                              const bt_grpo_config *cfg, double temperature, double normaliser,
                              double *loss_sum, bt_grpo_stats *gs) {
    s_micro m;
    bt_status st = s_micro_build(ctx, self->policy, b, plan, k, advantages, &m);
    if (st != BT_OK)
        return st;
    bt_tensor *ref_logp = NULL; /* (R, T-1) */
    if (cfg->kl_coef != 0.0) {
        bool grad = bt_set_grad_enabled(false);
        bt_model *ref = self->base_reference ? self->policy : self->reference;
        bool adapters = bt_model_set_adapters_enabled(ref, false); /* LoRA: the base model */
        ref_logp = bt_model_token_logprobs_shared(ref, ctx, m.ids, m.seg, m.prefix, m.pos,
                                                  temperature, NULL);
        bt_model_set_adapters_enabled(ref, adapters);
        bt_set_grad_enabled(grad);
        if (!ref_logp)
            return BT_ETORCH;
    }
    bt_tensor *entropy = NULL; /* (R, T-1) */
    bt_tensor *logp = bt_model_token_logprobs_shared(self->policy, ctx, m.ids, m.seg, m.prefix,
                                                     m.pos, temperature, &entropy); /* (R, T-1) */
    bt_tensor *loss = bt_grpo_loss(ctx, cfg, logp, m.old, ref_logp, m.adv, m.cmask, m.len, entropy,
                                   normaliser, gs);
    double value = 0.0;
    st = loss ? bt_item(loss, &value) : BT_ETORCH;
    if (st == BT_OK)
        st = bt_backward(loss);
    if (st == BT_OK && self->cfg.shard == BT_SHARD_PARAMETERS) /* the rest's gradients, last */
        st = s_unit_release(self, self->sh.n_units - 1, true);
    *loss_sum += value;
    return st;
}

/*  The micro-batches every rank runs: this rank's n, or with sharded parameters the most any
    rank has (a rank with fewer runs the collectives of the rest without compute). */
static bt_status s_rounds(bt_trainer_t *self, int64_t n, int64_t *rounds) {
    *rounds = n;
    if (self->cfg.shard != BT_SHARD_PARAMETERS || !self->group)
        return BT_OK;
    double most = (double)n;
    BT_TRY(bt_group_allreduce_f64(self->group, &most, 1, BT_REDUCE_MAX));
    *rounds = (int64_t)most;
    return BT_OK;
}

static bt_status s_grpo_step(bt_trainer_t *self, const bt_rollout_batch *batch,
                             const double *advantages, double lr, const bt_grpo_config *cfg,
                             bt_trainer_stats *stats) {
    bt_status st = bt_grpo_config_validate(cfg);
    if (st == BT_OK)
        st = s_check_batch(self, batch);
    if (st != BT_OK)
        return st;
    if (cfg->kl_coef != 0.0 && !self->reference && !self->base_reference)
        return bt_fail(BT_EINVAL,
                       "trainer: kl_coef is %g but the trainer keeps no reference "
                       "(set reference in its config)",
                       cfg->kl_coef);
    int64_t *trained = malloc(sizeof *trained * (size_t)batch->n);
    if (!trained)
        return bt_fail(BT_ENOMEM, "trainer: out of memory");
    for (int64_t c = 0; c < batch->n; c++)
        trained[c] = s_trained(batch, c); /* environment tokens are not the policy's */
    double normaliser = bt_grpo_normaliser(cfg, trained, batch->n);
    free(trained);
    if (!(normaliser > 0))
        return bt_fail(BT_EINVAL, "trainer: the batch has no completion tokens to train");
    double temperature = batch->temperature > 0 ? batch->temperature : 1.0;
    int64_t lo, hi;
    s_rows(self, batch->n, &lo, &hi);
    /* dynamic rope scaling follows a pass's longest position, so regrouping would change it */
    bool share = self->cfg.share_prefix &&
                 bt_model_get_config(self->policy)->rope_scaling.kind != BT_ROPE_SCALING_DYNAMIC;
    s_plan plan;
    BT_TRY(s_plan_make(&self->cfg, batch, lo, hi, share, &plan));
    bt_ctx *ctx = bt_ctx_new();
    if (!ctx) {
        s_plan_release(&plan);
        return bt_fail(BT_ENOMEM, "trainer: out of memory");
    }
    bt_grpo_stats gs = {0};
    double loss = 0.0, grad_norm = 0.0;
    int64_t rounds = plan.n;
    st = s_rounds(self, plan.n, &rounds);
    for (int64_t k = 0; k < rounds && st == BT_OK; k++) {
        st = k < plan.n ? s_grpo_micro(self, ctx, batch, &plan, k, advantages, cfg, temperature,
                                       normaliser, &loss, &gs)
                        : s_units_idle_round(self, true);
        bt_ctx_reset(ctx);
    }
    bt_ctx_destroy(&ctx);
    double v[] = {st == BT_OK,
                  loss,
                  gs.pg_loss_sum,
                  gs.kl_sum,
                  gs.clip_low_tokens + gs.clip_high_tokens,
                  gs.ratio_sum,
                  gs.entropy_sum,
                  gs.tokens,
                  s_plan_slots(&plan),
                  gs.ratio_sumsq,
                  gs.mismatch_sum,
                  plan.shared,
                  gs.ratio_max,
                  gs.tokens > 0 ? -gs.ratio_min : -INFINITY}; /* the smallest, as a max */
    s_plan_release(&plan);
    bt_status rs = s_reduce_stats(self, v, 12, 2);
    st = st != BT_OK ? st : rs;
    if (st == BT_OK)
        st = s_update(self, lr, &grad_norm);
    else
        bt_zero_grad(bt_model_params(self->policy), bt_model_num_params(self->policy));
    if (st == BT_OK && stats) {
        double tok = v[7] > 0 ? v[7] : 1.0, mean = v[5] / tok;
        *stats =
            (bt_trainer_stats){.loss = v[1],
                               .pg_loss = v[2] / tok,
                               .kl = v[3] / tok,
                               .clip_frac = v[4] / tok,
                               .ratio_mean = mean,
                               .ratio_std = sqrt(fmax(v[9] / tok - mean * mean, 0.0)),
                               .ratio_max = v[12],
                               .ratio_min = v[7] > 0 ? -v[13] : 0,
                               .mismatch_kl = fmax(v[10] / tok, 0.0), /* >= 0 but for rounding */
                               .entropy = v[6] / tok,
                               .grad_norm = grad_norm,
                               .tokens = v[7],
                               .slots = v[8],
                               .shared = v[11],
                               .lr = lr,
                               .sequences = batch->n,
                               .version = self->version,
                               .micro_batch = self->cfg.micro_batch};
    }
    return st;
}

bt_status bt_trainer_grpo_step(bt_trainer_t *self, const bt_rollout_batch *batch,
                               const double *advantages, double lr, const bt_grpo_config *cfg,
                               bt_trainer_stats *stats) {
    BT_ASSERT(self && batch && advantages && cfg);
    bt_status st = s_units_begin(self);
    if (st == BT_OK)
        st = s_grpo_step(self, batch, advantages, lr, cfg, stats);
    return s_units_end(self, st);
}

/* ---- SFT ------------------------------------------------------------------------------------ */

/*  The supervised loss of rows [lo, hi) of batch (their share of the batch's mean NLL per
    completion token), with its gradients when backward is set; *slots gets the plan's. */
static bt_status s_sft_pass(bt_trainer_t *self, const bt_rollout_batch *batch, int64_t lo,
                            int64_t hi, bool backward, double *loss, double *tokens,
                            double *slots) {
    bt_status st = s_check_batch(self, batch);
    if (st != BT_OK)
        return st;
    *tokens = 0.0;
    *loss = 0.0;
    for (int64_t c = 0; c < batch->n; c++)
        *tokens += (double)s_trained(batch, c);
    if (!(*tokens > 0))
        return bt_fail(BT_EINVAL, "trainer: the batch has no completion tokens");
    s_plan plan;
    BT_TRY(s_plan_make(&self->cfg, batch, lo, hi, false, &plan));
    *slots = s_plan_slots(&plan);
    bt_ctx *ctx = bt_ctx_new();
    if (!ctx) {
        s_plan_release(&plan);
        return bt_fail(BT_ENOMEM, "trainer: out of memory");
    }
    bool grad = bt_set_grad_enabled(backward);
    int64_t rounds = plan.n;
    st = s_rounds(self, plan.n, &rounds);
    for (int64_t k = plan.n; k < rounds && st == BT_OK; k++)
        st = s_units_idle_round(self, backward); /* the collectives of the micro-batches below */
    for (int64_t k = 0; k < plan.n && st == BT_OK; k++) {
        s_micro m;
        st = s_micro_build(ctx, self->policy, batch, &plan, k, NULL, &m);
        if (st == BT_OK) {
            bt_tensor *logp = bt_model_token_logprobs_packed(self->policy, ctx, m.ids, m.seg, m.pos,
                                                             1.0, NULL); /* (R, T-1) */
            bt_tensor *l = bt_sft_loss(ctx, logp, m.cmask, *tokens);
            double value = 0.0;
            st = l ? bt_item(l, &value) : BT_ETORCH;
            if (st == BT_OK && backward)
                st = bt_backward(l);
            if (st == BT_OK && self->cfg.shard == BT_SHARD_PARAMETERS)
                st = s_unit_release(self, self->sh.n_units - 1, backward);
            *loss += value;
        }
        bt_ctx_reset(ctx);
    }
    bt_set_grad_enabled(grad);
    bt_ctx_destroy(&ctx);
    s_plan_release(&plan);
    return st;
}

static bt_status s_sft_step(bt_trainer_t *self, const bt_rollout_batch *batch, double lr,
                            bt_trainer_stats *stats) {
    double loss = 0.0, tokens = 0.0, slots = 0.0, grad_norm = 0.0;
    int64_t lo, hi;
    s_rows(self, batch->n, &lo, &hi);
    bt_status st = s_sft_pass(self, batch, lo, hi, true, &loss, &tokens, &slots);
    double v[] = {st == BT_OK, loss, slots};
    bt_status rs = s_reduce_stats(self, v, 3, 0);
    st = st != BT_OK ? st : rs;
    loss = v[1];
    if (st == BT_OK)
        st = s_update(self, lr, &grad_norm);
    else
        bt_zero_grad(bt_model_params(self->policy), bt_model_num_params(self->policy));
    if (st == BT_OK && stats)
        *stats = (bt_trainer_stats){.loss = loss,
                                    .grad_norm = grad_norm,
                                    .tokens = tokens,
                                    .slots = v[2],
                                    .lr = lr,
                                    .sequences = batch->n,
                                    .version = self->version};
    return st;
}

bt_status bt_trainer_sft_step(bt_trainer_t *self, const bt_rollout_batch *batch, double lr,
                              bt_trainer_stats *stats) {
    BT_ASSERT(self && batch);
    bt_status st = s_units_begin(self);
    if (st == BT_OK)
        st = s_sft_step(self, batch, lr, stats);
    return s_units_end(self, st);
}

bt_status bt_trainer_sft_loss(bt_trainer_t *self, const bt_rollout_batch *batch, double *loss) {
    BT_ASSERT(self && batch && loss);
    double tokens = 0.0, slots = 0.0;
    bt_status st = s_units_begin(self);
    if (st == BT_OK)
        st = s_sft_pass(self, batch, 0, batch->n, false, loss, &tokens, &slots);
    return s_units_end(self, st);
}

/* ---- the whole state as a message (snapshot and restore TASK/RESULT) ----------------------- */

/*  "param.NAME", "exp_avg.NAME", "exp_avg_sq.NAME", "ref.NAME"; a sharded trainer's moments are
    "exp_avg.shard-R-of-N" and "exp_avg_sq.shard-R-of-N" (this rank's slice of the flat moments). */
static const char *const s_state_kinds[4] = {"param.", "exp_avg.", "exp_avg_sq.", "ref."};

static void s_shard_name(char *buf, size_t len, const char *kind, int rank, int world) {
    snprintf(buf, len, "%sshard-%05d-of-%05d", kind, rank, world);
}

/*  A host copy of t as a tensor of msg. */
static bt_status s_add_host(bt_msg_t *msg, const char *name, bt_tensor *t) {
    int ndim = bt_ndim(t);
    int64_t shape[BT_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        shape[d] = bt_dim(t, d);
    size_t nbytes = (size_t)bt_numel(t) * sizeof(float);
    float *host = malloc(nbytes ? nbytes : 1);
    bt_status st = host ? bt_to_host(t, host, nbytes) : BT_ENOMEM;
    if (st != BT_OK) {
        free(host);
        return st;
    }
    return bt_msg_add_tensor_zero_copy(msg, name, BT_F32, ndim, shape, host, NULL, NULL);
}

bt_status bt_trainer_state_to_msg(bt_trainer_t *tr, bt_msg_t *msg) {
    bt_model *policy = bt_trainer_policy(tr), *ref = bt_trainer_reference(tr);
    bt_adamw *opt = bt_trainer_optimizer(tr);
    bt_tensor *const *params = bt_model_params(policy);
    bool sharded = tr->cfg.shard != BT_SHARD_NONE;
    BT_TRY(bt_msg_set_int(msg, "version", bt_trainer_version(tr)));
    BT_TRY(bt_msg_set_int(msg, "adam_steps", bt_adamw_steps(opt)));
    if (sharded)
        BT_TRY(s_shard_check(tr));
    bool whole = !sharded || tr->sh.rank == 0; /* the weights: rank 0's (every rank's are equal) */
    bt_status st = BT_OK;
    for (int i = 0; i < bt_model_num_params(policy) && st == BT_OK; i++) {
        bt_tensor *t[4] = {whole ? params[i] : NULL, NULL, NULL,
                           whole && ref ? bt_model_params(ref)[i] : NULL};
        if (!sharded)
            st = bt_adamw_moments(opt, i, &t[1], &t[2]);
        for (int k = 0; k < 4 && st == BT_OK; k++) { /* a host copy each: training goes on */
            char name[BT_WIRE_NAME_MAX];
            snprintf(name, sizeof name, "%s%s", s_state_kinds[k], bt_model_param_name(policy, i));
            if (t[k])
                st = s_add_host(msg, name, t[k]);
        }
    }
    if (st == BT_OK && sharded) {
        bt_tensor *m[2];
        st = bt_adamw_moments(opt, 0, &m[0], &m[1]);
        for (int k = 0; k < 2 && st == BT_OK; k++) {
            char name[BT_WIRE_NAME_MAX];
            s_shard_name(name, sizeof name, s_state_kinds[1 + k], tr->sh.rank, tr->sh.world);
            st = s_add_host(msg, name, m[k]);
        }
    }
    return st;
}

bt_status bt_trainer_state_merge(bt_msg_t *into, const bt_msg_t *from) {
    for (int i = 0; i < bt_msg_tensor_count(from); i++) {
        int rank, world;
        const char *name = bt_msg_tensor_at(from, i).name;
        if ((sscanf(name, "exp_avg.shard-%d-of-%d", &rank, &world) == 2 ||
             sscanf(name, "exp_avg_sq.shard-%d-of-%d", &rank, &world) == 2))
            BT_TRY(bt_msg_add_tensor_shared(into, from, i));
    }
    return BT_OK;
}

/*  The number of ranks whose moment shards msg holds (their names), or 0 when it holds
    per-parameter moments. */
static int s_msg_shards(const bt_msg_t *msg) {
    for (int i = 0; i < bt_msg_tensor_count(msg); i++) {
        int rank, world;
        if (sscanf(bt_msg_tensor_at(msg, i).name, "exp_avg.shard-%d-of-%d", &rank, &world) == 2 &&
            world > 0)
            return world;
    }
    return 0;
}

/*  Elements [lo, lo + len) of moment kind ("exp_avg." or "exp_avg_sq.") of the flat parameters
    into out (zeros past their end), from msg's per-parameter tensors or its shards. */
static bt_status s_moment_range(const bt_msg_t *msg, const bt_model *policy, int shards,
                                const char *kind, int64_t lo, int64_t len, float *out) {
    memset(out, 0, sizeof *out * (size_t)len);
    int parts = shards ? shards : bt_model_num_params(policy);
    int64_t at = 0, hi = lo + len, first = -1;
    for (int k = 0; k < parts; k++) {
        char name[BT_WIRE_NAME_MAX];
        bt_msg_tensor m;
        if (shards) {
            s_shard_name(name, sizeof name, kind, k, shards);
            BT_TRY(bt_msg_get_tensor(msg, name, BT_F32, 1, &m));
        } else {
            snprintf(name, sizeof name, "%s%s", kind, bt_model_param_name(policy, k));
            const bt_tensor *p = bt_model_params((bt_model *)policy)[k];
            BT_TRY(bt_msg_get_tensor(msg, name, BT_F32, bt_ndim(p), &m));
            for (int d = 0; d < m.ndim; d++)
                if (m.shape[d] != bt_dim(p, d))
                    return bt_fail(BT_EFORMAT, "trainer state: %s: shape differs from the model's",
                                   name);
        }
        int64_t n = (int64_t)(m.nbytes / sizeof(float));
        first = k == 0 ? n : first;
        if (shards && n != first) /* the layout: every shard the same size */
            return bt_fail(BT_EFORMAT, "trainer state: %s: shards differ in size", name);
        int64_t a = at > lo ? at : lo, b = at + n < hi ? at + n : hi;
        if (a < b) /* frames are not aligned: memcpy */
            memcpy(out + (a - lo), (const char *)m.data + sizeof(float) * (size_t)(a - at),
                   sizeof(float) * (size_t)(b - a));
        at += n;
    }
    if (!shards || at >= s_param_elements(policy))
        return BT_OK;
    return bt_fail(BT_EFORMAT,
                   "trainer state: its %d shards hold %lld of the model's %lld elements", shards,
                   (long long)at, (long long)s_param_elements(policy));
}

/*  Host floats into t (float32, numel(t) of them). */
static bt_status s_copy_in(bt_ctx *ctx, bt_tensor *t, const float *host) {
    int ndim = bt_ndim(t);
    int64_t shape[BT_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        shape[d] = bt_dim(t, d);
    bt_tensor *src = bt_from_host(ctx, BT_F32, bt_device_of(t), ndim, shape, host);
    bt_status st = src ? bt_copy_(t, src) : BT_ETORCH;
    bt_ctx_reset(ctx);
    return st;
}

/*  The moments of msg (either layout) into tr's (either layout). */
static bt_status s_moments_from_msg(const bt_msg_t *msg, bt_trainer_t *tr, bt_ctx *ctx) {
    bt_model *policy = bt_trainer_policy(tr);
    bt_adamw *opt = bt_trainer_optimizer(tr);
    int shards = s_msg_shards(msg);
    bt_status st = BT_OK;
    if (tr->cfg.shard != BT_SHARD_NONE) {
        float *host = malloc(sizeof *host * (size_t)tr->sh.size);
        if (!host)
            return bt_fail(BT_ENOMEM, "trainer: out of memory");
        bt_tensor *m[2];
        st = bt_adamw_moments(opt, 0, &m[0], &m[1]);
        for (int k = 0; k < 2 && st == BT_OK; k++) {
            st = s_moment_range(msg, policy, shards, s_state_kinds[1 + k],
                                tr->sh.rank * tr->sh.size, tr->sh.size, host);
            if (st == BT_OK)
                st = s_copy_in(ctx, m[k], host);
        }
        free(host);
        return st;
    }
    int64_t at = 0;
    for (int i = 0; i < bt_model_num_params(policy) && st == BT_OK; i++) {
        bt_tensor *m[2], *p = bt_model_params(policy)[i];
        int64_t n = bt_numel(p);
        float *host = malloc(sizeof *host * (size_t)(n ? n : 1));
        st = host ? bt_adamw_moments(opt, i, &m[0], &m[1]) : BT_ENOMEM;
        for (int k = 0; k < 2 && st == BT_OK; k++) {
            st = s_moment_range(msg, policy, shards, s_state_kinds[1 + k], at, n, host);
            if (st == BT_OK)
                st = s_copy_in(ctx, m[k], host);
        }
        free(host);
        at += n;
    }
    return st;
}

bt_status bt_trainer_state_from_msg(const bt_msg_t *msg, int64_t version, bt_trainer_t *tr) {
    bt_model *policy = bt_trainer_policy(tr), *ref = bt_trainer_reference(tr);
    bt_tensor *const *params = bt_model_params(policy);
    char first_ref[BT_WIRE_NAME_MAX]; /* a state saved with a reference restores it too */
    snprintf(first_ref, sizeof first_ref, "ref.%s", bt_model_param_name(policy, 0));
    bool with_ref = false;
    for (int i = 0; ref && i < bt_msg_tensor_count(msg) && !with_ref; i++)
        with_ref = !strcmp(bt_msg_tensor_at(msg, i).name, first_ref);
    int64_t steps;
    BT_TRY(bt_msg_get_int(msg, "adam_steps", 0, BT_WIRE_INT_MAX, &steps));
    bt_ctx *ctx = bt_ctx_new();
    if (!ctx)
        return BT_ENOMEM;
    bool grad = bt_set_grad_enabled(false);
    bt_status st = tr->cfg.shard == BT_SHARD_PARAMETERS ? s_materialize(tr) : BT_OK;
    for (int i = 0; i < bt_model_num_params(policy) && st == BT_OK; i++) {
        bt_tensor *t[2] = {params[i], with_ref ? bt_model_params(ref)[i] : NULL};
        for (int k = 0; k < 2 && t[k] && st == BT_OK; k++) {
            char name[BT_WIRE_NAME_MAX];
            snprintf(name, sizeof name, "%s%s", s_state_kinds[3 * k],
                     bt_model_param_name(policy, i));
            bt_msg_tensor m;
            st = bt_msg_get_tensor(msg, name, BT_F32, bt_ndim(params[i]), &m);
            for (int d = 0; st == BT_OK && d < m.ndim; d++)
                if (m.shape[d] != bt_dim(params[i], d))
                    st = bt_fail(BT_EFORMAT, "trainer state: %s: shape differs from the model's",
                                 name);
            if (st != BT_OK)
                break;
            float *host = malloc(m.nbytes ? m.nbytes : 1); /* frames are not aligned */
            if (!host) {
                st = BT_ENOMEM;
                break;
            }
            memcpy(host, m.data, m.nbytes);
            st = s_copy_in(ctx, t[k], host);
            free(host);
        }
    }
    /* a sharded trainer's layout: its group's as it is now, its master slice from the weights */
    if (st == BT_OK && tr->cfg.shard != BT_SHARD_NONE)
        st = s_shard_form(tr, steps);
    if (st == BT_OK)
        st = s_moments_from_msg(msg, tr, ctx);
    bt_set_grad_enabled(grad);
    bt_ctx_destroy(&ctx);
    if (st == BT_OK) {
        bt_adamw_set_steps(bt_trainer_optimizer(tr), steps);
        bt_trainer_set_version(tr, version);
    }
    return st;
}
