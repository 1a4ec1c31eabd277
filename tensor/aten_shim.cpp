/*  aten_shim.cpp — the only C++ file: implements include/baton/tensor.h on libtorch (ATen).
    Every entry point catches C++ exceptions and turns them into a bt_status or a NULL tensor with
    the message in bt_last_error(). */
#include "baton/tensor.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/GradMode.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

/* c10d's headers declare the Gloo (and NCCL) process groups only under these macros. */
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef BATON_HAVE_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
/* The caching allocator's controls exist only in a CUDA build of libtorch (CMakeLists.txt sets
   BATON_HAVE_TORCH_CUDA from Torch's TORCH_CUDA_LIBRARIES, the test NCCL's switch also makes). */
#ifdef BATON_HAVE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <malloc.h>
#include <mutex>
#include <new>
#include <string>
#include <vector>

struct bt_tensor {
    at::Tensor t;
};

struct bt_ctx {
    std::vector<bt_tensor *> items;
};

/*  Sampling ops lock the generator themselves; only state get/set take its lock here. */
struct bt_gen {
    mutable at::Generator g; /* mutable: reading the state takes the generator's lock */
    bt_device device;
};

struct bt_adamw {
    std::vector<at::Tensor> params; /* shallow copies sharing the caller's parameters */
    std::vector<bt_tensor> exp_avg, exp_avg_sq;
    bt_adamw_config config;
    int64_t steps;
};

/*  Tensor buffers are large and short-lived.  glibc serves big blocks with fresh mmap()s whose
    pages fault in one by one (measured: an 8 MiB temporary costs ~27 ms of page faults here, a
    reused one ~1 ms; bench/RESULTS.md).  So baton keeps freed memory in the heap for reuse: no
    mmap()ed blocks, no trimming.  RSS stays at the high-water mark, as with PyTorch's caching
    allocators.  BATON_MALLOC=system keeps glibc's defaults. */
static const bool s_malloc_tuned = [] {
    const char *env = getenv("BATON_MALLOC");
    if (env && strcmp(env, "system") == 0)
        return false;
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1); /* as size_t: never */
    mallopt(M_TOP_PAD, 64 << 20);
    return true;
}();

/* ---- helpers --------------------------------------------------------------------------------- */

static bool s_error_is_empty() {
    return bt_last_error()[0] == '\0';
}

/*  An op was given a NULL input: keep the error that produced it, or say what happened. */
static bt_tensor *s_null_input(const char *op) {
    if (s_error_is_empty())
        bt_fail(BT_EINVAL, "%s: NULL tensor argument", op);
    return nullptr;
}

static bt_status s_null_input_status(const char *op) {
    if (s_error_is_empty())
        bt_fail(BT_EINVAL, "%s: NULL tensor argument", op);
    return BT_EINVAL;
}

/*  An allocator's "out of memory" in words a user can act on: "OP: out of memory (tried to
    allocate 123 bytes)", or with the allocator's own text when it names no size.  CUDA throws
    c10::OutOfMemoryError ("CUDA out of memory. Tried to allocate 2.00 GiB ..."); the CPU allocator
    a plain c10::Error ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 123
    bytes. Error code 12 (Cannot allocate memory)", or "not enough memory: ..."). */
static bt_status s_fail_oom(const char *op, const char *what) {
    const char *at = strcasestr(what, "allocate ");
    while (at && !isdigit((unsigned char)at[9])) /* "can't allocate memory: you tried to ..." */
        at = strcasestr(at + 9, "allocate ");
    size_t n = at ? strspn(at + 9, "0123456789.") : 0;
    if (n > 0) {
        const char *unit = at + 9 + n + (at[9 + n] == ' ');
        size_t u = strspn(unit, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
        return bt_fail(BT_ENOMEM, "%s: out of memory (tried to allocate %.*s%s%.*s)", op, (int)n,
                       at + 9, u ? " " : "", (int)u, unit);
    }
    return bt_fail(BT_ENOMEM, "%s: out of memory: %s", op, what);
}

static bool s_is_oom(const char *what) {
    return strstr(what, "not enough memory") || strcasestr(what, "can't allocate memory") ||
           strcasestr(what, "cannot allocate memory") || strstr(what, "DefaultCPUAllocator");
}

static bt_status s_fail_exception(const char *op) {
    try {
        throw;
    } catch (const c10::OutOfMemoryError &e) {
        return s_fail_oom(op, e.what_without_backtrace());
    } catch (const c10::Error &e) {
        if (s_is_oom(e.what_without_backtrace()))
            return s_fail_oom(op, e.what_without_backtrace());
        return bt_fail(BT_ETORCH, "%s: %s", op, e.what_without_backtrace());
    } catch (const std::invalid_argument &e) {
        return bt_fail(BT_EINVAL, "%s: %s", op, e.what());
    } catch (const std::bad_alloc &) {
        return bt_fail(BT_ENOMEM, "%s: out of memory", op);
    } catch (const std::exception &e) {
        return bt_fail(BT_ETORCH, "%s: %s", op, e.what());
    } catch (...) {
        return bt_fail(BT_ETORCH, "%s: unknown C++ exception", op);
    }
}

static bt_tensor *s_wrap(bt_ctx *ctx, at::Tensor t) {
    bt_tensor *h = new bt_tensor{std::move(t)};
    ctx->items.push_back(h);
    return h;
}

/*  Runs f() -> at::Tensor, wraps the result in ctx; NULL with the message on failure. */
template <class F> static bt_tensor *s_op(bt_ctx *ctx, const char *op, F f) {
    if (!ctx) {
        bt_fail(BT_EINVAL, "%s: NULL context", op);
        return nullptr;
    }
    try {
        return s_wrap(ctx, f());
    } catch (...) {
        s_fail_exception(op);
        return nullptr;
    }
}

template <class F> static bt_status s_status(const char *op, F f) {
    try {
        f();
        return BT_OK;
    } catch (...) {
        return s_fail_exception(op);
    }
}

#define NEED1(op, a)                                                                               \
    if (!(a))                                                                                      \
    return s_null_input(op)
#define NEED2(op, a, b)                                                                            \
    if (!(a) || !(b))                                                                              \
    return s_null_input(op)
#define NEED3(op, a, b, c)                                                                         \
    if (!(a) || !(b) || !(c))                                                                      \
    return s_null_input(op)

static at::ScalarType s_scalar_type(bt_dtype d) {
    switch (d) {
    case BT_F32: return at::kFloat;
    case BT_F64: return at::kDouble;
    case BT_F16: return at::kHalf;
    case BT_BF16: return at::kBFloat16;
    case BT_I64: return at::kLong;
    case BT_I32: return at::kInt;
    case BT_U8: return at::kByte;
    case BT_BOOL: return at::kBool;
    }
    throw std::invalid_argument("unknown dtype " + std::to_string((int)d));
}

static bt_dtype s_bt_dtype(at::ScalarType s) {
    switch (s) {
    case at::kFloat: return BT_F32;
    case at::kDouble: return BT_F64;
    case at::kHalf: return BT_F16;
    case at::kBFloat16: return BT_BF16;
    case at::kLong: return BT_I64;
    case at::kInt: return BT_I32;
    case at::kByte: return BT_U8;
    case at::kBool: return BT_BOOL;
    default:
        throw std::invalid_argument(std::string("dtype not supported by baton: ") +
                                    c10::toString(s));
    }
}

static at::Device s_device(bt_device d) {
    if (d.type == BT_DEVICE_CUDA)
        return at::Device(at::kCUDA, (c10::DeviceIndex)d.index);
    return at::Device(at::kCPU);
}

static at::TensorOptions s_options(bt_dtype dtype, bt_device device) {
    return at::TensorOptions().dtype(s_scalar_type(dtype)).device(s_device(device));
}

static at::IntArrayRef s_shape(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > BT_MAX_DIMS)
        throw std::invalid_argument("ndim " + std::to_string(ndim) + " outside [0, " +
                                    std::to_string(BT_MAX_DIMS) + "]");
    if (ndim > 0 && !shape)
        throw std::invalid_argument("NULL shape");
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            throw std::invalid_argument("negative size " + std::to_string(shape[i]) +
                                        " in dimension " + std::to_string(i));
    return at::IntArrayRef(shape, (size_t)ndim);
}

/*  A target shape for reshape/expand: -1 is allowed (inferred / kept). */
static at::IntArrayRef s_shape_view(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > BT_MAX_DIMS || (ndim > 0 && !shape))
        throw std::invalid_argument("bad target shape (ndim " + std::to_string(ndim) + ")");
    return at::IntArrayRef(shape, (size_t)ndim);
}

/* ---- dtypes and devices ---------------------------------------------------------------------- */

extern "C" bt_device bt_cpu(void) {
    return bt_device{BT_DEVICE_CPU, 0};
}

