/*  tensor.h — the ATen shim: tensors, autograd, AdamW and generators from libtorch behind a C API.
    Threading: a context, its tensors, a generator and an optimizer belong to one thread at a time;
    grad mode and the last error are per thread.  Lifetime: a tensor lives until its context is
   reset or destroyed; parameters live in a long-lived context.

    Errors: a function returning bt_status returns BT_OK or a negative code.  A function returning a
    tensor returns NULL on failure.  Either way the message is in bt_last_error().  An op given a
    NULL input returns NULL at once and keeps the first error, so a chain of ops can be checked once
    at its end.  No C++ exception crosses this header. */
#ifndef BATON_TENSOR_H
#define BATON_TENSOR_H

#include "baton/dtype.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_tensor bt_tensor;
typedef struct bt_ctx bt_ctx;
typedef struct bt_gen bt_gen;
typedef struct bt_adamw bt_adamw;

typedef enum bt_device_type { BT_DEVICE_CPU = 0, BT_DEVICE_CUDA = 1 } bt_device_type;

typedef struct bt_device {
    bt_device_type type;
    int32_t index; /* CUDA ordinal; 0 for the CPU */
} bt_device;

/* ---- devices (dtypes: dtype.h)
 * ---------------------------------------------------------------------- */
bt_device bt_cpu(void);
/*  Parses "cpu", "cuda" or "cuda:N".  Does not check that the device exists. */
bt_status bt_device_parse(const char *text, bt_device *out);
/*  Writes "cpu" or "cuda:N" into buf. */
void bt_device_format(bt_device device, char *buf, size_t len);
bool bt_cuda_is_available(void);
int bt_cuda_device_count(void);

/* ---- runtime -------------------------------------------------------------------------------- */
void bt_set_num_threads(int n);
int bt_get_num_threads(void);
/*  Applies BATON_THREADS (an integer in [1, 4096]) when set; unset keeps libtorch's default and
    sizes OpenBLAS's own pool to it (OpenBLAS otherwise starts a thread per CPU, which spin after
    each call).  BT_EINVAL naming the variable when it is malformed. */
bt_status bt_threads_from_env(void);
/*  "1.13.0" or similar.  Static string. */
const char *bt_torch_version(void);
bool bt_torch_has_cuda(void);

/* ---- mixed precision (as torch.autocast) ----------------------------------------------------
    Inside a scope, on the scope's device type and this thread only, the matrix products (linear,
    matmul, attention) cast their inputs to the scope's dtype and return it, as torch.autocast
    does; everything else keeps the dtypes it is given, and the tensors the products read (float32
    master weights) are not changed.  Scopes nest; leaving the outermost drops the casts of weights
    it cached, so an optimizer step after it is seen by the next scope.  Run the backward pass
    outside the scope, as PyTorch advises. */
typedef struct bt_autocast {
    bool active;       /* the scope changed the thread's state and bt_autocast_exit restores it */
    bool prev_enabled; /* what bt_autocast_enter found */
    int32_t prev_dtype;
    bt_device_type device_type;
} bt_autocast;

/*  Enters a scope on device's type with dtype BT_BF16 or BT_F16; BT_F32 enters an empty scope that
    changes nothing.  BT_EINVAL for another dtype.  Leave it with bt_autocast_exit, on the same
    thread, inner scopes first. */
bt_status bt_autocast_enter(bt_device device, bt_dtype dtype, bt_autocast *scope);
void bt_autocast_exit(bt_autocast *scope);

/* ---- device memory ------------------------------------------------------------------------- */
/*  Gives the device memory that libtorch's caching allocator holds but no tensor uses back to the
    driver (CUDA's emptyCache), so another process or role on the GPU can have it; call it after
    freeing a model, a trainer or a large batch.  A no-op on the CPU and in a build without CUDA.
    Memory still in use is untouched. */
void bt_device_release_cache(bt_device device);
/*  Bytes in use by tensors now and at the most since the process started, and bytes the caching
    allocator holds (in use or cached), on a CUDA device; any pointer may be NULL.  On the CPU:
    while the calling thread tracks memory (bt_memory_tracking_begin), the bytes of the CPU tensors
    it allocated since tracking began and still holds, their most since then (or since the last
    begin), and reserved = allocated (the CPU allocator caches nothing); else all 0.  All 0 on CUDA
    in a build without CUDA. */
bt_status bt_device_memory(bt_device device, size_t *allocated, size_t *peak, size_t *reserved);
/*  Bytes a new allocation on device may take now: on the CPU the kernel's MemAvailable
    (/proc/meminfo), on CUDA the driver's free memory plus what the caching allocator holds unused.
    BT_EIO / BT_ETORCH when it cannot be read. */
bt_status bt_device_available(bt_device device, size_t *bytes);
/*  CPU memory tracking, per thread: c10's CPU allocator reports each allocation and free to the
    thread's counter (its memory-profiling hook, c10::ThreadLocalDebugInfo), which bt_device_memory
    reads.  The counter sees the bytes ATen asked for (posix_memalign of nbytes, 64-byte aligned),
    not RSS: neither libtorch's own code and arenas nor malloc's overhead.  It counts what this
    thread allocates and frees while it is on (autograd's backward on the CPU runs on the calling
    thread); it misses allocations and frees made on other threads, ATen's intra-op workers
    (at::parallel_for bodies) among them, which hold little (bt_set_num_threads(1) for an exact
    figure), and does not count the frees of tensors allocated before it began (c10 logs a warning
    to stderr for one in 1000 of those).  While it is on, c10 keeps a table of the tracked blocks
    under a mutex: a cost per allocation; for measurements, not production runs.
    bt_memory_tracking_begin starts counting at 0 (or, when already on, sets the peak to what is
    allocated now); bt_memory_tracking_end stops, on the thread that began. */
bt_status bt_memory_tracking_begin(void);
void bt_memory_tracking_end(void);
bool bt_memory_is_tracking(void);

/* ---- contexts (arenas of tensors) ----------------------------------------------------------- */
/*  Caller owns the result; destroy with bt_ctx_destroy(). */
bt_ctx *bt_ctx_new(void);
void bt_ctx_destroy(bt_ctx **self_p);
/*  Releases every tensor made in the context; their handles become invalid. */
void bt_ctx_reset(bt_ctx *self);
/*  Number of live tensor handles in the context. */
size_t bt_ctx_size(const bt_ctx *self);

/* ---- creation and host I/O ------------------------------------------------------------------ */
bt_tensor *bt_zeros(bt_ctx *ctx, bt_dtype dtype, bt_device device, int ndim, const int64_t *shape);
bt_tensor *bt_full(bt_ctx *ctx, bt_dtype dtype, bt_device device, int ndim, const int64_t *shape,
                   double value);
/*  0, 1, ..., n-1. */
bt_tensor *bt_arange(bt_ctx *ctx, bt_dtype dtype, bt_device device, int64_t n);
/*  Standard normal draws from gen, on gen's device. */
bt_tensor *bt_randn(bt_ctx *ctx, bt_gen *gen, bt_dtype dtype, int ndim, const int64_t *shape);
/*  Copies numel * bt_dtype_size(dtype) bytes from host memory. */
bt_tensor *bt_from_host(bt_ctx *ctx, bt_dtype dtype, bt_device device, int ndim,
                        const int64_t *shape, const void *data);
/*  Copies the tensor's elements, in its own dtype and row-major order, into dst; nbytes must equal
    numel * element size. */
bt_status bt_to_host(const bt_tensor *t, void *dst, size_t nbytes);
/*  The value of a one-element tensor as a double. */
bt_status bt_item(const bt_tensor *t, double *out);
/*  Raw pointer to the first element (host or device memory).  Fails unless t is contiguous.
    Borrowed: valid while t lives. */