extern "C" bt_status bt_device_parse(const char *text, bt_device *out) {
    if (!text || !out)
        return bt_fail(BT_EINVAL, "bt_device_parse: NULL argument");
    if (strcmp(text, "cpu") == 0) {
        *out = bt_cpu();
        return BT_OK;
    }
    if (strcmp(text, "cuda") == 0) {
        *out = bt_device{BT_DEVICE_CUDA, 0};
        return BT_OK;
    }
    if (strncmp(text, "cuda:", 5) == 0 && text[5] >= '0' && text[5] <= '9') {
        char *end = nullptr;
        long idx = strtol(text + 5, &end, 10);
        if (*end == '\0' && idx >= 0 && idx < 1024) {
            *out = bt_device{BT_DEVICE_CUDA, (int32_t)idx};
            return BT_OK;
        }
    }
    return bt_fail(BT_EINVAL, "device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"%s\"", text);
}

extern "C" void bt_device_format(bt_device device, char *buf, size_t len) {
    if (device.type == BT_DEVICE_CUDA)
        snprintf(buf, len, "cuda:%d", (int)device.index);
    else
        snprintf(buf, len, "cpu");
}

extern "C" bool bt_cuda_is_available(void) {
    try {
        return at::hasCUDA();
    } catch (...) {
        return false;
    }
}

extern "C" int bt_cuda_device_count(void) {
    try {
        return bt_cuda_is_available() ? (int)at::detail::getCUDAHooks().getNumGPUs() : 0;
    } catch (...) {
        return 0;
    }
}

/* ---- runtime --------------------------------------------------------------------------------- */

/*  at::set_num_threads sizes ATen's pool but not OpenBLAS's own: with libopenblas0-pthread a GEMM
    still used every core (and its threads spin a while after each call), so a worker limited to
    one thread took two.  OpenBLAS's setter is found at run time: another BLAS has none. */
static void s_set_threads(int n) {
    at::set_num_threads(n);
    using set_fn = void (*)(int);
    if (auto set = (set_fn)dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))
        set(n);
}

extern "C" void bt_set_num_threads(int n) {
    if (n > 0)
        s_set_threads(n);
}

extern "C" int bt_get_num_threads(void) {
    return at::get_num_threads();
}

extern "C" bt_status bt_threads_from_env(void) {
    const char *env = getenv("BATON_THREADS");
    if (!env || !*env) { /* ATen's default, and OpenBLAS's pool the same size, not every CPU */
        s_set_threads(at::get_num_threads());
        return BT_OK;
    }
    char *end = nullptr;
    long n = strtol(env, &end, 10);
    if (*end || n < 1 || n > 4096)
        return bt_fail(BT_EINVAL, "BATON_THREADS: expected an integer in [1, 4096], got \"%s\"",
                       env);
    s_set_threads((int)n);
    return BT_OK;
}

extern "C" const char *bt_torch_version(void) {
    return TORCH_VERSION;
}

extern "C" bool bt_torch_has_cuda(void) {
    try {
        return at::detail::getCUDAHooks().hasCUDA() || at::detail::getCUDAHooks().getNumGPUs() > 0;
    } catch (...) {
        return false;
    }
}

/* ---- mixed precision ------------------------------------------------------------------------- */

/*  libtorch 2.4 made autocast's controls per device type (the CPU- and CUDA-named ones before it
    are deprecated since). */
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
static bool s_autocast_enabled(at::DeviceType t) {
    return at::autocast::is_autocast_enabled(t);
}
static at::ScalarType s_autocast_dtype(at::DeviceType t) {
    return at::autocast::get_autocast_dtype(t);
}
static void s_autocast_set(at::DeviceType t, bool enabled, at::ScalarType dtype) {
    at::autocast::set_autocast_enabled(t, enabled);
    at::autocast::set_autocast_dtype(t, dtype);
}
#else
static bool s_autocast_enabled(at::DeviceType t) {
    return t == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
static at::ScalarType s_autocast_dtype(at::DeviceType t) {
    return t == at::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                          : at::autocast::get_autocast_cpu_dtype();
}
static void s_autocast_set(at::DeviceType t, bool enabled, at::ScalarType dtype) {
    if (t == at::kCUDA) {
        at::autocast::set_enabled(enabled);
        at::autocast::set_autocast_gpu_dtype(dtype);
    } else {
        at::autocast::set_cpu_enabled(enabled);
        at::autocast::set_autocast_cpu_dtype(dtype);
    }
}
#endif

extern "C" bt_status bt_autocast_enter(bt_device device, bt_dtype dtype, bt_autocast *scope) {
    if (!scope)
        return bt_fail(BT_EINVAL, "bt_autocast_enter: NULL scope");
    *scope = bt_autocast{false, false, 0, device.type};
    if (dtype == BT_F32)
        return BT_OK;
    if (dtype != BT_BF16 && dtype != BT_F16)
        return bt_fail(BT_EINVAL, "bt_autocast_enter: expected F32, BF16 or F16, got %s",
                       bt_dtype_name(dtype));
    return s_status("bt_autocast_enter", [&] {
        at::DeviceType t = s_device(device).type();
        scope->prev_enabled = s_autocast_enabled(t);
        scope->prev_dtype = (int32_t)s_autocast_dtype(t);
        s_autocast_set(t, true, s_scalar_type(dtype));
        at::autocast::increment_nesting();
        scope->active = true;
    });
}

extern "C" void bt_autocast_exit(bt_autocast *scope) {
    if (!scope || !scope->active)
        return;
    try {
        at::DeviceType t = scope->device_type == BT_DEVICE_CUDA ? at::kCUDA : at::kCPU;
        s_autocast_set(t, scope->prev_enabled, (at::ScalarType)scope->prev_dtype);
        /* as torch.autocast's exit: the casts of the weights cached in the scope go with the
           outermost one, or they would outlive an optimizer step that changes the weights */
        if (at::autocast::decrement_nesting() == 0)
            at::autocast::clear_cache();
    } catch (...) { /* restoring thread-local flags does not fail; nothing to report */
    }
    scope->active = false;
}

/* ---- device memory --------------------------------------------------------------------------- */

extern "C" void bt_device_release_cache(bt_device device) {
#ifdef BATON_HAVE_TORCH_CUDA
    if (device.type != BT_DEVICE_CUDA || !bt_cuda_is_available())
        return;
    try {
        c10::cuda::CUDACachingAllocator::emptyCache();
    } catch (...) { /* nothing was released: the next allocation may still succeed */
    }
#endif
}

/*  c10's CPU allocator reports each allocation and free (ProfiledCPUMemoryReporter) to the
    MemoryReportingInfoBase found in the calling thread's debug info under PROFILER_STATE, when that
    reporter says memory profiling is on: the counter below, pushed by bt_memory_tracking_begin.
    A free is reported only for a block allocated while some thread's reporter was on. */
namespace {
struct s_memory_counter final : public c10::MemoryReportingInfoBase {
    int64_t allocated = 0, peak = 0;
    void reportMemoryUsage(void *, int64_t alloc_size, int64_t, int64_t,
                           c10::Device device) override {
        if (device.type() != c10::DeviceType::CPU)
            return;
        allocated += alloc_size;
        peak = std::max(peak, allocated);
    }
    bool memoryProfilingEnabled() const override { return true; }
};
struct s_memory_tracking {
    std::shared_ptr<s_memory_counter> counter;
    std::unique_ptr<c10::DebugInfoGuard> guard;
};
thread_local s_memory_tracking s_tracking;
} // namespace

extern "C" bt_status bt_memory_tracking_begin(void) {
    if (s_tracking.counter) {
        s_tracking.counter->peak = s_tracking.counter->allocated;
        return BT_OK;
    }
    return s_status("bt_memory_tracking_begin", [&] {
        auto counter = std::make_shared<s_memory_counter>();
        s_tracking.guard =
            std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, counter);
        s_tracking.counter = counter;
    });
}

extern "C" void bt_memory_tracking_end(void) {
    s_tracking.guard.reset(); /* restores the debug info found at begin */
    s_tracking.counter.reset();
}

extern "C" bool bt_memory_is_tracking(void) {
    return s_tracking.counter != nullptr;
}

extern "C" bt_status bt_device_memory(bt_device device, size_t *allocated, size_t *peak,
                                      size_t *reserved) {
    size_t a = 0, p = 0, r = 0;
    bt_status st = BT_OK;
    if (device.type == BT_DEVICE_CPU && s_tracking.counter) {
        a = (size_t)std::max<int64_t>(s_tracking.counter->allocated, 0);
        p = (size_t)s_tracking.counter->peak;
        r = a;
    }
#ifdef BATON_HAVE_TORCH_CUDA
    if (device.type == BT_DEVICE_CUDA)
        st = s_status("bt_device_memory", [&] {
            /* index 0 of each statistic is the aggregate over pool kinds (StatType::AGGREGATE) */
            auto stats =
                c10::cuda::CUDACachingAllocator::getDeviceStats((c10::DeviceIndex)device.index);
            a = (size_t)stats.allocated_bytes[0].current;
            p = (size_t)stats.allocated_bytes[0].peak;
            r = (size_t)stats.reserved_bytes[0].current;
        });
#endif
    if (allocated)
        *allocated = a;
    if (peak)
        *peak = p;
    if (reserved)
        *reserved = r;
    return st;
}

extern "C" bt_status bt_device_available(bt_device device, size_t *bytes) {
    *bytes = 0;
    if (device.type == BT_DEVICE_CPU) { /* the kernel's estimate of what can be allocated */
        FILE *f = fopen("/proc/meminfo", "r");
        char line[256];
        unsigned long long kb = 0;
        bool found = false;
        while (f && !found && fgets(line, sizeof line, f))
            found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
        if (f)
            fclose(f);
        if (!found)
            return bt_fail(BT_EIO, "bt_device_available: no MemAvailable in /proc/meminfo");
        *bytes = (size_t)kb * 1024;
        return BT_OK;
    }
#ifdef BATON_HAVE_TORCH_CUDA
    return s_status("bt_device_available", [&] {
        c10::cuda::CUDAGuard guard((c10::DeviceIndex)device.index);
        size_t free_b = 0, total_b = 0;
        C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        auto stats =
            c10::cuda::CUDACachingAllocator::getDeviceStats((c10::DeviceIndex)device.index);
        /* the driver's free memory and the blocks the caching allocator holds unused */
        *bytes =
            free_b + (size_t)(stats.reserved_bytes[0].current - stats.allocated_bytes[0].current);
    });
#else
    return bt_fail(BT_EINVAL, "bt_device_available: this build has no CUDA");
#endif
}

/* ---- contexts -------------------------------------------------------------------------------- */

extern "C" bt_ctx *bt_ctx_new(void) {
    try {
        return new bt_ctx();
    } catch (...) {
        bt_fail(BT_ENOMEM, "bt_ctx_new: out of memory");
        return nullptr;
    }
}

extern "C" void bt_ctx_reset(bt_ctx *self) {
    if (!self)
        return;
    for (bt_tensor *h : self->items)
        delete h;
    self->items.clear();
}

extern "C" void bt_ctx_destroy(bt_ctx **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_ctx_reset(*self_p);
    delete *self_p;
    *self_p = nullptr;
}

extern "C" size_t bt_ctx_size(const bt_ctx *self) {
    return self ? self->items.size() : 0;
}

/* ---- creation and host I/O ------------------------------------------------------------------- */

extern "C" bt_tensor *bt_zeros(bt_ctx *ctx, bt_dtype dtype, bt_device device, int ndim,
                               const int64_t *shape) {
    return s_op(ctx, "bt_zeros",
                [&] { return at::zeros(s_shape(ndim, shape), s_options(dtype, device)); });
}

extern "C" bt_tensor *bt_full(bt_ctx *ctx, bt_dtype dtype, bt_device device, int ndim,
                              const int64_t *shape, double value) {
    return s_op(ctx, "bt_full",
                [&] { return at::full(s_shape(ndim, shape), value, s_options(dtype, device)); });
}

extern "C" bt_tensor *bt_arange(bt_ctx *ctx, bt_dtype dtype, bt_device device, int64_t n) {
    return s_op(ctx, "bt_arange", [&] { return at::arange(n, s_options(dtype, device)); });
}

extern "C" bt_tensor *bt_randn(bt_ctx *ctx, bt_gen *gen, bt_dtype dtype, int ndim,
                               const int64_t *shape) {
    if (!gen)
        return s_null_input("bt_randn");
    return s_op(ctx, "bt_randn", [&] {
        return at::randn(s_shape(ndim, shape), gen->g, s_options(dtype, gen->device));
    });
}

extern "C" bt_tensor *bt_from_host(bt_ctx *ctx, bt_dtype dtype, bt_device device, int ndim,
                                   const int64_t *shape, const void *data) {
    return s_op(ctx, "bt_from_host", [&] {
        at::Tensor t = at::empty(s_shape(ndim, shape), s_options(dtype, bt_cpu()));
        if (t.numel() > 0) {
            if (!data)
                throw std::invalid_argument("NULL data");
            memcpy(t.data_ptr(), data, (size_t)t.numel() * bt_dtype_size(dtype));
        }
        return device.type == BT_DEVICE_CPU ? t : t.to(s_device(device));
    });
}

extern "C" bt_status bt_to_host(const bt_tensor *t, void *dst, size_t nbytes) {
    if (!t)
        return s_null_input_status("bt_to_host");
    return s_status("bt_to_host", [&] {
        at::Tensor c = t->t.detach().to(at::kCPU).contiguous();
        size_t need = (size_t)c.numel() * c.element_size();
        if (need != nbytes)
            throw std::invalid_argument("buffer holds " + std::to_string(nbytes) +
                                        " bytes, tensor needs " + std::to_string(need));
        if (need > 0)
            memcpy(dst, c.data_ptr(), need);
    });
}

extern "C" bt_status bt_item(const bt_tensor *t, double *out) {
    if (!t)
        return s_null_input_status("bt_item");
    return s_status("bt_item", [&] { *out = t->t.item<double>(); });
}

extern "C" void *bt_data_ptr(bt_tensor *t) {
    if (!t) {
        s_null_input("bt_data_ptr");
        return nullptr;
    }
    if (!t->t.is_contiguous()) {
        bt_fail(BT_EINVAL, "bt_data_ptr: tensor is not contiguous");
        return nullptr;
    }
    return t->t.data_ptr();
}

/* ---- queries --------------------------------------------------------------------------------- */

extern "C" int bt_ndim(const bt_tensor *t) {
    return t ? (int)t->t.dim() : -1;
}

extern "C" int64_t bt_dim(const bt_tensor *t, int dim) {
    if (!t)
        return -1;
    int64_t n = t->t.dim();
    int64_t d = dim < 0 ? dim + n : dim;
    return (d >= 0 && d < n) ? t->t.size(d) : -1;
}

extern "C" int64_t bt_numel(const bt_tensor *t) {
    return t ? t->t.numel() : -1;
}

extern "C" bt_dtype bt_dtype_of(const bt_tensor *t) {
    return s_bt_dtype(t->t.scalar_type());
}

extern "C" bt_device bt_device_of(const bt_tensor *t) {
    if (t->t.is_cuda())
        return bt_device{BT_DEVICE_CUDA, (int32_t)t->t.get_device()};
    return bt_cpu();
}

/* ---- conversion, copies, views --------------------------------------------------------------- */

extern "C" bt_tensor *bt_to_dtype(bt_ctx *ctx, bt_tensor *t, bt_dtype dtype) {
    NEED1("bt_to_dtype", t);
    return s_op(ctx, "bt_to_dtype", [&] { return t->t.to(s_scalar_type(dtype)); });
}

extern "C" bt_tensor *bt_to_device(bt_ctx *ctx, bt_tensor *t, bt_device device) {
    NEED1("bt_to_device", t);
    return s_op(ctx, "bt_to_device", [&] { return t->t.to(s_device(device)); });
}

extern "C" bt_tensor *bt_contiguous(bt_ctx *ctx, bt_tensor *t) {
    NEED1("bt_contiguous", t);
    return s_op(ctx, "bt_contiguous", [&] { return t->t.contiguous(); });
}

extern "C" bt_tensor *bt_clone(bt_ctx *ctx, bt_tensor *t) {
    NEED1("bt_clone", t);
    return s_op(ctx, "bt_clone", [&] { return t->t.clone(); });
}

extern "C" bt_tensor *bt_detach(bt_ctx *ctx, bt_tensor *t) {
    NEED1("bt_detach", t);
    return s_op(ctx, "bt_detach", [&] { return t->t.detach(); });
}

extern "C" bt_tensor *bt_reshape(bt_ctx *ctx, bt_tensor *t, int ndim, const int64_t *shape) {
    NEED1("bt_reshape", t);
    return s_op(ctx, "bt_reshape", [&] { return t->t.reshape(s_shape_view(ndim, shape)); });
}

extern "C" bt_tensor *bt_transpose(bt_ctx *ctx, bt_tensor *t, int dim0, int dim1) {
    NEED1("bt_transpose", t);
    return s_op(ctx, "bt_transpose", [&] { return t->t.transpose(dim0, dim1); });
}

extern "C" bt_tensor *bt_permute(bt_ctx *ctx, bt_tensor *t, int ndim, const int64_t *dims) {
    NEED1("bt_permute", t);
    return s_op(ctx, "bt_permute", [&] { return t->t.permute(s_shape_view(ndim, dims)); });
}

extern "C" bt_tensor *bt_unsqueeze(bt_ctx *ctx, bt_tensor *t, int dim) {
    NEED1("bt_unsqueeze", t);
    return s_op(ctx, "bt_unsqueeze", [&] { return t->t.unsqueeze(dim); });
}

extern "C" bt_tensor *bt_expand(bt_ctx *ctx, bt_tensor *t, int ndim, const int64_t *shape) {
    NEED1("bt_expand", t);
    return s_op(ctx, "bt_expand", [&] { return t->t.expand(s_shape_view(ndim, shape)); });
}