void *bt_data_ptr(bt_tensor *t);

/* ---- queries -------------------------------------------------------------------------------- */
int bt_ndim(const bt_tensor *t);
/*  Size of dimension dim; negative dims count from the end. */
int64_t bt_dim(const bt_tensor *t, int dim);
int64_t bt_numel(const bt_tensor *t);
bt_dtype bt_dtype_of(const bt_tensor *t);
bt_device bt_device_of(const bt_tensor *t);

/* ---- conversion, copies, views -------------------------------------------------------------- */
bt_tensor *bt_to_dtype(bt_ctx *ctx, bt_tensor *t, bt_dtype dtype);
bt_tensor *bt_to_device(bt_ctx *ctx, bt_tensor *t, bt_device device);
bt_tensor *bt_contiguous(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_clone(bt_ctx *ctx, bt_tensor *t);
/*  Same storage, cut from the autograd graph. */
bt_tensor *bt_detach(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_reshape(bt_ctx *ctx, bt_tensor *t, int ndim, const int64_t *shape);
bt_tensor *bt_transpose(bt_ctx *ctx, bt_tensor *t, int dim0, int dim1);
bt_tensor *bt_permute(bt_ctx *ctx, bt_tensor *t, int ndim, const int64_t *dims);
bt_tensor *bt_unsqueeze(bt_ctx *ctx, bt_tensor *t, int dim);
bt_tensor *bt_expand(bt_ctx *ctx, bt_tensor *t, int ndim, const int64_t *shape);
/*  Elements start, start+step, ... < end along dim (a view). */
bt_tensor *bt_slice(bt_ctx *ctx, bt_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
bt_tensor *bt_cat(bt_ctx *ctx, bt_tensor *const *ts, int n, int dim);
bt_tensor *bt_index_select(bt_ctx *ctx, bt_tensor *t, int dim, bt_tensor *index);
/*  In place: copies src (broadcast) into dst, which may be a view.  Not recorded by autograd
    when grad mode is off. */
bt_status bt_copy_(bt_tensor *dst, bt_tensor *src);
/*  In place: dst's slices at index (BT_I64, 1-D) along dim become src's, in order (as
    Tensor.index_copy_); dst may be a view. */
bt_status bt_index_copy_(bt_tensor *dst, int dim, bt_tensor *index, bt_tensor *src);

/* ---- elementwise (broadcasting) ------------------------------------------------------------- */
bt_tensor *bt_add(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
bt_tensor *bt_sub(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
bt_tensor *bt_mul(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
bt_tensor *bt_div(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
bt_tensor *bt_add_scalar(bt_ctx *ctx, bt_tensor *t, double s);
bt_tensor *bt_mul_scalar(bt_ctx *ctx, bt_tensor *t, double s);
bt_tensor *bt_pow_scalar(bt_ctx *ctx, bt_tensor *t, double exponent);
bt_tensor *bt_neg(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_exp(bt_ctx *ctx, bt_tensor *t);
/*  Natural logarithm (bt_log is the logger). */
bt_tensor *bt_ln(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_sqrt(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_rsqrt(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_abs(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_clamp(bt_ctx *ctx, bt_tensor *t, double lo, double hi);
bt_tensor *bt_minimum(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
bt_tensor *bt_maximum(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
/*  cond ? a : b, with cond a BT_BOOL tensor. */
bt_tensor *bt_where(bt_ctx *ctx, bt_tensor *cond, bt_tensor *a, bt_tensor *b);
/*  BT_BOOL results. */
bt_tensor *bt_gt_scalar(bt_ctx *ctx, bt_tensor *t, double s);
bt_tensor *bt_lt_scalar(bt_ctx *ctx, bt_tensor *t, double s);
bt_tensor *bt_eq_scalar(bt_ctx *ctx, bt_tensor *t, double s);
bt_tensor *bt_eq(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
bt_tensor *bt_logical_and(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
bt_tensor *bt_logical_or(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
bt_tensor *bt_logical_not(bt_ctx *ctx, bt_tensor *t);
/*  Where mask (BT_BOOL, broadcast) is true the result holds value. */
bt_tensor *bt_masked_fill(bt_ctx *ctx, bt_tensor *t, bt_tensor *mask, double value);

/* ---- linear algebra and layers -------------------------------------------------------------- */
/*  Batched, broadcasting matrix product. */
bt_tensor *bt_matmul(bt_ctx *ctx, bt_tensor *a, bt_tensor *b);
/*  x @ w^T, w of shape (out, in) as in Hugging Face checkpoints. */
bt_tensor *bt_linear(bt_ctx *ctx, bt_tensor *x, bt_tensor *w);
/*  Rows of weight (V, C) selected by ids (any shape, BT_I64): result (..., C). */
bt_tensor *bt_embedding(bt_ctx *ctx, bt_tensor *weight, bt_tensor *ids);
/*  RMSNorm (Zhang & Sennrich 2019): x * rsqrt(mean(x^2, -1) + eps) * w, computed in float32
    (float64 for float64 input). */
bt_tensor *bt_rms_norm(bt_ctx *ctx, bt_tensor *x, bt_tensor *w, double eps);
/*  Rotary tables for positions (B, T) BT_I64: cos and sin of shape (B, 1, T, head_dim), Hugging
    Face "rotate_half" layout (frequency i used at i and i + head_dim/2).  The inverse frequencies
    are theta^(-2i / head_dim) (in float32), or with inv_freq (head_dim / 2 values, not NULL) those
    (rope scaling: rope_scaling.h); both tables are multiplied by scale (1: none). */
bt_status bt_rope_tables(bt_ctx *ctx, bt_tensor *positions, int64_t head_dim, double theta,
                         const double *inv_freq, double scale, bt_dtype dtype, bt_tensor **cos_out,
                         bt_tensor **sin_out);
/*  x (B, H, T, D) rotated: x * cos + rotate_half(x) * sin. */
bt_tensor *bt_rope(bt_ctx *ctx, bt_tensor *x, bt_tensor *cos, bt_tensor *sin);
bt_tensor *bt_silu(bt_ctx *ctx, bt_tensor *t);
/*  gelu, tanh approximation (Hendrycks & Gimpel 2016; PyTorch's gelu(approximate="tanh")):
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
bt_tensor *bt_gelu_tanh(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_tanh(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_softmax(bt_ctx *ctx, bt_tensor *t, int dim);
bt_tensor *bt_log_softmax(bt_ctx *ctx, bt_tensor *t, int dim);
/*  Scaled dot-product attention.  q (B, H, Tq, D), k and v (B, Hkv, Tk, D) with H a multiple of
    Hkv (grouped-query attention).  allowed: BT_BOOL (B, 1, Tq, Tk), true where a query may attend;
    every row must allow at least one key.  Result (B, H, Tq, D). */
bt_tensor *bt_attention(bt_ctx *ctx, bt_tensor *q, bt_tensor *k, bt_tensor *v, bt_tensor *allowed);
/*  bt_attention with the scores q k^T scaled by scale (not 1/sqrt(D)) and, when softcap > 0,
    capped to softcap * tanh(scores / softcap) before the mask (Gemma 2's attn_logit_softcapping);
    the softmax in float32 (float64 for float64 input).  Matrix products and a softmax: no
    fused kernel takes a cap. */
bt_tensor *bt_attention_capped(bt_ctx *ctx, bt_tensor *q, bt_tensor *k, bt_tensor *v,
                               bt_tensor *allowed, double scale, double softcap);
/*  Elements of t along dim at the positions in index (BT_I64, same ndim). */
bt_tensor *bt_gather(bt_ctx *ctx, bt_tensor *t, int dim, bt_tensor *index);
/*  Copy of t with src written along dim at index. */
bt_tensor *bt_scatter(bt_ctx *ctx, bt_tensor *t, int dim, bt_tensor *index, bt_tensor *src);
/*  Per-row negative log-likelihood of targets under logits (N, V); result (N). */
bt_tensor *bt_cross_entropy(bt_ctx *ctx, bt_tensor *logits, bt_tensor *targets);

/* ---- reductions and ordering ---------------------------------------------------------------- */
/*  Cast to BT_F64 first for a float64 reduction. */
bt_tensor *bt_sum(bt_ctx *ctx, bt_tensor *t, int dim, bool keepdim);
bt_tensor *bt_sum_all(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_mean(bt_ctx *ctx, bt_tensor *t, int dim, bool keepdim);
bt_tensor *bt_mean_all(bt_ctx *ctx, bt_tensor *t);
bt_tensor *bt_max(bt_ctx *ctx, bt_tensor *t, int dim, bool keepdim);
bt_tensor *bt_argmax(bt_ctx *ctx, bt_tensor *t, int dim, bool keepdim);
bt_tensor *bt_cumsum(bt_ctx *ctx, bt_tensor *t, int dim);
bt_status bt_topk(bt_ctx *ctx, bt_tensor *t, int64_t k, int dim, bt_tensor **values,
                  bt_tensor **indices);
bt_status bt_sort(bt_ctx *ctx, bt_tensor *t, int dim, bool descending, bt_tensor **values,
                  bt_tensor **indices);
/*  One draw per row of probs (B, V) (unnormalised weights allowed): result (B, 1) BT_I64. */
bt_tensor *bt_multinomial(bt_ctx *ctx, bt_gen *gen, bt_tensor *probs);

/* ---- autograd ------------------------------------------------------------------------------- */
bt_status bt_set_requires_grad(bt_tensor *t, bool requires_grad);
bool bt_requires_grad(const bt_tensor *t);
/*  Backpropagates from a one-element tensor; gradients accumulate into leaves. */
bt_status bt_backward(bt_tensor *t);
/*  The accumulated gradient of a leaf (shares storage), or zeros when none has been computed. */
bt_tensor *bt_grad(bt_ctx *ctx, bt_tensor *t);
/*  Drops the gradients of n tensors (set to none). */
void bt_zero_grad(bt_tensor *const *ts, int n);
/*  Turns recording on or off for this thread; returns the previous setting. */
bool bt_set_grad_enabled(bool enabled);
/*  Activation checkpointing: y = fn(x) recorded as one node that keeps only x.  fn builds y from x
    with bt_ ops in the context it is given and reaches parameters and constants (rotary tables,
    masks: tensors that need no gradient) through user; it returns NULL on failure, the reason in
    bt_last_error().  It runs twice: now, without recording, and again during backward with
    recording on (under the autocast scope it first ran in), on a detached copy of x, when the
    incoming gradient is backpropagated through it: the parameters' gradients accumulate as a
    plain backward's would, and x's flows on.  So fn must compute the same function both times
    (no random ops).  Ownership: each run gets a context of its own, created and destroyed around
    it; fn's temporaries and its result live in it, and only the result's values survive (in the
    returned tensor, in ctx).  The user_size bytes at user are copied; the tensors they point to
    are borrowed and must stay valid until the backward pass through the result has run or ctx is
    reset.  With grad mode off or x needing no gradient, returns fn(ctx, x, user) itself. */
typedef bt_tensor *(*bt_checkpoint_fn)(bt_ctx *ctx, bt_tensor *x, void *user);
bt_tensor *bt_checkpoint(bt_ctx *ctx, bt_checkpoint_fn fn, const void *user, size_t user_size,
                         bt_tensor *x);
/*  t (a parameter: the same leaf, handle and gradient) takes src's storage, shape and dtype
    (same device): a sharded parameter is pointed at its gathered weights, or at an empty tensor
    when they are freed; a frozen one is held in another dtype. */
bt_status bt_set_data(bt_tensor *t, bt_tensor *src);
/*  Sets t's gradient to g (same shape and dtype; shares its storage), or drops it (NULL). */
bt_status bt_set_grad(bt_tensor *t, bt_tensor *g);
/*  Elements [lo, lo + len) of ts (float32; their gradients with grads, none counting as zeros)
    flattened and concatenated in order, zeros past their end: a new 1-D tensor in ctx. */
bt_tensor *bt_flat_range(bt_ctx *ctx, bt_tensor *const *ts, int n, bool grads, int64_t lo,
                         int64_t len);
/*  bt_checkpoint with hooks, each given the copied user bytes (NULL: none): after_forward once
    fn's first run is over (with grad mode off or x needing no gradient: after fn, the only run),
    after_backward once the gradient went back through the recomputed run (the parameters' .grad
    then hold this call's share).  A hook's failure is the call's (forward: NULL; backward: the
    bt_backward that ran it fails).  Sharded parameters (workers.shard "parameters") gather a
    layer's weights in fn and free them, their gradients reduce-scattered first, in the hooks. */
typedef bt_status (*bt_checkpoint_hook)(void *user);
typedef struct bt_checkpoint_hooks {
    bt_checkpoint_hook after_forward, after_backward;
} bt_checkpoint_hooks;
bt_tensor *bt_checkpoint_hooked(bt_ctx *ctx, bt_checkpoint_fn fn, const void *user,
                                size_t user_size, bt_tensor *x, bt_checkpoint_hooks hooks);
/*  Global gradient-norm clipping (as torch.nn.utils.clip_grad_norm_): the norm over all gradients
    is computed in float64 into *total_norm; if it exceeds max_norm every gradient is scaled by
    max_norm / (total_norm + 1e-6).  Tensors without a gradient are skipped. */
bt_status bt_clip_grad_norm(bt_tensor *const *params, int n, double max_norm, double *total_norm);

/* ---- AdamW (Loshchilov & Hutter 2019, as torch.optim.AdamW) --------------------------------- */
typedef struct bt_adamw_config {
    double beta1;        /* 0.9 */
    double beta2;        /* 0.999 */
    double eps;          /* 1e-8 */
    double weight_decay; /* 0.01, decoupled: p -= lr * wd * p */
} bt_adamw_config;

bt_adamw_config bt_adamw_defaults(void);
/*  The parameter handles are borrowed and must outlive the optimizer.  Caller owns the result;
    destroy with bt_adamw_destroy(). */
bt_adamw *bt_adamw_new(bt_tensor *const *params, int n, bt_adamw_config config);
void bt_adamw_destroy(bt_adamw **self_p);
/*  One update with learning rate lr of every parameter that has a gradient. */
bt_status bt_adamw_step(bt_adamw *self, double lr);
int64_t bt_adamw_steps(const bt_adamw *self);
void bt_adamw_set_steps(bt_adamw *self, int64_t steps);
/*  First and second moment of parameter i, for checkpoints.  Borrowed: valid while self lives;
    writing into them (bt_copy_) restores a saved state. */
bt_status bt_adamw_moments(bt_adamw *self, int i, bt_tensor **exp_avg, bt_tensor **exp_avg_sq);

/* ---- generators ----------------------------------------------------------------------------- */
/*  A seeded random generator on device.  Caller owns the result; destroy with bt_gen_destroy(). */
bt_gen *bt_gen_new(uint64_t seed, bt_device device);
void bt_gen_destroy(bt_gen **self_p);
/*  Size in bytes of the serialised state. */
size_t bt_gen_state_size(const bt_gen *self);
bt_status bt_gen_get_state(const bt_gen *self, void *buf, size_t len);
bt_status bt_gen_set_state(bt_gen *self, const void *buf, size_t len);

/* ---- collectives: c10d process groups (Gloo on CPU, NCCL on CUDA) ---------------------------
    The ranks of a group meet through a rendezvous store (c10d's TCPStore) served by the controller;
    every formation of a group uses its own key prefix, so a re-formed group never reads an old
    formation's keys.  Collectives block until every rank took part, or fail after the group's
    timeout or as soon as a peer's connection drops. */
typedef struct bt_store bt_store;
typedef struct bt_group bt_group;

/*  A rendezvous store listening on every interface at port (0: a free port, written to
 *port_out).  Caller owns the result; destroy with bt_store_destroy(). */
bt_store *bt_store_serve(int port, int *port_out);
void bt_store_destroy(bt_store **self_p);

typedef struct bt_group_config {
    const char *store_host; /* where the store listens, as this rank reaches it */
    int store_port;
    const char *prefix;     /* this formation's keys, e.g. "g3" */
    int rank, world;        /* 0 <= rank < world */
    const char *local_addr; /* the local address collective traffic binds to (an IP) */
    bt_device device;       /* CPU: Gloo; CUDA: NCCL (built with BATON_HAVE_NCCL) */
    int64_t timeout_ms;     /* for the rendezvous and each collective */
} bt_group_config;

typedef enum bt_reduce { BT_REDUCE_SUM = 0, BT_REDUCE_MAX = 1 } bt_reduce;

/*  Joins the group; blocks until all world ranks joined or timeout_ms passed.  Caller owns the
    result; destroy with bt_group_destroy().  NULL on failure, the reason in bt_last_error(). */
bt_group *bt_group_new(const bt_group_config *cfg);
void bt_group_destroy(bt_group **self_p);
int bt_group_rank(const bt_group *self);
int bt_group_world(const bt_group *self);
/*  True once a collective failed: the group cannot be used again.  Destroy it soon: that closes
    its connections, so peers still waiting in a collective fail at once instead of timing out. */
bool bt_group_broken(const bt_group *self);
/*  Sums the gradients of params over the ranks, in place, as one flat buffer per dtype; a
    parameter without a gradient takes part with zeros (and has one afterwards). */
bt_status bt_group_allreduce_grads(bt_group *self, bt_tensor *const *params, int n);
/*  Sharded training state (workers.shard; ZeRO).  The float32 tensors params[0..n) seen as one
    flat vector (in order, row-major), padded with zeros to world x S elements and cut into world
    shards of S elements: rank r owns [r S, (r + 1) S).  A NULL group is a group of one (rank 0
    of 1, no communication).

    The gradients of params (none counts as zeros) summed over the ranks, this rank's shard of
    the sum written into shard (1-D float32, S elements; world x S >= the parameters' elements),
    or added to it with accumulate. */
bt_status bt_group_reduce_scatter_grads(bt_group *self, bt_tensor *const *params, int n,
                                        bt_tensor *shard, bool accumulate);
/*  Re-points the float32 tensors ts (parameters: they stay the same leaves, gradients and
    handles) at consecutive slices of one new flat buffer of len elements, zeros past theirs, and
    returns it (1-D, in ctx): writing a slice of it updates them in place. */
bt_tensor *bt_flatten_into(bt_ctx *ctx, bt_tensor *const *ts, int n, int64_t len);
/*  flat (1-D, contiguous, world equal slices): every rank's own slice r copied into every rank's
    slice r, in place.  A no-op for a group of one (NULL). */
bt_status bt_group_allgather_flat(bt_group *self, bt_tensor *flat);
/*  Reduces n host doubles over the ranks, in place. */
bt_status bt_group_allreduce_f64(bt_group *self, double *values, int n, bt_reduce op);
/*  Copies root's tensors into every rank's, in place (same shapes and dtypes everywhere). */
bt_status bt_group_broadcast(bt_group *self, bt_tensor *const *ts, int n, int root);
/*  Sums t (contiguous; a view is written through) over the ranks into root's t, in place; the
    other ranks' t are left undefined. */
bt_status bt_group_reduce(bt_group *self, bt_tensor *t, int root);

#ifdef __cplusplus
}
#endif
#endif