extern "C" bt_tensor *bt_slice(bt_ctx *ctx, bt_tensor *t, int dim, int64_t start, int64_t end,
                               int64_t step) {
    NEED1("bt_slice", t);
    return s_op(ctx, "bt_slice", [&] { return t->t.slice(dim, start, end, step); });
}

extern "C" bt_tensor *bt_cat(bt_ctx *ctx, bt_tensor *const *ts, int n, int dim) {
    if (!ts || n <= 0)
        return s_null_input("bt_cat");
    std::vector<at::Tensor> v;
    for (int i = 0; i < n; i++) {
        if (!ts[i])
            return s_null_input("bt_cat");
        v.push_back(ts[i]->t);
    }
    return s_op(ctx, "bt_cat", [&] { return at::cat(v, dim); });
}

extern "C" bt_tensor *bt_index_select(bt_ctx *ctx, bt_tensor *t, int dim, bt_tensor *index) {
    NEED2("bt_index_select", t, index);
    return s_op(ctx, "bt_index_select", [&] { return at::index_select(t->t, dim, index->t); });
}

extern "C" bt_status bt_index_copy_(bt_tensor *dst, int dim, bt_tensor *index, bt_tensor *src) {
    if (!dst || !index || !src)
        return s_null_input_status("bt_index_copy_");
    return s_status("bt_index_copy_", [&] { dst->t.index_copy_(dim, index->t, src->t); });
}

extern "C" bt_status bt_copy_(bt_tensor *dst, bt_tensor *src) {
    if (!dst || !src)
        return s_null_input_status("bt_copy_");
    return s_status("bt_copy_", [&] { dst->t.copy_(src->t); });
}

/* ---- elementwise ----------------------------------------------------------------------------- */

#define BINARY_OP(name, expr)                                                                      \
    extern "C" bt_tensor *name(bt_ctx *ctx, bt_tensor *a, bt_tensor *b) {                          \
        NEED2(#name, a, b);                                                                        \
        return s_op(ctx, #name, [&] { return expr; });                                             \
    }
#define UNARY_OP(name, expr)                                                                       \
    extern "C" bt_tensor *name(bt_ctx *ctx, bt_tensor *t) {                                        \
        NEED1(#name, t);                                                                           \
        return s_op(ctx, #name, [&] { return expr; });                                             \
    }
#define SCALAR_OP(name, expr)                                                                      \
    extern "C" bt_tensor *name(bt_ctx *ctx, bt_tensor *t, double s) {                              \
        NEED1(#name, t);                                                                           \
        return s_op(ctx, #name, [&] { return expr; });                                             \
    }

BINARY_OP(bt_add, a->t + b->t)
BINARY_OP(bt_sub, a->t - b->t)
BINARY_OP(bt_mul, a->t * b->t)
BINARY_OP(bt_div, a->t / b->t)
BINARY_OP(bt_minimum, at::minimum(a->t, b->t))
BINARY_OP(bt_maximum, at::maximum(a->t, b->t))
BINARY_OP(bt_logical_and, at::logical_and(a->t, b->t))
BINARY_OP(bt_logical_or, at::logical_or(a->t, b->t))
BINARY_OP(bt_eq, at::eq(a->t, b->t))
BINARY_OP(bt_matmul, at::matmul(a->t, b->t))
BINARY_OP(bt_linear, at::linear(a->t, b->t))
SCALAR_OP(bt_add_scalar, t->t + s)
SCALAR_OP(bt_mul_scalar, t->t *s)
SCALAR_OP(bt_pow_scalar, at::pow(t->t, s))
SCALAR_OP(bt_gt_scalar, t->t.gt(s))
SCALAR_OP(bt_lt_scalar, t->t.lt(s))
SCALAR_OP(bt_eq_scalar, t->t.eq(s))
UNARY_OP(bt_neg, -t->t)
UNARY_OP(bt_exp, at::exp(t->t))
UNARY_OP(bt_ln, at::log(t->t))
UNARY_OP(bt_sqrt, at::sqrt(t->t))
UNARY_OP(bt_rsqrt, at::rsqrt(t->t))
UNARY_OP(bt_abs, at::abs(t->t))
UNARY_OP(bt_silu, at::silu(t->t))
UNARY_OP(bt_gelu_tanh, at::gelu(t->t, "tanh"))
UNARY_OP(bt_tanh, at::tanh(t->t))
UNARY_OP(bt_logical_not, at::logical_not(t->t))
UNARY_OP(bt_sum_all, t->t.sum())
UNARY_OP(bt_mean_all, t->t.mean())

extern "C" bt_tensor *bt_clamp(bt_ctx *ctx, bt_tensor *t, double lo, double hi) {
    NEED1("bt_clamp", t);
    return s_op(ctx, "bt_clamp", [&] { return at::clamp(t->t, lo, hi); });
}

extern "C" bt_tensor *bt_where(bt_ctx *ctx, bt_tensor *cond, bt_tensor *a, bt_tensor *b) {
    NEED3("bt_where", cond, a, b);
    return s_op(ctx, "bt_where", [&] { return at::where(cond->t, a->t, b->t); });
}

extern "C" bt_tensor *bt_masked_fill(bt_ctx *ctx, bt_tensor *t, bt_tensor *mask, double value) {
    NEED2("bt_masked_fill", t, mask);
    return s_op(ctx, "bt_masked_fill", [&] { return t->t.masked_fill(mask->t, value); });
}

/* ---- layers ---------------------------------------------------------------------------------- */

extern "C" bt_tensor *bt_embedding(bt_ctx *ctx, bt_tensor *weight, bt_tensor *ids) {
    NEED2("bt_embedding", weight, ids);
    return s_op(ctx, "bt_embedding", [&] { return at::embedding(weight->t, ids->t); });
}

extern "C" bt_tensor *bt_rms_norm(bt_ctx *ctx, bt_tensor *x, bt_tensor *w, double eps) {
    NEED2("bt_rms_norm", x, w);
    return s_op(ctx, "bt_rms_norm", [&] {
        /* as Hugging Face LlamaRMSNorm: normalise in (at least) float32, scale in the input dtype
         */
        at::Tensor h = x->t.scalar_type() == at::kDouble ? x->t : x->t.to(at::kFloat);
        at::Tensor y = h * at::rsqrt(h.pow(2).mean(-1, true) + eps);
        return w->t * y.to(x->t.scalar_type());
    });
}

extern "C" bt_status bt_rope_tables(bt_ctx *ctx, bt_tensor *positions, int64_t head_dim,
                                    double theta, const double *inv_freq, double scale,
                                    bt_dtype dtype, bt_tensor **cos_out, bt_tensor **sin_out) {
    if (!positions)
        return s_null_input_status("bt_rope_tables");
    if (!ctx || !cos_out || !sin_out || head_dim <= 0 || head_dim % 2)
        return bt_fail(BT_EINVAL, "bt_rope_tables: need a context, outputs and an even head_dim");
    return s_status("bt_rope_tables", [&] {
        /* RoFormer (Su et al. 2021): inv_freq_i = theta^(-2i/D), i < D/2 */
        auto fopt = at::TensorOptions().dtype(at::kFloat).device(positions->t.device());
        at::Tensor inv =
            inv_freq ? at::from_blob(const_cast<double *>(inv_freq), {head_dim / 2}, at::kDouble)
                           .to(fopt)
                     : at::pow(theta, -at::arange(0, head_dim, 2, fopt) / (double)head_dim);
        at::Tensor freqs = positions->t.to(at::kFloat).unsqueeze(-1) * inv; /* (B, T, D/2) */
        at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);          /* (B, 1, T, D) */
        at::ScalarType st = s_scalar_type(dtype);
        at::Tensor c = emb.cos(), s = emb.sin();
        if (scale != 1.0) {
            c = c * scale;
            s = s * scale;
        }
        *cos_out = s_wrap(ctx, c.to(st));
        *sin_out = s_wrap(ctx, s.to(st));
    });
}

extern "C" bt_tensor *bt_rope(bt_ctx *ctx, bt_tensor *x, bt_tensor *cos, bt_tensor *sin) {
    NEED3("bt_rope", x, cos, sin);
    return s_op(ctx, "bt_rope", [&] {
        int64_t half = x->t.size(-1) / 2;
        at::Tensor x1 = x->t.narrow(-1, 0, half), x2 = x->t.narrow(-1, half, half);
        at::Tensor rotated = at::cat({-x2, x1}, -1); /* rotate_half */
        return x->t * cos->t + rotated * sin->t;
    });
}

extern "C" bt_tensor *bt_softmax(bt_ctx *ctx, bt_tensor *t, int dim) {
    NEED1("bt_softmax", t);
    return s_op(ctx, "bt_softmax", [&] { return at::softmax(t->t, dim); });
}

extern "C" bt_tensor *bt_log_softmax(bt_ctx *ctx, bt_tensor *t, int dim) {
    NEED1("bt_log_softmax", t);
    return s_op(ctx, "bt_log_softmax", [&] { return at::log_softmax(t->t, dim); });
}

/*  k/v (B, Hkv, T, D) -> (B, H, T, D), each kv head used by H/Hkv consecutive query heads. */
static at::Tensor s_repeat_kv(const at::Tensor &kv, int64_t heads) {
    int64_t hkv = kv.size(1);
    if (heads == hkv)
        return kv;
    if (hkv <= 0 || heads % hkv)
        throw std::invalid_argument("query heads (" + std::to_string(heads) +
                                    ") not a multiple of key/value heads (" + std::to_string(hkv) +
                                    ")");
    auto s = kv.sizes();
    return kv.unsqueeze(2)
        .expand({s[0], hkv, heads / hkv, s[2], s[3]})
        .reshape({s[0], heads, s[2], s[3]});
}

extern "C" bt_tensor *bt_attention(bt_ctx *ctx, bt_tensor *q, bt_tensor *k, bt_tensor *v,
                                   bt_tensor *allowed) {
    NEED3("bt_attention", q, k, v);
    NEED1("bt_attention", allowed);
    return s_op(ctx, "bt_attention", [&] {
        if (q->t.dim() != 4 || k->t.dim() != 4 || v->t.dim() != 4)
            throw std::invalid_argument("q, k, v must be (B, H, T, D)");
        int64_t heads = q->t.size(1);
        at::Tensor kk = s_repeat_kv(k->t, heads), vv = s_repeat_kv(v->t, heads);
#if TORCH_VERSION_MAJOR >= 2
        return at::scaled_dot_product_attention(q->t, kk, vv, allowed->t);
#else
        /* scale q (B, H, Tq, D) rather than the larger scores; the scores are not saved for
           backward, so the mask is applied in place */
        double scale = 1.0 / std::sqrt((double)q->t.size(-1));
        at::Tensor scores = at::matmul(q->t * scale, kk.transpose(-2, -1)); /* (B, H, Tq, Tk) */
        scores.masked_fill_(allowed->t.logical_not(), -INFINITY);
        return at::matmul(at::softmax(scores, -1), vv);
#endif
    });
}

extern "C" bt_tensor *bt_attention_capped(bt_ctx *ctx, bt_tensor *q, bt_tensor *k, bt_tensor *v,
                                          bt_tensor *allowed, double scale, double softcap) {
    NEED3("bt_attention_capped", q, k, v);
    NEED1("bt_attention_capped", allowed);
    return s_op(ctx, "bt_attention_capped", [&] {
        if (q->t.dim() != 4 || k->t.dim() != 4 || v->t.dim() != 4)
            throw std::invalid_argument("q, k, v must be (B, H, T, D)");
        int64_t heads = q->t.size(1);
        at::Tensor kk = s_repeat_kv(k->t, heads), vv = s_repeat_kv(v->t, heads);
        at::Tensor scores = at::matmul(q->t, kk.transpose(-2, -1)) * scale; /* (B, H, Tq, Tk) */
        if (softcap > 0) /* Gemma 2: softcap * tanh(scores / softcap) */
            scores = at::tanh(scores / softcap) * softcap;
        scores = scores.masked_fill(allowed->t.logical_not(), -INFINITY);
        at::ScalarType soft = scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
        return at::matmul(at::softmax(scores, -1, soft).to(vv.scalar_type()), vv);
    });
}

extern "C" bt_tensor *bt_gather(bt_ctx *ctx, bt_tensor *t, int dim, bt_tensor *index) {
    NEED2("bt_gather", t, index);
    return s_op(ctx, "bt_gather", [&] { return at::gather(t->t, dim, index->t); });
}

extern "C" bt_tensor *bt_scatter(bt_ctx *ctx, bt_tensor *t, int dim, bt_tensor *index,
                                 bt_tensor *src) {
    NEED3("bt_scatter", t, index, src);
    return s_op(ctx, "bt_scatter", [&] { return at::scatter(t->t, dim, index->t, src->t); });
}

extern "C" bt_tensor *bt_cross_entropy(bt_ctx *ctx, bt_tensor *logits, bt_tensor *targets) {
    NEED2("bt_cross_entropy", logits, targets);
    return s_op(ctx, "bt_cross_entropy", [&] {
        return at::nll_loss(at::log_softmax(logits->t, -1), targets->t, {}, at::Reduction::None);
    });
}

/* ---- reductions and ordering ----------------------------------------------------------------- */

extern "C" bt_tensor *bt_sum(bt_ctx *ctx, bt_tensor *t, int dim, bool keepdim) {
    NEED1("bt_sum", t);
    return s_op(ctx, "bt_sum", [&] { return t->t.sum(dim, keepdim); });
}

extern "C" bt_tensor *bt_mean(bt_ctx *ctx, bt_tensor *t, int dim, bool keepdim) {
    NEED1("bt_mean", t);
    return s_op(ctx, "bt_mean", [&] { return t->t.mean(dim, keepdim); });
}

extern "C" bt_tensor *bt_max(bt_ctx *ctx, bt_tensor *t, int dim, bool keepdim) {
    NEED1("bt_max", t);
    return s_op(ctx, "bt_max", [&] { return std::get<0>(t->t.max(dim, keepdim)); });
}

extern "C" bt_tensor *bt_argmax(bt_ctx *ctx, bt_tensor *t, int dim, bool keepdim) {
    NEED1("bt_argmax", t);
    return s_op(ctx, "bt_argmax", [&] { return t->t.argmax(dim, keepdim); });
}

extern "C" bt_tensor *bt_cumsum(bt_ctx *ctx, bt_tensor *t, int dim) {
    NEED1("bt_cumsum", t);
    return s_op(ctx, "bt_cumsum", [&] { return t->t.cumsum(dim); });
}

/*  Wraps a pair of results; both outputs NULL on failure. */
template <class F>
static bt_status s_pair(bt_ctx *ctx, const char *op, bt_tensor **a, bt_tensor **b, F f) {
    if (!ctx || !a || !b)
        return bt_fail(BT_EINVAL, "%s: NULL context or output", op);
    *a = *b = nullptr;
    return s_status(op, [&] {
        std::tuple<at::Tensor, at::Tensor> r = f();
        *a = s_wrap(ctx, std::get<0>(r));
        *b = s_wrap(ctx, std::get<1>(r));
    });
}

extern "C" bt_status bt_topk(bt_ctx *ctx, bt_tensor *t, int64_t k, int dim, bt_tensor **values,
                             bt_tensor **indices) {
    if (!t)
        return s_null_input_status("bt_topk");
    return s_pair(ctx, "bt_topk", values, indices, [&] { return at::topk(t->t, k, dim); });
}

extern "C" bt_status bt_sort(bt_ctx *ctx, bt_tensor *t, int dim, bool descending,
                             bt_tensor **values, bt_tensor **indices) {
    if (!t)
        return s_null_input_status("bt_sort");
    return s_pair(ctx, "bt_sort", values, indices, [&] { return at::sort(t->t, dim, descending); });
}

extern "C" bt_tensor *bt_multinomial(bt_ctx *ctx, bt_gen *gen, bt_tensor *probs) {
    NEED2("bt_multinomial", gen, probs);
    return s_op(ctx, "bt_multinomial", [&] { return at::multinomial(probs->t, 1, false, gen->g); });
}

/* ---- autograd -------------------------------------------------------------------------------- */

extern "C" bt_status bt_set_requires_grad(bt_tensor *t, bool requires_grad) {
    if (!t)
        return s_null_input_status("bt_set_requires_grad");
    return s_status("bt_set_requires_grad", [&] { t->t.requires_grad_(requires_grad); });
}

extern "C" bool bt_requires_grad(const bt_tensor *t) {
    return t && t->t.requires_grad();
}

extern "C" bt_status bt_backward(bt_tensor *t) {
    if (!t)
        return s_null_input_status("bt_backward");
    return s_status("bt_backward", [&] { t->t.backward(); });
}

extern "C" bt_tensor *bt_grad(bt_ctx *ctx, bt_tensor *t) {
    NEED1("bt_grad", t);
    return s_op(ctx, "bt_grad", [&] {
        const at::Tensor &g = t->t.grad();
        return g.defined() ? g : at::zeros_like(t->t);
    });
}

extern "C" void bt_zero_grad(bt_tensor *const *ts, int n) {
    for (int i = 0; ts && i < n; i++)
        if (ts[i])
            ts[i]->t.mutable_grad().reset();
}

extern "C" bool bt_set_grad_enabled(bool enabled) {
    bool prev = c10::GradMode::is_enabled();
    c10::GradMode::set_enabled(enabled);
    return prev;
}

extern "C" bt_status bt_clip_grad_norm(bt_tensor *const *params, int n, double max_norm,
                                       double *total_norm) {
    if (!params || n < 0)
        return bt_fail(BT_EINVAL, "bt_clip_grad_norm: NULL parameter list");
    return s_status("bt_clip_grad_norm", [&] {
        at::NoGradGuard no_grad;
        double sq = 0.0;
        for (int i = 0; i < n; i++)
            if (params[i] && params[i]->t.grad().defined())
                sq += params[i]->t.grad().to(at::kDouble).pow(2).sum().item<double>();
        double norm = std::sqrt(sq);
        if (total_norm)
            *total_norm = norm;
        /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1 */
        double coef = max_norm / (norm + 1e-6);
        if (coef >= 1.0)
            return;
        for (int i = 0; i < n; i++)
            if (params[i] && params[i]->t.grad().defined())
                params[i]->t.mutable_grad().mul_(coef);
    });
}

/*  Activation checkpointing (as torch.utils.checkpoint's reentrant form).  Forward runs fn without
    recording (custom functions' forward always does) and saves only x and a copy of the user bytes;
    backward re-runs fn on a detached x with grad on, under the autocast state forward had, and
    backpropagates the incoming gradient through it: that accumulates into the parameters' .grad
    as a plain backward would and yields x's gradient.  fn's temporaries live in a context local to
    each call. */
struct s_checkpoint : public torch::autograd::Function<s_checkpoint> {
    /*  fn(tmp, x, user) -> y; the error fn left, as an exception (backward may run on one of the
        engine's threads, whose last error the caller never reads). */
    static std::vector<max_align_t> aligned(const std::string &user) {
        std::vector<max_align_t> a((user.size() + sizeof(max_align_t) - 1) / sizeof(max_align_t));
        if (!user.empty())
            memcpy(a.data(), user.data(), user.size());
        return a;
    }

    static at::Tensor run(bt_checkpoint_fn fn, const at::Tensor &x, const std::string &user) {
        std::vector<max_align_t> a = aligned(user);
        bt_ctx tmp;
        bt_tensor xh{x};
        bt_tensor *y = fn(&tmp, &xh, a.data());
        at::Tensor out = y ? y->t : at::Tensor();
        bt_ctx_reset(&tmp);
        if (!out.defined())
            throw std::runtime_error(bt_last_error()[0] ? bt_last_error() : "fn returned NULL");
        return out;
    }

    /*  A hook saved under key (none: nothing to do), its failure as an exception. */
    static void hook(torch::autograd::AutogradContext *ctx, const char *key) {
        auto h = reinterpret_cast<bt_checkpoint_hook>((intptr_t)ctx->saved_data[key].toInt());
        std::vector<max_align_t> a = aligned(ctx->saved_data["user"].toStringRef());
        if (h && h(a.data()) != BT_OK)
            throw std::runtime_error(bt_last_error()[0] ? bt_last_error() : "a hook failed");
    }

    static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x,
                              bt_checkpoint_fn fn, const std::string &user,
                              bt_checkpoint_hooks hooks) {
        at::DeviceType dev = x.device().type();
        ctx->save_for_backward({x});
        ctx->saved_data["fn"] = (int64_t) reinterpret_cast<intptr_t>(fn);
        ctx->saved_data["after_forward"] =
            (int64_t) reinterpret_cast<intptr_t>(hooks.after_forward);
        ctx->saved_data["after_backward"] =
            (int64_t) reinterpret_cast<intptr_t>(hooks.after_backward);
        ctx->saved_data["user"] = user;
        ctx->saved_data["autocast"] = s_autocast_enabled(dev);
        ctx->saved_data["dtype"] = (int64_t)s_autocast_dtype(dev);
        /* casts made here carry no graph: none may be cached for a later op that records */
        bool cache = at::autocast::is_autocast_cache_enabled();
        at::autocast::set_autocast_cache_enabled(false);
        try {
            at::Tensor y = run(fn, x, user);
            at::autocast::set_autocast_cache_enabled(cache);
            hook(ctx, "after_forward");
            return y;
        } catch (...) {
            at::autocast::set_autocast_cache_enabled(cache);
            throw;
        }
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads) {
        at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
        auto fn = reinterpret_cast<bt_checkpoint_fn>((intptr_t)ctx->saved_data["fn"].toInt());
        const std::string &user = ctx->saved_data["user"].toStringRef();
        at::AutoGradMode grad(true);
        at::Tensor y;
        {
            const bt_tensor xh{x};
            bt_dtype dtype = ctx->saved_data["autocast"].toBool()
                                 ? s_bt_dtype((at::ScalarType)ctx->saved_data["dtype"].toInt())
                                 : BT_F32; /* BT_F32: an empty scope */
            bt_autocast scope;
            if (bt_autocast_enter(bt_device_of(&xh), dtype, &scope) != BT_OK)
                throw std::runtime_error(bt_last_error());
            try {
                y = run(fn, x, user);
            } catch (...) {
                bt_autocast_exit(&scope);
                throw;
            }
            bt_autocast_exit(&scope);
        }
        y.backward(grads[0]);
        hook(ctx, "after_backward");
        return {x.grad(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

extern "C" bt_tensor *bt_checkpoint_hooked(bt_ctx *ctx, bt_checkpoint_fn fn, const void *user,
                                           size_t user_size, bt_tensor *x,
                                           bt_checkpoint_hooks hooks) {
    NEED1("bt_checkpoint", x);
    if (!fn || (!user && user_size > 0)) {
        bt_fail(BT_EINVAL, "bt_checkpoint: NULL fn or user");
        return nullptr;
    }
    if (!c10::GradMode::is_enabled() || !x->t.requires_grad()) {
        bt_tensor *y = fn(ctx, x, const_cast<void *>(user));
        if (y && hooks.after_forward && hooks.after_forward(const_cast<void *>(user)) != BT_OK)
            return nullptr;
        return y;
    }
    return s_op(ctx, "bt_checkpoint", [&] {
        return s_checkpoint::apply(x->t, fn, std::string((const char *)user, user_size), hooks);
    });
}

extern "C" bt_tensor *bt_checkpoint(bt_ctx *ctx, bt_checkpoint_fn fn, const void *user,
                                    size_t user_size, bt_tensor *x) {
    return bt_checkpoint_hooked(ctx, fn, user, user_size, x, bt_checkpoint_hooks{nullptr, nullptr});
}

/* ---- AdamW ----------------------------------------------------------------------------------- */

extern "C" bt_adamw_config bt_adamw_defaults(void) {
    return bt_adamw_config{0.9, 0.999, 1e-8, 0.01};
}

extern "C" bt_adamw *bt_adamw_new(bt_tensor *const *params, int n, bt_adamw_config config) {
    if (!params || n <= 0) {
        bt_fail(BT_EINVAL, "bt_adamw_new: empty parameter list");
        return nullptr;
    }
    try {
        at::NoGradGuard no_grad;
        bt_adamw *self = new bt_adamw();
        self->config = config;
        self->steps = 0;
        for (int i = 0; i < n; i++) {
            if (!params[i]) {
                delete self;
                s_null_input("bt_adamw_new");
                return nullptr;
            }
            self->params.push_back(params[i]->t);
            self->exp_avg.push_back(bt_tensor{at::zeros_like(params[i]->t)});
            self->exp_avg_sq.push_back(bt_tensor{at::zeros_like(params[i]->t)});
        }
        return self;
    } catch (...) {
        s_fail_exception("bt_adamw_new");
        return nullptr;
    }
}

extern "C" void bt_adamw_destroy(bt_adamw **self_p) {
    if (!self_p || !*self_p)
        return;
    delete *self_p;
    *self_p = nullptr;
}

extern "C" bt_status bt_adamw_step(bt_adamw *self, double lr) {
    if (!self)
        return bt_fail(BT_EINVAL, "bt_adamw_step: NULL optimizer");
    return s_status("bt_adamw_step", [&] {
        /* torch.optim.AdamW, single-tensor path (Loshchilov & Hutter 2019) */
        at::NoGradGuard no_grad;
        const bt_adamw_config &c = self->config;
        self->steps++;
        double bc1 = 1.0 - std::pow(c.beta1, (double)self->steps);
        double bc2 = 1.0 - std::pow(c.beta2, (double)self->steps);
        for (size_t i = 0; i < self->params.size(); i++) {
            at::Tensor &p = self->params[i];
            const at::Tensor &g = p.grad();
            if (!g.defined())
                continue;
            at::Tensor &m = self->exp_avg[i].t, &v = self->exp_avg_sq[i].t;
            p.mul_(1.0 - lr * c.weight_decay);
            m.mul_(c.beta1).add_(g, 1.0 - c.beta1);
            v.mul_(c.beta2).addcmul_(g, g, 1.0 - c.beta2);
            at::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(c.eps);
            p.addcdiv_(m, denom, -lr / bc1);
        }
    });
}

extern "C" int64_t bt_adamw_steps(const bt_adamw *self) {
    return self ? self->steps : 0;
}

extern "C" void bt_adamw_set_steps(bt_adamw *self, int64_t steps) {
    if (self)
        self->steps = steps;
}

extern "C" bt_status bt_adamw_moments(bt_adamw *self, int i, bt_tensor **exp_avg,
                                      bt_tensor **exp_avg_sq) {
    if (!self || i < 0 || (size_t)i >= self->params.size())
        return bt_fail(BT_ERANGE, "bt_adamw_moments: no parameter %d", i);
    *exp_avg = &self->exp_avg[(size_t)i];
    *exp_avg_sq = &self->exp_avg_sq[(size_t)i];
    return BT_OK;
}

/* ---- generators ------------------------------------------------------------------------------ */

extern "C" bt_gen *bt_gen_new(uint64_t seed, bt_device device) {
    try {
        at::Generator g = device.type == BT_DEVICE_CPU
                              ? at::make_generator<at::CPUGeneratorImpl>(seed)
                              : at::globalContext().defaultGenerator(s_device(device)).clone();
        {
            std::lock_guard<std::mutex> lock(g.mutex());
            g.set_current_seed(seed);
        }
        return new bt_gen{std::move(g), device};
    } catch (...) {
        s_fail_exception("bt_gen_new");
        return nullptr;
    }
}

extern "C" void bt_gen_destroy(bt_gen **self_p) {
    if (!self_p || !*self_p)
        return;
    delete *self_p;
    *self_p = nullptr;
}

extern "C" size_t bt_gen_state_size(const bt_gen *self) {
    try {
        std::lock_guard<std::mutex> lock(self->g.mutex());
        return (size_t)self->g.get_state().numel();
    } catch (...) {
        s_fail_exception("bt_gen_state_size");
        return 0;
    }
}

extern "C" bt_status bt_gen_get_state(const bt_gen *self, void *buf, size_t len) {
    if (!self || !buf)
        return bt_fail(BT_EINVAL, "bt_gen_get_state: NULL argument");
    return s_status("bt_gen_get_state", [&] {
        std::lock_guard<std::mutex> lock(self->g.mutex());
        at::Tensor s = self->g.get_state().contiguous();
        if ((size_t)s.numel() != len)
            throw std::invalid_argument("state is " + std::to_string(s.numel()) +
                                        " bytes, buffer " + std::to_string(len));
        memcpy(buf, s.data_ptr(), len);
    });
}

extern "C" bt_status bt_gen_set_state(bt_gen *self, const void *buf, size_t len) {
    if (!self || !buf)
        return bt_fail(BT_EINVAL, "bt_gen_set_state: NULL argument");
    return s_status("bt_gen_set_state", [&] {
        std::lock_guard<std::mutex> lock(self->g.mutex());
        at::Tensor s = at::empty({(int64_t)len}, at::TensorOptions().dtype(at::kByte));
        memcpy(s.data_ptr(), buf, len);
        self->g.set_state(s);
    });
}

/* ---- collectives ----------------------------------------------------------------------------- */

struct bt_store {
    c10::intrusive_ptr<c10d::TCPStore> store;
};

struct bt_group {
    c10::intrusive_ptr<c10d::ProcessGroup> pg;
    int rank, world;
    bool broken; /* a collective failed: the group is unusable */
};

/*  Runs a collective; a failure breaks the group for good (Gloo's state after a failed collective
    is undefined), and a broken group fails at once. */
template <class F> static bt_status s_collective(bt_group *self, const char *op, F f) {
    if (self->broken)
        return bt_fail(BT_EIO, "%s: the group is broken by an earlier failure", op);
    bt_status st = s_status(op, f);
    self->broken = st != BT_OK;
    return st;
}

extern "C" bt_store *bt_store_serve(int port, int *port_out) {
    if (port < 0 || port > 65535) {
        bt_fail(BT_EINVAL, "bt_store_serve: port %d out of range", port);
        return nullptr;
    }
    bt_store *self = nullptr;
    bt_status st = s_status("bt_store_serve", [&] {
        c10d::TCPStoreOptions o;
        o.port = (uint16_t)port;
        o.isServer = true;
        o.waitWorkers = false;
        o.multiTenant = true;
        auto store = c10::make_intrusive<c10d::TCPStore>("0.0.0.0", o);
        self = new bt_store{store};
        if (port_out)
            *port_out = store->getPort();
    });
    return st == BT_OK ? self : nullptr;
}

extern "C" void bt_store_destroy(bt_store **self_p) {
    if (!self_p || !*self_p)
        return;
    delete *self_p;
    *self_p = nullptr;
}

extern "C" bt_group *bt_group_new(const bt_group_config *cfg) {
    if (!cfg || !cfg->store_host || !cfg->prefix || !cfg->local_addr || cfg->world < 1 ||
        cfg->rank < 0 || cfg->rank >= cfg->world || cfg->timeout_ms < 1) {
        bt_fail(BT_EINVAL, "bt_group_new: need a store host, a prefix, a local address, "
                           "0 <= rank < world and a positive timeout");
        return nullptr;
    }
    bt_group *self = nullptr;
    bt_status st = s_status("bt_group_new", [&] {
        auto timeout = std::chrono::milliseconds(cfg->timeout_ms);
        c10d::TCPStoreOptions o;
        o.port = (uint16_t)cfg->store_port;
        o.isServer = false;
        o.waitWorkers = false;
        o.timeout = timeout;
        auto tcp = c10::make_intrusive<c10d::TCPStore>(std::string(cfg->store_host), o);
        auto store = c10::make_intrusive<c10d::PrefixStore>(std::string(cfg->prefix), tcp);
        c10::intrusive_ptr<c10d::ProcessGroup> pg;
        if (cfg->device.type == BT_DEVICE_CUDA) {
#ifdef BATON_HAVE_NCCL
            auto opts = c10d::ProcessGroupNCCL::Options::create();
            opts->timeout = timeout;
            pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, cfg->rank, cfg->world, opts);
#else
            throw std::invalid_argument("CUDA collectives need a build with NCCL");
#endif
        } else {
            auto opts = c10d::ProcessGroupGloo::Options::create();
            opts->timeout = timeout;
            opts->devices.push_back(
                c10d::ProcessGroupGloo::createDeviceForHostname(std::string(cfg->local_addr)));
            pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, cfg->rank, cfg->world, opts);
        }
        self = new bt_group{pg, cfg->rank, cfg->world, false};
    });
    return st == BT_OK ? self : nullptr;
}

extern "C" void bt_group_destroy(bt_group **self_p) {
    if (!self_p || !*self_p)
        return;
    /* A group whose collective failed is left standing, never destroyed: its process group's
       destructor waits for and closes pairs whose peer is gone, and an exception thrown there
       could not be caught (destructors are noexcept: std::terminate).  A precaution, not an
       observed failure (the survivors that vanished were killed by SIGPIPE: cli/main.c); it
       costs the group's idle threads and sockets, once per broken formation. */
    if ((*self_p)->broken)
        (void)(*self_p)->pg.release();
    try {
        delete *self_p;
    } catch (...) { /* nothing escapes a healthy group's close; kept for safety */
    }
    *self_p = nullptr;
}

extern "C" int bt_group_rank(const bt_group *self) {
    return self ? self->rank : -1;
}
extern "C" bool bt_group_broken(const bt_group *self) {
    return self && self->broken;
}
extern "C" int bt_group_world(const bt_group *self) {
    return self ? self->world : 0;
}

/*  Runs one collective on tensors flattened into a buffer per dtype, then copies the results
    back: one message per dtype instead of one per tensor. */
template <class F> static void s_flat_collective(std::vector<at::Tensor> &ts, F collective) {
    std::vector<at::ScalarType> dtypes;
    for (auto &t : ts)
        if (std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) == dtypes.end())
            dtypes.push_back(t.scalar_type());
    for (auto dt : dtypes) {
        std::vector<at::Tensor> group;
        for (auto &t : ts)
            if (t.scalar_type() == dt)
                group.push_back(t);
        std::vector<at::Tensor> flat;
        for (auto &t : group)
            flat.push_back(t.reshape({-1}));
        std::vector<at::Tensor> buf{at::cat(flat)};
        collective(buf);
        int64_t off = 0;
        for (auto &t : group) {
            int64_t n = t.numel();
            t.copy_(buf[0].narrow(0, off, n).view(t.sizes()));
            off += n;
        }
    }
}

extern "C" bt_status bt_group_allreduce_grads(bt_group *self, bt_tensor *const *params, int n) {
    if (!self || !params || n < 1)
        return bt_fail(BT_EINVAL, "bt_group_allreduce_grads: NULL group or no parameters");
    return s_collective(self, "bt_group_allreduce_grads", [&] {
        at::NoGradGuard no_grad;
        std::vector<at::Tensor> grads;
        for (int i = 0; i < n; i++) {
            at::Tensor &p = params[i]->t;
            if (!p.grad().defined())
                p.mutable_grad() = at::zeros_like(p);
            grads.push_back(p.mutable_grad());
        }
        s_flat_collective(grads,
                          [&](std::vector<at::Tensor> &buf) { self->pg->allreduce(buf)->wait(); });
    });
}

/*  The flat concatenation of ts (their gradients with grads; none counts as zeros), padded with
    zeros to len elements at least. */
static at::Tensor s_flat_padded(bt_tensor *const *ts, int n, bool grads, int64_t len) {
    std::vector<at::Tensor> flat;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const at::Tensor &p = ts[i]->t;
        const at::Tensor &g = grads ? p.grad() : p;
        flat.push_back(g.defined() ? g.detach().reshape({-1})
                                   : at::zeros({p.numel()}, p.options()));
        total += p.numel();
    }
    if (total < len)
        flat.push_back(at::zeros({len - total}, ts[0]->t.options()));
    return at::cat(flat);
}

static bool s_same_float32(bt_tensor *const *ts, int n, const bt_tensor *shard) {
    if (shard && (shard->t.scalar_type() != at::kFloat || shard->t.dim() != 1))
        return false;
    for (int i = 0; i < n; i++)
        if (!ts[i] || ts[i]->t.scalar_type() != at::kFloat)
            return false;
    return true;
}

static int64_t s_total(bt_tensor *const *ts, int n) {
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += ts[i]->t.numel();
    return total;
}

extern "C" bt_tensor *bt_flat_range(bt_ctx *ctx, bt_tensor *const *ts, int n, bool grads,
                                    int64_t lo, int64_t len) {
    if (!ts || n < 1 || lo < 0 || len < 0 || !s_same_float32(ts, n, nullptr)) {
        bt_fail(BT_EINVAL, "bt_flat_range: need float32 tensors and 0 <= lo, 0 <= len");
        return nullptr;
    }
    return s_op(ctx, "bt_flat_range", [&] {
        at::NoGradGuard no_grad;
        at::Tensor out = at::zeros({len}, ts[0]->t.options());
        int64_t at = 0, hi = lo + len; /* only the tensors that overlap [lo, hi) are read */
        for (int i = 0; i < n && at < hi; i++) {
            const at::Tensor &p = ts[i]->t;
            int64_t a = std::max(at, lo), b = std::min(at + p.numel(), hi);
            const at::Tensor &src = grads ? p.grad() : p;
            if (a < b && src.defined())
                out.narrow(0, a - lo, b - a)
                    .copy_(src.detach().reshape({-1}).narrow(0, a - at, b - a));
            at += p.numel();
        }
        return out;
    });
}

extern "C" bt_status bt_set_data(bt_tensor *t, bt_tensor *src) {
    if (!t || !src)
        return s_null_input_status("bt_set_data");
    return s_status("bt_set_data", [&] {
        if (src->t.device() != t->t.device())
            throw std::invalid_argument("the new data's device differs");
        t->t.set_data(src->t.detach());
    });
}

extern "C" bt_status bt_set_grad(bt_tensor *t, bt_tensor *g) {
    if (!t)
        return s_null_input_status("bt_set_grad");
    return s_status("bt_set_grad", [&] {
        if (!g) {
            t->t.mutable_grad().reset();
            return;
        }
        if (!g->t.sizes().equals(t->t.sizes()) || g->t.scalar_type() != t->t.scalar_type())
            throw std::invalid_argument("the gradient's shape or dtype differs from the tensor's");
        t->t.mutable_grad() = g->t.detach();
    });
}

/*  Rank and world of a group, or of a group of one (NULL). */
static void s_rank_world(const bt_group *self, int *rank, int *world) {
    *rank = self ? self->rank : 0;
    *world = self ? self->world : 1;
}

extern "C" bt_status bt_group_reduce_scatter_grads(bt_group *self, bt_tensor *const *params, int n,
                                                   bt_tensor *shard, bool accumulate) {
    int rank, world;
    s_rank_world(self, &rank, &world);
    if (!params || n < 1 || !shard || !s_same_float32(params, n, shard) ||
        world * shard->t.numel() < s_total(params, n))
        return bt_fail(BT_EINVAL, "bt_group_reduce_scatter_grads: need float32 parameters and a "
                                  "1-D float32 shard with world x its size >= their elements");
    auto body = [&] {
        at::NoGradGuard no_grad;
        int64_t size = shard->t.numel();
        at::Tensor flat = s_flat_padded(params, n, true, world * size), mine;
        if (self && self->pg->getBackendName() == "nccl") {
            std::vector<at::Tensor> out{at::empty({size}, flat.options())};
            std::vector<std::vector<at::Tensor>> in(1);
            for (int k = 0; k < world; k++)
                in[0].push_back(flat.narrow(0, k * size, size));
            self->pg->reduce_scatter(out, in)->wait();
            mine = out[0];
        } else if (self) { /* Gloo (libtorch 1.13) has no reduce-scatter: a reduce to each
                              shard's owner moves the same bytes */
            for (int k = 0; k < world; k++) {
                std::vector<at::Tensor> buf{flat.narrow(0, k * size, size)};
                c10d::ReduceOptions o;
                o.rootRank = k;
                self->pg->reduce(buf, o)->wait();
            }
            mine = flat.narrow(0, rank * size, size);
        } else {
            mine = flat.narrow(0, 0, size);
        }
        if (accumulate)
            shard->t.add_(mine);
        else
            shard->t.copy_(mine);
    };
    return self ? s_collective(self, "bt_group_reduce_scatter_grads", body)
                : s_status("bt_group_reduce_scatter_grads", body);
}

extern "C" bt_tensor *bt_flatten_into(bt_ctx *ctx, bt_tensor *const *ts, int n, int64_t len) {
    if (!ts || n < 1 || !s_same_float32(ts, n, nullptr) || len < s_total(ts, n)) {
        bt_fail(BT_EINVAL, "bt_flatten_into: need float32 tensors and len >= their elements");
        return nullptr;
    }
    return s_op(ctx, "bt_flatten_into", [&] {
        at::NoGradGuard no_grad;
        at::Tensor flat = at::zeros({len}, ts[0]->t.options());
        int64_t off = 0;
        for (int i = 0; i < n; i++) {
            at::Tensor &p = ts[i]->t;
            at::Tensor view = flat.narrow(0, off, p.numel()).view(p.sizes());
            view.copy_(p);
            p.set_data(view); /* the same leaf (its gradient, its handle), new storage */
            off += p.numel();
        }
        return flat;
    });
}

extern "C" bt_status bt_group_allgather_flat(bt_group *self, bt_tensor *flat) {
    if (!flat || flat->t.dim() != 1 || !flat->t.is_contiguous() ||
        (self && flat->t.numel() % self->world != 0))
        return bt_fail(BT_EINVAL, "bt_group_allgather_flat: need a contiguous 1-D tensor of "
                                  "world equal slices");
    if (!self)
        return BT_OK; /* a group of one holds every slice */
    return s_collective(self, "bt_group_allgather_flat", [&] {
        at::NoGradGuard no_grad;
        int64_t size = flat->t.numel() / self->world;
        std::vector<std::vector<at::Tensor>> out(1); /* gathered straight into flat */
        for (int k = 0; k < self->world; k++)
            out[0].push_back(flat->t.narrow(0, k * size, size));
        std::vector<at::Tensor> in{flat->t.narrow(0, self->rank * size, size).clone()};
        self->pg->allgather(out, in)->wait();
    });
}

extern "C" bt_status bt_group_allreduce_f64(bt_group *self, double *values, int n, bt_reduce op) {
    if (!self || !values || n < 1)
        return bt_fail(BT_EINVAL, "bt_group_allreduce_f64: NULL group or no values");
    return s_collective(self, "bt_group_allreduce_f64", [&] {
        at::Tensor t = at::from_blob(values, {n}, at::TensorOptions().dtype(at::kDouble)).clone();
        if (self->pg->getBackendName() == "nccl")
            t = t.to(at::kCUDA);
        c10d::AllreduceOptions o;
        o.reduceOp = op == BT_REDUCE_MAX ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
        std::vector<at::Tensor> buf{t};
        self->pg->allreduce(buf, o)->wait();
        at::Tensor host = buf[0].to(at::kCPU).contiguous();
        memcpy(values, host.data_ptr(), sizeof(double) * (size_t)n);
    });
}

extern "C" bt_status bt_group_reduce(bt_group *self, bt_tensor *t, int root) {
    if (!self || !t || root < 0 || root >= self->world || !t->t.is_contiguous())
        return bt_fail(BT_EINVAL, "bt_group_reduce: NULL group or tensor, root out of range or "
                                  "a tensor that is not contiguous");
    return s_collective(self, "bt_group_reduce", [&] {
        at::NoGradGuard no_grad;
        std::vector<at::Tensor> buf{t->t};
        c10d::ReduceOptions o;
        o.rootRank = root;
        self->pg->reduce(buf, o)->wait();
    });
}

extern "C" bt_status bt_group_broadcast(bt_group *self, bt_tensor *const *ts, int n, int root) {
    if (!self || !ts || n < 1 || root < 0 || root >= self->world)
        return bt_fail(BT_EINVAL,
                       "bt_group_broadcast: NULL group, no tensors or root out of range");
    return s_collective(self, "bt_group_broadcast", [&] {
        at::NoGradGuard no_grad;
        std::vector<at::Tensor> all;
        for (int i = 0; i < n; i++)
            all.push_back(ts[i]->t);
        s_flat_collective(all, [&](std::vector<at::Tensor> &buf) {
            c10d::BroadcastOptions o;
            o.rootRank = root;
            self->pg->broadcast(buf, o)->wait();
        });
    });
}
