/*  worker.c — the worker loop (relay thread) and the compute thread of every role. */
#define _POSIX_C_SOURCE 200809L
#include "baton/worker.h"

#include "baton/config.h"
#include "baton/episodes.h"
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/messages.h"
#include "baton/msg.h"
#include "baton/plan.h"
#include "baton/rollout.h"
#include "baton/spec.h"
#include "baton/trainer.h"

#include <arpa/inet.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

static int64_t s_now_ms(void) {
    return (int64_t)(bt_now() * 1000.0);
}

/* ---- episodes: the config keys and the environments they name -------------------------------- */

/*  config.h bounds these keys without the headers above its floor. */

/* ---- compute state -------------------------------------------------------------------------- */

/*  One strategy variant's state (a run without variants has one): its config, its policy (rollout
    and eval) or trainer, its task and evaluation suite. */
typedef struct {
    const bt_config *cfg;  /* the base, or own: a config is 100 KB, so one copy per variant */
    bt_config *own;        /* the variant's config (heap) when the run has variants, or NULL */
    bt_model *model;       /* rollout and eval: the variant's current policy */
    bt_trainer_t *trainer; /* trainer: owns the policy */
    bt_group *group;       /* trainer: its data-parallel group, or NULL */
    bt_source_t *sources[BT_CONFIG_MAX_SOURCES];       /* each data source's task (one without
                                                        data.sources) */
    bt_episode_source episodes[BT_CONFIG_MAX_SOURCES]; /* rollout and eval: each source's */
    int n_sources;
    bt_source_t *task;   /* sources[0]: SFT demonstrations, the canary, the eval suite's own */
    int64_t version;     /* of the weights in model (rollout and eval) */
    bt_eval_suite suite; /* eval: the datasets, their own sources loaded */
    /* trainer: the last train or sft job applied, so the same job handed out again (its result
       was lost with an expiry) is answered from here instead of being applied twice */
    int64_t applied_task; /* -1: none */
    bt_trainer_stats applied_stats;
} s_variant;

typedef struct {
    bt_config *base; /* the WELCOME config (heap); variants apply their sets to it */
    s_variant v[BT_CONFIG_MAX_VARIANTS];
    int n_variants;
    s_variant *cur; /* the variant of the message being handled */
    bt_role role;
    bt_device dev;     /* where the models live */
    size_t peak_bytes; /* device memory at the most in tensors (CUDA), read as the worker leaves */
    bt_tokenizer_t *tok;
    /* rollout and eval: reward.service's client, or NULL */
    bt_reward_service_t *reward;
    void *pipe; /* PAIR to the relay thread */
    char pipe_name[64];
    void *zmq_ctx;
    char *config_json;
    const bt_worker_options *opt;
    bt_status status; /* of building the state */
    char error[512];  /* why it could not be built (sent with BYE) */
    int64_t task_id;  /* of the TASK being run */
    /* what its RESULTs report (bt_usage): with a controller in the same process (inproc://) the
       CPU of its own two threads, the relay's through relay_clock; else its process's */
    bool shares_process;
    clockid_t relay_clock;
    double weights_s; /* spent on WEIGHTS so far: publishing them (trainer), loading them */
} s_compute;

/*  grpo.micro_batch "auto": the largest the memory planner fits in S_AUTO_SHARE of what the device
    can allocate now (bt_device_available) plus the built policy's own weights (the planner counts
    them); 1 when none fits, which the out-of-memory retry then cannot lower. */
#define S_AUTO_SHARE 0.9 /* headroom for libtorch's own buffers and the allocator's rounding */
static int64_t s_auto_micro_batch(const bt_config *cfg, const bt_model *m, bt_device dev) {
    size_t avail = 0;
    if (bt_device_available(dev, &avail) != BT_OK)
        return 1;
    int64_t params = 0;
    for (int i = 0; i < bt_model_num_params(m); i++)
        params += bt_numel(bt_model_params(m)[i]);
    bt_plan_input in = {.device_bytes = S_AUTO_SHARE * ((double)avail + 4.0 * (double)params)};
    bt_plan p;
    char err[128];
    if (bt_plan_make(cfg, bt_model_get_config(m), &in, &p, err, sizeof err) != BT_OK)
        return 1;
    bt_log(BT_LOG_INFO, "trainer: grpo.micro_batch auto: %lld (%.2f GiB available)",
           (long long)(p.max_micro_batch > 0 ? p.max_micro_batch : 1),
           in.device_bytes / (1024.0 * 1024.0 * 1024.0));
    return p.max_micro_batch > 0 ? p.max_micro_batch : 1;
}

/*  Each data source's episodes of variant c->cur (bt_episode_source_new), made now so that an
    environment that cannot be stops the worker before any task, naming the key. */
static bt_status s_build_episodes(s_compute *c) {
    for (int k = 0; k < c->cur->n_sources; k++)
        BT_TRY(bt_episode_source_new(c->opt->curve, c->cur->cfg, k, &c->cur->episodes[k]));
    return BT_OK;
}

/*  The state of variant c->cur, whose cfg is set. */
static bt_status s_build_variant(s_compute *c, bt_device dev) {
    c->cur->applied_task = -1;
    c->cur->n_sources = bt_config_n_sources(c->cur->cfg);
    for (int k = 0; k < c->cur->n_sources; k++) {
        BT_TRY(bt_config_new_source(c->cur->cfg, k, &c->cur->sources[k], NULL));
        if (c->opt->reward)
            bt_source_set_reward_fn(c->cur->sources[k], c->opt->reward, c->opt->reward_user);
    }
    c->cur->task = c->cur->sources[0];
    if (c->role != BT_ROLE_TRAINER) /* rollout and eval: each source's environment */
        BT_TRY(s_build_episodes(c));
    /* every worker starts from the same version-0 weights: loaded, or drawn from run.seed */
    bt_model *m = c->cur->cfg->model_path[0]
                      ? bt_model_load(c->cur->cfg->model_path, dev)
                      : bt_model_new(&c->cur->cfg->model, dev, (uint64_t)c->cur->cfg->run.seed);
    if (!m)
        return BT_EINVAL;
    int64_t vocab = bt_model_get_config(m)->vocab_size;
    if (bt_tokenizer_vocab_size(c->tok) > vocab) {
        bt_model_destroy(&m);
        return bt_fail(BT_EINVAL,
                       "model.path %s: the tokenizer has %d ids, the model's vocab_size "
                       "is %lld",
                       c->cur->cfg->model_path, bt_tokenizer_vocab_size(c->tok), (long long)vocab);
    }
    bt_status st = bt_model_set_precision(m, bt_config_precision_dtype(c->cur->cfg));
    if (st == BT_OK && c->cur->cfg->lora.rank > 0) /* every worker draws the same A: run.seed */
        st = bt_model_add_lora(m, &c->cur->cfg->lora, (uint64_t)c->cur->cfg->run.seed);
    if (st != BT_OK) {
        bt_model_destroy(&m);
        return st;
    }
    if (c->role == BT_ROLE_EVAL) {
        c->cur->model = m;
        BT_TRY(bt_config_eval_suite(c->cur->cfg, c->cur->task, &c->cur->suite));
        if (c->opt->reward)
            bt_eval_suite_set_reward_fn(&c->cur->suite, c->opt->reward, c->opt->reward_user);
        c->cur->suite.reward_service = c->reward;
        bt_eval_suite_set_episodes(&c->cur->suite, c->cur->episodes, c->cur->n_sources);
        return BT_OK;
    }
    if (c->role != BT_ROLE_TRAINER) {
        c->cur->model = m;
        return BT_OK;
    }
    bt_trainer_config tc;
    bt_trainer_config_init(&tc);
    bt_config_adamw(c->cur->cfg, &tc.adamw);
    tc.max_grad_norm = c->cur->cfg->grpo.max_grad_norm;
    tc.micro_batch = c->cur->cfg->grpo.micro_batch;
    if (tc.micro_batch == 0) /* "auto" */
        tc.micro_batch = s_auto_micro_batch(c->cur->cfg, m, c->dev);
    tc.batching = c->cur->cfg->grpo.batching;
    tc.pack_tokens = c->cur->cfg->grpo.pack_tokens;
    tc.share_prefix = c->cur->cfg->grpo.share_prefix;
    tc.shard = c->cur->cfg->workers.shard;
    bt_model_set_activation_checkpointing(m, c->cur->cfg->grpo.activation_checkpointing == 1);
    const bt_config *vc = c->cur->cfg; /* a KL reference when a KL penalty may apply */
    tc.reference =
        vc->grpo.kl_coef > 0 || (vc->pbt.enabled && (vc->pbt.explore_mask & (1 << BT_PBT_KL_COEF)));
    c->cur->trainer = bt_trainer_new(&m, &tc);
    return c->cur->trainer ? BT_OK : BT_EINVAL;
}

static bt_status s_build(s_compute *c) {
    c->base = malloc(sizeof *c->base);
    if (!c->base)
        return bt_fail(BT_ENOMEM, "WELCOME config: out of memory");
    BT_TRY(bt_config_parse(c->config_json, "WELCOME config", NULL, 0, c->base));
    bt_device dev;
    BT_TRY(bt_device_parse(c->opt->device ? c->opt->device : c->base->run.device, &dev));
    c->dev = dev;
    if (c->base->run.threads > 0)
        bt_set_num_threads((int)c->base->run.threads);
    BT_TRY(bt_tokenizer_for_model(c->base->model_path, &c->tok));
    if (c->role != BT_ROLE_TRAINER && c->base->reward.service[0]) {
        BT_TRY(bt_reward_service_new(c->base->reward.service, c->base->reward.timeout_ms,
                                     c->base->reward.retries, &c->reward));
        BT_TRY(bt_reward_service_ping(c->reward)); /* no service there: the run stops now */
    }
    c->n_variants = c->base->n_variants > 0 ? c->base->n_variants : 1;
    for (int k = 0; k < c->n_variants; k++) {
        c->cur = &c->v[k];
        if (c->base->n_variants > 0) {
            c->cur->own = malloc(sizeof *c->cur->own);
            if (!c->cur->own)
                return bt_fail(BT_ENOMEM, "variants[%d]: out of memory", k);
            BT_TRY(bt_config_variant(c->base, k, c->cur->own));
            c->cur->cfg = c->cur->own;
        } else {
            c->cur->cfg = c->base;
        }
        BT_TRY(s_build_variant(c, dev));
    }
    c->cur = &c->v[0];
    return BT_OK;
}

static void s_variant_release(s_variant *v) {
    bt_trainer_destroy(&v->trainer);
    bt_group_destroy(&v->group);
    bt_model_destroy(&v->model);
    for (int k = 0; k < BT_CONFIG_MAX_SOURCES; k++) {
        bt_source_destroy(&v->sources[k]);
        bt_episode_source_release(&v->episodes[k]);
    }
    v->task = NULL;
    bt_eval_suite_release(&v->suite);
    free(v->own);
    v->own = NULL;
    v->cfg = NULL;
}

/*  The worker leaves: everything it holds is freed, and the device memory libtorch cached for it
    goes back to the driver (docs/config.md, "Device memory"). */
static void s_release(s_compute *c) {
    bt_device_memory(c->dev, NULL, &c->peak_bytes, NULL);
    for (int k = 0; k < BT_CONFIG_MAX_VARIANTS; k++)
        s_variant_release(&c->v[k]);
    free(c->base);
    c->base = NULL;
    bt_reward_service_destroy(&c->reward);
    bt_tokenizer_destroy(&c->tok);
    bt_device_release_cache(c->dev);
}

/* ---- what the worker used (bt_usage, on every RESULT) -----------------------------------------
 */

static double s_clock_s(clockid_t id) {
    struct timespec ts;
    return clock_gettime(id, &ts) == 0 ? (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec : NAN;
}

/*  Called on the compute thread: the CPU of this thread and the relay's when the worker shares a
    process with its controller (the process's time would be every worker's and the controller's;
    libtorch's pool threads, shared by every worker there, are then counted by none), else the
    process's; its peak resident memory; on CUDA its device's allocator. */
static void s_usage(const s_compute *c, bt_usage *u) {
    bt_usage_init(u);
    u->cpu_s = c->shares_process ? s_clock_s(CLOCK_THREAD_CPUTIME_ID) + s_clock_s(c->relay_clock)
                                 : s_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    u->weights_s = c->weights_s;
    size_t peak = 0, allocated = 0, reserved = 0;
    if (bt_proc_memory(NULL, &peak) == BT_OK)
        u->peak_rss_mb = (double)peak / (1 << 20);
    if (c->dev.type == BT_DEVICE_CUDA &&
        bt_device_memory(c->dev, &allocated, NULL, &reserved) == BT_OK) {
        u->cuda_allocated_mb = (double)allocated / (1 << 20);
        u->cuda_reserved_mb = (double)reserved / (1 << 20);
    }
}

/* ---- task handlers: fill the RESULT (and maybe a WEIGHTS to publish first) ------------------ */

static bt_status s_publish(s_compute *c) {
    bt_weights w;
    bt_weights_init(&w);
    bt_model *policy = bt_trainer_policy(c->cur->trainer);
    bt_status st = bt_weights_export(policy, bt_trainer_version(c->cur->trainer), &w);
    bt_msg_t *msg = bt_msg_new(BT_MSG_WEIGHTS);
    if (st == BT_OK)
        st = msg ? bt_weights_to_msg(&w, msg) : BT_ENOMEM;
    if (st == BT_OK)
        st = bt_msg_set_int(msg, "variant", c->cur - c->v);
    if (st == BT_OK)
        st = bt_proto_send(&msg, c->pipe, NULL, 0);
    bt_msg_destroy(&msg);
    bt_weights_release(&w);
    return st;
}

/*  Sampling settings are the variant's config (WELCOME); the temperature is the tuner's (TASK). */
static bt_status s_task_rollout(s_compute *c, const bt_spec_task *t, bt_spec_result *r) {
    const bt_spec_rollout *job = &t->u.rollout;
    const uint64_t *idx = job->prompts;
    int64_t n = job->n_prompts;
    const bt_config *cfg = c->cur->cfg;
    bt_rollout_config rc;
    bt_rollout_config_init(&rc);
    rc.group_size = cfg->grpo.group_size;
    rc.sample.max_new_tokens = cfg->grpo.max_new_tokens;
    rc.sample.temperature = t->hyper.temperature;
    rc.sample.top_k = cfg->grpo.top_k;
    rc.sample.top_p = cfg->grpo.top_p;
    rc.reward_service = c->reward;
    int source = n > 0 ? BT_PROMPT_SOURCE(idx[0]) : 0; /* the controller sends one source */
    for (int64_t i = 0; i < n; i++)
        if (BT_PROMPT_SOURCE(idx[i]) != source || source >= c->cur->n_sources)
            return bt_fail(BT_EINVAL,
                           "rollout: prompt %lld names data source %d, expected %d of "
                           "%d sources",
                           (long long)i, BT_PROMPT_SOURCE(idx[i]), source, c->cur->n_sources);
    rc.env = c->cur->episodes[source].env;
    rc.episode = c->cur->episodes[source].episode;
    return bt_rollout_sample(c->cur->model, c->tok, c->cur->sources[source], idx, n, &rc,
                             t->version, (uint64_t)job->seed, &r->batch);
}

/*  The supervised loss of a fixed batch (demonstrations of training-stream examples 0..7): a
    checkpoint records it and a restored trainer must reproduce it. */
static bt_status s_canary(s_compute *c, double *loss) {
    const uint64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    bt_status st = bt_rollout_demonstrations(c->tok, c->cur->task, idx, 8, &b);
    if (st == BT_OK)
        st = bt_trainer_sft_loss(c->cur->trainer, &b, loss);
    bt_rollout_batch_release(&b);
    return st;
}

static bt_status s_expect(s_compute *c, int64_t expect, bool *replayed);

/*  The trainer's whole state into res, and its canary loss. */
static bt_status s_snapshot(s_compute *c, const bt_spec_task *t, bt_spec_result *r, bt_msg_t *res) {
    bool replayed;
    BT_TRY(s_expect(c, t->u.snapshot.expect_version, &replayed));
    if (replayed) /* a snapshot of a state it has moved past */
        return bt_fail(BT_ESTATE, "trainer: asked for a snapshot of version %lld, holds %lld",
                       (long long)bt_trainer_version(c->cur->trainer) - 1,
                       (long long)bt_trainer_version(c->cur->trainer));
    BT_TRY(s_canary(c, &r->canary_loss));
    return bt_trainer_state_to_msg(c->cur->trainer, res);
}

/*  Loads a saved trainer state as version restore_version, then publishes its weights; returns
    the canary loss. */
static bt_status s_task_restore(s_compute *c, const bt_spec_task *t, const bt_msg_t *task,
                                bt_spec_result *r, bool *publish) {
    c->cur->applied_task = -1;
    if (t->u.restore
            .initial) { /* the state every trainer starts from: built again; its group stays */
        bt_group *group = c->cur->group;
        c->cur->group = NULL;
        bt_trainer_set_group(c->cur->trainer, NULL);
        s_variant_release(c->cur);
        BT_TRY(s_build_variant(c, c->dev));
        c->cur->group = group;
        bt_trainer_set_group(c->cur->trainer, group);
    } else {
        BT_TRY(bt_trainer_state_from_msg(task, t->u.restore.restore_version, c->cur->trainer));
    }
    BT_TRY(s_canary(c, &r->canary_loss));
    *publish = true;
    return BT_OK;
}

/*  A job that applies an update (train, sft) or reads the state (snapshot) names the version it
    expects the trainer to hold.  The job this trainer applied last, handed out again, is
    answered with its recorded statistics (*replayed); any other mismatch is BT_ESTATE: the
    controller restores the trainer instead of training on the wrong state. */
static bt_status s_expect(s_compute *c, int64_t expect, bool *replayed) {
    *replayed = false;
    if (expect < 0) /* the job applies to any version */
        return BT_OK;
    int64_t held = bt_trainer_version(c->cur->trainer);
    if (held == expect)
        return BT_OK;
    if (held == expect + 1 && c->cur->applied_task == c->task_id) {
        *replayed = true;
        return BT_OK;
    }
    return bt_fail(BT_ESTATE, "trainer: holds version %lld, the job expects %lld", (long long)held,
                   (long long)expect);
}

/*  An update job's start: s_expect, then publish; a job this trainer applied already is answered
    here from its record (*answered). */
static void s_expect_update(s_compute *c, int64_t expect, bool publish_asked, bt_spec_result *r,
                            bool *publish, bool *answered, bt_status *st) {
    *st = s_expect(c, expect, answered);
    *publish = *st == BT_OK && publish_asked;
    if (*st == BT_OK && *answered)
        r->stats = c->cur->applied_stats;
}

/*  After an update: the job and its statistics, for a replay. */
static void s_applied(s_compute *c, const bt_trainer_stats *stats, bt_spec_result *r) {
    c->cur->applied_task = c->task_id;
    c->cur->applied_stats = *stats;
    r->stats = *stats;
}

/*  After a GRPO step that failed with st: when it ran out of memory with a micro-batch above 1,
    halves the trainer's micro-batch and says to retry the same batch.  A failed step leaves the
    weights and moments as they were and drops its gradients (trainer.h), and the update does not
    depend on the micro-batch (to float rounding), so the retry trains the batch once.  Not when
    AdamW itself failed (it may have stepped some parameters), nor in a data-parallel group (the
    ranks would have to agree on the retry: the step fails as before). */
static bool s_retry_smaller(s_compute *c, bt_status st) {
    bt_trainer_t *tr = c->cur->trainer;
    int64_t mb = bt_trainer_micro_batch(tr);
    bool oom = st != BT_OK && (st == BT_ENOMEM || bt_last_status() == BT_ENOMEM);
    if (!oom || mb <= 1 || c->cur->group || strstr(bt_last_error(), "bt_adamw_step"))
        return false;
    bt_device_release_cache(c->dev); /* what the failed step cached */
    bt_trainer_set_micro_batch(tr, mb / 2);
    bt_log(BT_LOG_WARN, "trainer: out of memory with grpo.micro_batch %lld: retrying with %lld",
           (long long)mb, (long long)(mb / 2));
    return true;
}

static bt_status s_task_train(s_compute *c, const bt_spec_task *t, bt_spec_result *r,
                              bool *publish) {
    const bt_spec_train *job = &t->u.train;
    bool replayed;
    bt_status st;
    s_expect_update(c, job->expect_version, job->publish, r, publish, &replayed, &st);
    if (st != BT_OK || replayed)
        return st;
    if (job->freeze_reference) /* RL's first step: the KL anchor is the policy as RL starts */
        BT_TRY(bt_trainer_freeze_reference(c->cur->trainer));
    const bt_rollout_batch *b = job->batch;
    int64_t n_adv = b->n * (b->has_turn_rewards ? BT_MAX_TURNS : 1); /* per turn: (n, turns) */
    double *a = malloc(sizeof *a * (size_t)n_adv + 1);
    if (!a)
        return bt_fail(BT_ENOMEM, "train: out of memory");
    memcpy(a, job->adv, sizeof *a * (size_t)n_adv);
    for (int64_t i = 0; job->inject_nan && i < n_adv; i++) /* debug.inject_nan_at_step */
        a[i] = NAN;
    bt_trainer_stats stats;
    bt_grpo_config gc;
    bt_config_grpo(c->cur->cfg, &gc);
    gc.kl_coef = t->hyper.kl_coef;     /* the controller's, which a tuner may have changed */
    gc.clip_high = t->hyper.clip_high; /* the config's, unless PBT explored it */
    int64_t lowered = 0;
    for (;;) {
        st = bt_trainer_grpo_step(c->cur->trainer, b, a, t->hyper.lr, &gc, &stats);
        if (!s_retry_smaller(c, st))
            break;
        lowered++;
    }
    stats.lowered = lowered;
    if (st == BT_OK)
        s_applied(c, &stats, r);
    free(a);
    return st;
}

static bt_status s_task_sft(s_compute *c, const bt_spec_task *t, bt_spec_result *r, bool *publish) {
    const bt_spec_sft *job = &t->u.sft;
    bool replayed;
    bt_status st;
    s_expect_update(c, job->expect_version, job->publish, r, publish, &replayed, &st);
    if (st != BT_OK || replayed)
        return st;
    int64_t start = job->start, count = job->count;
    uint64_t *idx = malloc(sizeof *idx * (size_t)count);
    if (!idx)
        return bt_fail(BT_ENOMEM, "sft: out of memory");
    for (int64_t i = 0; i < count; i++)
        idx[i] = (uint64_t)(start + i);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    bt_trainer_stats stats;
    st = bt_rollout_demonstrations(c->tok, c->cur->task, idx, count, &b);
    if (st == BT_OK)
        st = bt_trainer_sft_step(c->cur->trainer, &b, t->hyper.lr, &stats);
    if (st == BT_OK)
        s_applied(c, &stats, r);
    bt_rollout_batch_release(&b);
    free(idx);
    return st;
}

/*  The host part of the controller's endpoint, where it also serves the trainer group's store:
    "tcp://10.0.0.1:5555" -> "10.0.0.1"; ipc:// and inproc:// endpoints are on this machine. */
static void s_endpoint_host(const char *endpoint, char *host, size_t cap) {
    snprintf(host, cap, "127.0.0.1");
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return;
    const char *start = endpoint + 6, *colon = strrchr(start, ':');
    size_t len = colon ? (size_t)(colon - start) : strlen(start);
    if (len >= 2 && start[0] == '[' && start[len - 1] == ']') { /* [ipv6] */
        start++;
        len -= 2;
    }
    if (len > 0 && len < cap)
        snprintf(host, cap, "%.*s", (int)len, start);
}

/*  The local address this machine reaches host from: a UDP socket connected there (no packet is
    sent) tells it.  Collective traffic binds to it, so ranks find each other across networks. */
static bt_status s_local_addr(const char *host, int port, char *out, size_t cap) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0)
        return bt_fail(BT_EIO, "worker: cannot resolve %s: %s", host, gai_strerror(rc));
    int fd = socket(res->ai_family, SOCK_DGRAM, 0);
    struct sockaddr_storage local;
    socklen_t len = sizeof local;
    bool ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
              getsockname(fd, (struct sockaddr *)&local, &len) == 0;
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    const void *addr = local.ss_family == AF_INET6
                           ? (const void *)&((struct sockaddr_in6 *)&local)->sin6_addr
                           : (const void *)&((struct sockaddr_in *)&local)->sin_addr;
    if (!ok || !inet_ntop(local.ss_family, addr, out, (socklen_t)cap))
        return bt_fail(BT_EIO, "worker: no local address reaches %s", host);
    return BT_OK;
}

/*  Joins a (re-)formed data-parallel trainer group, then takes rank 0's state; returns the
    version it holds.  A group of one rank is no group. */
static bt_status s_task_group(s_compute *c, const bt_spec_task *t) {
    const bt_spec_group *job = &t->u.group;
    int64_t rank = job->rank, world = job->world, port = job->store_port;
    int64_t timeout_ms = c->cur->cfg->workers.collective_timeout_ms; /* fixed: WELCOME's */
    const char *prefix = job->prefix;
    bt_trainer_set_group(c->cur->trainer, NULL);
    bt_group_destroy(&c->cur->group);
    if (world > 1) {
        char host[256], local[64];
        s_endpoint_host(c->opt->endpoint, host, sizeof host);
        BT_TRY(s_local_addr(host, (int)port, local, sizeof local));
        bt_group_config gc = {.store_host = host,
                              .store_port = (int)port,
                              .prefix = prefix,
                              .rank = (int)rank,
                              .world = (int)world,
                              .local_addr = local,
                              .device = bt_model_device(bt_trainer_policy(c->cur->trainer)),
                              .timeout_ms = timeout_ms};
        c->cur->group = bt_group_new(&gc);
        if (!c->cur->group)
            return BT_EIO;
        bt_trainer_set_group(c->cur->trainer, c->cur->group);
        BT_TRY(bt_trainer_sync(c->cur->trainer, 0));
    }
    return BT_OK; /* the RESULT's trainer_version says what it holds now */
}

/*  One shard of one eval.datasets entry, against the weights of the task's version. */
static bt_status s_task_eval(s_compute *c, const bt_spec_task *t, bt_spec_result *r) {
    const bt_spec_eval *job = &t->u.eval;
    int64_t version = t->version;
    if (version != c->cur->version) /* evaluation runs against a pinned policy version */
        return bt_fail(BT_ESTATE, "eval: the task is for version %lld, this worker holds %lld",
                       (long long)version, (long long)c->cur->version);
    bt_status st = bt_eval_suite_run(&c->cur->suite, (int)job->dataset, c->cur->model, c->tok,
                                     (size_t)job->start, (size_t)job->count, job->robustness,
                                     (uint64_t)job->seed, &r->sums);
    /* evaluations come now and then, their batches and KV caches are large: what they cached goes
       back to the driver, for the trainer and rollouts that may share the GPU */
    bt_device_release_cache(c->dev);
    return st;
}

/*  A task that ran out of memory, as one line a user can act on: where, how much was asked for
    (the shim's "tried to allocate ..."), and the keys that size that allocation.  The same task
    needs the same memory again, so the controller stops the run on it instead of retrying. */
static void s_oom_reason(const s_compute *c, bt_job_kind kind, char *reason, size_t cap) {
    const bt_config *cfg = c->cur->cfg;
    char dev[32], what[160], hint[256];
    bt_device_format(c->dev, dev, sizeof dev);
    const char *asked = strstr(bt_last_error(), "tried to allocate");
    if (asked)
        snprintf(what, sizeof what, "%.*s", (int)strcspn(asked, ")"), asked);
    else
        snprintf(what, sizeof what, "%s", bt_last_error());
    const char *where;
    switch (kind) {
    case BT_JOB_ROLLOUT:
        where = "rollout";
        snprintf(hint, sizeof hint,
                 "lower grpo.prompts_per_step (now %lld), grpo.group_size (now %lld) or "
                 "grpo.max_new_tokens (now %lld), or add rollout workers",
                 (long long)cfg->grpo.prompts_per_step, (long long)cfg->grpo.group_size,
                 (long long)cfg->grpo.max_new_tokens);
        break;
    case BT_JOB_EVAL:
        where = "evaluation";
        snprintf(hint, sizeof hint,
                 "lower eval.max_new_tokens (now %lld) or eval.samples (now %lld)",
                 (long long)cfg->eval.max_new_tokens, (long long)cfg->eval.samples);
        break;
    default: /* the trainer's kinds, or a TASK that did not parse */
        where = kind == BT_JOB_SFT ? "trainer's SFT step" : "trainer step";
        snprintf(hint, sizeof hint,
                 "lower grpo.micro_batch (now %lld) or grpo.max_new_tokens (now %lld)",
                 (long long)(c->cur->trainer ? bt_trainer_micro_batch(c->cur->trainer)
                                             : cfg->grpo.micro_batch),
                 (long long)cfg->grpo.max_new_tokens);
        break;
    }
    snprintf(reason, cap, "out of memory on %s in the %s (%s); %s", dev, where, what, hint);
}

/*  Makes the message's variant (field "variant", 0 when absent) the current one. */
static bt_status s_select_variant(s_compute *c, const bt_msg_t *msg) {
    int64_t k = 0;
    if (bt_msg_has(msg, "variant"))
        BT_TRY(bt_msg_get_int(msg, "variant", 0, c->n_variants - 1, &k));
    c->cur = &c->v[k];
    return BT_OK;
}

/*  What a TASK may index into: this worker's variants and their eval datasets. */
static void s_limits(const s_compute *c, bt_spec_limits *lim) {
    memset(lim, 0, sizeof *lim);
    lim->n_variants = c->n_variants;
    for (int k = 0; k < c->n_variants; k++)
        lim->n_datasets[k] = c->v[k].cfg->eval.n_datasets;
}

/*  The TASK's kind on this worker: its handler, which fills r (the snapshot also adds its state
    tensors to res). */
static bt_status s_dispatch(s_compute *c, const bt_spec_task *t, const bt_msg_t *task,
                            bt_spec_result *r, bt_msg_t *res, bool *publish) {
    if (bt_job_kind_role(t->kind) != c->role)
        return bt_fail(BT_EINVAL, "a %s worker cannot run a '%s' task", bt_role_name(c->role),
                       bt_job_kind_name(t->kind));
    switch (t->kind) {
    case BT_JOB_ROLLOUT: return s_task_rollout(c, t, r);
    case BT_JOB_TRAIN: return s_task_train(c, t, r, publish);
    case BT_JOB_SFT: return s_task_sft(c, t, r, publish);
    case BT_JOB_RESTORE: return s_task_restore(c, t, task, r, publish);
    case BT_JOB_SNAPSHOT: return s_snapshot(c, t, r, res);
    case BT_JOB_GROUP: return s_task_group(c, t);
    case BT_JOB_EVAL: return s_task_eval(c, t, r);
    case BT_JOB_KIND_COUNT: break;
    }
    return bt_fail(BT_EINVAL, "TASK: not a job kind");
}

/*  Runs one TASK; sends WEIGHTS first when the task asks to publish, then RESULT or FAIL (with
    its status: BT_ENOMEM tells the controller a retry would fail the same way). */
static bt_status s_run_task(s_compute *c, const bt_msg_t *task) {
    int64_t id = -1;
    bt_clear_error(); /* the reason of a failure is this task's */
    bt_msg_t *res = bt_msg_new(BT_MSG_RESULT);
    if (!res)
        return bt_fail(BT_ENOMEM, "worker: out of memory");
    bool publish = false;
    double t0 = bt_now();
    bt_spec_task t;
    bt_spec_limits lim;
    bt_spec_result r;
    s_limits(c, &lim);
    bt_status st = bt_msg_get_int(task, "task", 0, BT_WIRE_INT_MAX, &id); /* for a FAIL too */
    c->task_id = st == BT_OK ? id : -1;
    if (st == BT_OK)
        st = bt_spec_task_from_msg(task, &lim, &t);
    else
        t.kind = BT_JOB_KIND_COUNT;
    if (st == BT_OK)
        c->cur = &c->v[t.variant];
    bt_spec_result_init(&r, t.kind);
    if (st == BT_OK)
        st = s_dispatch(c, &t, task, &r, res, &publish);
    bool trainer = c->role == BT_ROLE_TRAINER;
    bool collective = c->cur->group && bt_group_broken(c->cur->group);
    if (collective) { /* let the other ranks know at once */
        bt_trainer_set_group(c->cur->trainer, NULL);
        bt_group_destroy(&c->cur->group);
    }
    if (st == BT_OK && publish) {
        double t_pub = bt_now();
        st = s_publish(c);
        c->weights_s += bt_now() - t_pub;
    }
    if (st == BT_OK && trainer && c->cur->trainer) /* what the controller expects next time */
        r.trainer_version = bt_trainer_version(c->cur->trainer);
    r.task = id;
    r.compute_s = bt_now() - t0; /* model compute, for the orchestration-overhead benchmark */
    s_usage(c, &r.usage);
    if (st == BT_OK)
        st = bt_spec_result_to_msg(&r, res);
    bt_spec_result_release(&r);
    bt_spec_task_release(&t);
    if (st != BT_OK) {
        /* a chain of tensor ops fails as a whole; its first error says what happened */
        bt_status code = st == BT_ENOMEM || bt_last_status() == BT_ENOMEM ? BT_ENOMEM : st;
        if (collective) /* a peer rank died or went silent: the group is re-formed, then retried */
            code = BT_EIO;
        char reason[512];
        if (code == BT_ENOMEM) {
            s_oom_reason(c, r.kind, reason, sizeof reason);
            bt_device_release_cache(c->dev); /* what the failed step cached */
        } else
            snprintf(reason, sizeof reason, "%s", bt_last_error());
        bt_msg_destroy(&res);
        res = bt_msg_new(BT_MSG_FAIL);
        if (!res)
            return BT_ENOMEM;
        bt_msg_set_str(res, "error", reason);
        bt_msg_set_int(res, "status", code);
    }
    if (st != BT_OK) /* a RESULT got its id from the spec */
        bt_msg_set_int(res, "task", id >= 0 ? id : 0);
    return bt_proto_send(&res, c->pipe, NULL, 0);
}

static bt_status s_load_weights(s_compute *c, const bt_msg_t *msg) {
    BT_TRY(s_select_variant(c, msg));
    if (!c->cur->model)
        return BT_OK; /* the trainer is the source of weights */
    bt_weights w;
    bt_weights_init(&w);
    bt_status st = bt_weights_from_msg(msg, &w);
    if (st == BT_OK)
        st = bt_weights_load(c->cur->model, &w);
    if (st == BT_OK)
        c->cur->version = w.version;
    bt_weights_release(&w);
    return st;
}

static void *s_compute_main(void *arg) {
    s_compute *c = arg;
    prctl(PR_SET_NAME, "bt-compute", 0, 0, 0); /* for `top -H`, gdb, and the deadline test */
    c->pipe = zmq_socket(c->zmq_ctx, ZMQ_PAIR);
    zmq_connect(c->pipe, c->pipe_name);
    c->status = s_build(c);
    if (c->status != BT_OK) {
        snprintf(c->error, sizeof c->error, "%s", bt_last_error());
        bt_log(BT_LOG_ERROR, "worker: cannot start: %s", c->error);
    }
    bt_msg_t *ready = bt_msg_new(c->status == BT_OK ? BT_MSG_PING : BT_MSG_BYE);
    bt_proto_send(&ready, c->pipe, NULL, 0);
    for (bool running = c->status == BT_OK; running;) {
        bt_msg_t *msg = NULL;
        if (bt_proto_recv(c->pipe, &msg, NULL, NULL, 0) == BT_EIO)
            break;
        if (!msg)
            continue;
        switch (bt_msg_type_of(msg)) {
        case BT_MSG_TASK: s_run_task(c, msg); break;
        case BT_MSG_WEIGHTS: {
            double t0 = bt_now();
            bt_status st = s_load_weights(c, msg);
            c->weights_s += bt_now() - t0;
            if (st != BT_OK)
                bt_log(BT_LOG_ERROR, "worker: weights not loaded: %s", bt_last_error());
            break;
        }
        case BT_MSG_STOP: running = false; break;
        default: break;
        }
        bt_msg_destroy(&msg);
    }
    s_release(c);
    zmq_close(c->pipe);
    return NULL;
}

/* ---- relay thread ---------------------------------------------------------------------------- */

/*  run: the run id WELCOME gave, on a HELLO that joins again ("" the first time). */
static bt_status s_send_hello(void *dealer, const bt_worker_options *opt, const char *run) {
    bt_msg_t *m = bt_msg_new(BT_MSG_HELLO);
    if (!m)
        return BT_ENOMEM;
    bt_msg_set_run(m, run);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    bt_msg_set_str(m, "role", bt_role_name(opt->role));
    bt_msg_set_str(m, "name", opt->name);
    bt_msg_set_str(m, "host", host);
    bt_msg_set_int(m, "pid", (int64_t)getpid());
    bt_msg_set_str(m, "device", opt->device ? opt->device : "config");
    bt_msg_set_int(m, "threads", bt_get_num_threads());
    bt_msg_set_int(m, "proto", BT_PROTO_VERSION);
    return bt_proto_send(&m, dealer, NULL, 0);
}

/*  Why no WELCOME came: the controller refused this worker's key, or did not answer at all. */
static void s_no_welcome(const bt_worker_options *opt, int64_t limit, int auth_status) {
    if (auth_status)
        bt_fail(BT_EIO,
                "the controller at %s refused this worker's key %s (ZAP status %d): add its "
                "public key to the controller's --allow keys",
                opt->endpoint, opt->curve->public_key, auth_status);
    else if (opt->curve)
        bt_fail(BT_EIO,
                "no WELCOME from %s within %lld ms: the controller did not answer; with CURVE a "
                "likely cause is a key mismatch (--server-key must be the controller's public "
                "key, and this worker's key %s one of its --allow keys)",
                opt->endpoint, (long long)limit, opt->curve->public_key);
    else
        bt_fail(BT_EIO,
                "no WELCOME from %s within %lld ms: the controller did not answer (is it running, "
                "bound there, and without CURVE keys?)",
                opt->endpoint, (long long)limit);
}

/*  An INVALID from the controller: its reason is logged (once per reason); true when it says
    joining again cannot help (another run, another protocol), with the reason as the error. */
static bool s_on_invalid(const bt_msg_t *m, const bt_worker_options *opt, char *last, size_t cap) {
    const char *reason = "(no reason given)";
    bool leave = false;
    bt_msg_get_str(m, "reason", 1024, &reason);
    if (bt_msg_has(m, "leave"))
        bt_msg_get_bool(m, "leave", &leave);
    if (strcmp(last, reason) != 0)
        bt_log(BT_LOG_WARN, "%s: the controller refused a message: %s", opt->name, reason);
    snprintf(last, cap, "%s", reason);
    if (leave)
        bt_fail(BT_EINVAL, "the controller at %s refused this worker: %s", opt->endpoint, reason);
    return leave;
}

/*  Waits for WELCOME; returns it (caller owns) or NULL on timeout / I/O failure.  monitor (or
    NULL) reports a CURVE handshake the controller refused: no WELCOME can come then. */
static bt_msg_t *s_await_welcome(void *dealer, void *monitor, const bt_worker_options *opt) {
    int64_t limit = opt->join_timeout_ms > 0 ? opt->join_timeout_ms : 30000;
    int64_t deadline = s_now_ms() + limit, hello_at = -1;
    char refused[256] = "";
    while (s_now_ms() < deadline) {
        if (hello_at >= 0 && s_now_ms() >= hello_at) { /* refused for now (a name in use): again */
            s_send_hello(dealer, opt, "");
            hello_at = -1;
        }
        zmq_pollitem_t items[2] = {{dealer, 0, ZMQ_POLLIN, 0}, {monitor, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, monitor ? 2 : 1, 100) <= 0)
            continue;
        if (items[1].revents & ZMQ_POLLIN) {
            uint8_t event[6] = {0};
            int n = zmq_recv(monitor, event, sizeof event, 0);
            int more = 0;
            size_t sz = sizeof more;
            while (zmq_getsockopt(monitor, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
                char skip[256];
                zmq_recv(monitor, skip, sizeof skip, 0);
            }
            uint32_t status = 0;
            memcpy(&status, event + 2, sizeof status);
            if (n >= 6) {
                s_no_welcome(opt, limit, (int)status);
                return NULL;
            }
        }
        if (!(items[0].revents & ZMQ_POLLIN))
            continue;
        bt_msg_t *m = NULL;
        if (bt_proto_recv(dealer, &m, NULL, NULL, 0) == BT_EIO)
            return NULL;
        if (m && bt_msg_type_of(m) == BT_MSG_WELCOME)
            return m;
        if (m && bt_msg_type_of(m) == BT_MSG_INVALID) {
            if (s_on_invalid(m, opt, refused, sizeof refused)) {
                bt_msg_destroy(&m);
                return NULL;
            }
            hello_at = s_now_ms() + 500;
        }
        bt_msg_destroy(&m);
    }
    if (refused[0])
        bt_fail(BT_EIO, "no WELCOME from %s within %lld ms; it last said: %s", opt->endpoint,
                (long long)limit, refused);
    else
        s_no_welcome(opt, limit, 0);
    return NULL;
}

/*  Forwards one message from one socket to another; returns its type, or -1 when none came.
 *tasks counts the TASKs seen; the one numbered die_at is dropped and returned as -2.  run (when
    not NULL) stamps the message with the run id.  PING (the controller's heartbeat) and INVALID
    stay here; *kept gets an INVALID (caller destroys), else NULL. */
static int s_relay(void *from, void *to, int64_t *tasks, int64_t die_at, const char *run,
                   bt_msg_t **kept) {
    bt_msg_t *m = NULL;
    if (kept)
        *kept = NULL;
    if (bt_proto_recv(from, &m, NULL, NULL, ZMQ_DONTWAIT) != BT_OK || !m)
        return -1;
    int type = (int)bt_msg_type_of(m);
    if ((type == BT_MSG_TASK && ++*tasks == die_at) || type == BT_MSG_PING) {
        bt_msg_destroy(&m);
        return type == BT_MSG_PING ? type : -2;
    }
    if (type == BT_MSG_INVALID && kept) {
        *kept = m;
        return type;
    }
    if (run)
        bt_msg_set_run(m, run);
    if (bt_proto_send(&m, to, NULL, 0) != BT_OK)
        bt_log(BT_LOG_WARN, "worker: relay of %s failed: %s", bt_msg_type_name((bt_msg_type)type),
               bt_last_error());
    return type;
}

/*  What the relay thread knows of the run it joined. */
typedef struct {
    int64_t hb_ms;                  /* its PING interval */
    int64_t silence_ms;             /* a controller silent this long is gone: the worker leaves */
    char run[BT_WIRE_STR_MAX / 16]; /* the run id, stamped on every message sent */
} s_joined;

/*  Relays until STOP.  die_at_task > 0 (debug.kill_rollout_at_task): on receiving that TASK the
    worker dies as a crashed process would, silently; *crashed is then set.  A controller that
    forgot this worker (it was expired) answers each of its messages with INVALID: one HELLO
    answers them all, sent again only when no WELCOME followed within ten heartbeats.  An INVALID
    that says leave (another run), or a controller silent for j->silence_ms, ends it. */
static bt_status s_serve(void *dealer, void *pipe, const bt_worker_options *opt, const s_joined *j,
                         int64_t die_at_task, bool *crashed, bt_worker_stats *stats) {
    int64_t hb_ms = j->hb_ms, heard = s_now_ms();
    int64_t last_sent = s_now_ms(), hello_at = -1; /* the rejoin's HELLO; -1: none pending */
    char refused[256] = "";
    for (;;) {
        zmq_pollitem_t items[2] = {{dealer, 0, ZMQ_POLLIN, 0}, {pipe, 0, ZMQ_POLLIN, 0}};
        int64_t wait = hb_ms - (s_now_ms() - last_sent);
        if (zmq_poll(items, 2, (long)(wait > 0 ? wait : 0)) < 0)
            return bt_fail(BT_EIO, "worker: poll failed: %s", zmq_strerror(zmq_errno()));
        if (items[0].revents & ZMQ_POLLIN) {
            int64_t before = stats->tasks;
            bt_msg_t *invalid = NULL;
            int type = s_relay(dealer, pipe, &stats->tasks, die_at_task, NULL, &invalid);
            bool leave = invalid && s_on_invalid(invalid, opt, refused, sizeof refused);
            bt_msg_destroy(&invalid);
            if (leave)
                return BT_EINVAL;
            if (type >= 0)
                heard = s_now_ms();
            stats->tasks_last_join += stats->tasks - before;
            if (type == -2) {
                *crashed = true;
                return bt_fail(BT_EIO, "%s: crashed on purpose (debug.kill_rollout_at_task)",
                               opt->name);
            }
            if (type == BT_MSG_STOP)
                return BT_OK;
            if (type == BT_MSG_INVALID && (hello_at < 0 || s_now_ms() - hello_at > 10 * hb_ms)) {
                bt_log(BT_LOG_WARN, "%s: the controller forgot this worker: joining again",
                       opt->name); /* the controller re-queued what it held */
                s_send_hello(dealer, opt, j->run);
                hello_at = last_sent = s_now_ms();
            }
            if (type == BT_MSG_WELCOME) { /* joined again: the compute thread ignores it */
                hello_at = -1;
                stats->joins++;
                stats->tasks_last_join = 0;
            }
        }
        int64_t none = 0;
        if ((items[1].revents & ZMQ_POLLIN) && s_relay(pipe, dealer, &none, 0, j->run, NULL) >= 0)
            last_sent = s_now_ms();
        if (s_now_ms() - heard > j->silence_ms)
            return bt_fail(BT_EIO,
                           "%s: no word from the controller at %s for %lld ms: it is gone, "
                           "this worker leaves",
                           opt->name, opt->endpoint, (long long)(s_now_ms() - heard));
        if (s_now_ms() - last_sent >= hb_ms) {
            bt_msg_t *ping = bt_msg_new(BT_MSG_PING);
            bt_msg_set_run(ping, j->run);
            bt_proto_send(&ping, dealer, NULL, 0);
            last_sent = s_now_ms();
        }
    }
}

bt_status bt_worker_run(const bt_worker_options *opt) {
    bt_worker_stats stats = {0};
    if (opt->stats)
        *opt->stats = stats;
    void *dealer = zmq_socket(opt->zmq_ctx, ZMQ_DEALER), *monitor = NULL;
    int linger = 0;
    char monitor_name[64];
    snprintf(monitor_name, sizeof monitor_name, "inproc://bt-worker-monitor-%p", (void *)&stats);
    if (dealer)
        zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
    if (dealer && opt->curve) { /* CURVE, and word of a refused handshake while joining */
        bt_status st = bt_curve_client(dealer, opt->curve);
        if (st != BT_OK) {
            zmq_close(dealer);
            return st;
        }
        monitor = zmq_socket(opt->zmq_ctx, ZMQ_PAIR);
        if (monitor &&
            (zmq_setsockopt(monitor, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
             zmq_socket_monitor(dealer, monitor_name, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0 ||
             zmq_connect(monitor, monitor_name) != 0)) {
            zmq_close(monitor);
            monitor = NULL;
        }
    }
    if (!dealer || zmq_connect(dealer, opt->endpoint) != 0) {
        bt_status st = bt_fail(BT_EIO, "%s: cannot connect to %s: %s", opt->name, opt->endpoint,
                               zmq_strerror(zmq_errno()));
        if (monitor)
            zmq_close(monitor);
        if (dealer)
            zmq_close(dealer);
        return st;
    }
    s_compute c = {.role = opt->role,
                   .zmq_ctx = opt->zmq_ctx,
                   .opt = opt,
                   .shares_process = !strncmp(opt->endpoint, "inproc://", 9)};
    if (pthread_getcpuclockid(pthread_self(), &c.relay_clock) != 0)
        c.relay_clock = CLOCK_THREAD_CPUTIME_ID; /* counts the compute thread twice: never here */
    bt_status st = s_send_hello(dealer, opt, "");
    bt_msg_t *welcome = st == BT_OK ? s_await_welcome(dealer, monitor, opt) : NULL;
    if (monitor) {
        zmq_socket_monitor(dealer, NULL, 0);
        zmq_close(monitor);
    }
    stats.joins = welcome ? 1 : 0;
    s_joined joined = {.hb_ms = 500, .silence_ms = 60000};
    bt_msg_tensor cfg_text;
    if (!welcome || bt_msg_get_int(welcome, "heartbeat_ms", 1, 3600000, &joined.hb_ms) != BT_OK ||
        (bt_msg_has(welcome, "controller_timeout_ms") &&
         bt_msg_get_int(welcome, "controller_timeout_ms", 1, BT_WIRE_INT_MAX, &joined.silence_ms) !=
             BT_OK) ||
        bt_msg_get_tensor(welcome, "config", BT_U8, 1, &cfg_text) != BT_OK) {
        bt_msg_destroy(&welcome);
        zmq_close(dealer);
        return bt_last_status() != BT_OK ? bt_last_status() : BT_EIO;
    }
    snprintf(joined.run, sizeof joined.run, "%s", bt_msg_run(welcome));
    c.config_json = malloc(cfg_text.nbytes + 1);
    memcpy(c.config_json, cfg_text.data, cfg_text.nbytes);
    c.config_json[cfg_text.nbytes] = '\0';
    bt_msg_destroy(&welcome);

    snprintf(c.pipe_name, sizeof c.pipe_name, "inproc://bt-worker-%p", (void *)&c);
    void *pipe = zmq_socket(opt->zmq_ctx, ZMQ_PAIR);
    zmq_bind(pipe, c.pipe_name);
    pthread_t thread;
    pthread_create(&thread, NULL, s_compute_main, &c);
    bt_msg_t *ready = NULL; /* PING: state built; BYE: it could not be */
    while (!ready && bt_proto_recv(pipe, &ready, NULL, NULL, 0) == BT_OK)
        ;
    bool ok = ready && bt_msg_type_of(ready) == BT_MSG_PING;
    bt_msg_destroy(&ready);
    /* s_serve relays STOP itself; on any other way out the compute thread still needs one */
    /* debug.kill_rollout_at_task: rollout-0 crashes on that task (c.base: parsed by the compute
       thread before its ready message) */
    int64_t die_at = ok && opt->role == BT_ROLE_ROLLOUT && !strcmp(opt->name, "rollout-0")
                         ? c.base->debug.kill_rollout_at_task
                         : 0;
    bool crashed = false;
    st = ok ? s_serve(dealer, pipe, opt, &joined, die_at, &crashed, &stats) : c.status;
    int timeout_ms = 2000; /* never block for good on a peer that is gone */
    zmq_setsockopt(pipe, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(dealer, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    if (ok && st != BT_OK) {
        bt_msg_t *stop = bt_msg_new(BT_MSG_STOP);
        bt_proto_send(&stop, pipe, NULL, 0);
    }
    pthread_join(thread, NULL);
    bt_device_format(c.dev, stats.device, sizeof stats.device);
    stats.device_peak = c.peak_bytes;
    bt_msg_t *bye = crashed ? NULL : bt_msg_new(BT_MSG_BYE); /* a crash says nothing */
    if (bye && !ok && c.error[0]) /* the controller can stop waiting for this worker */
        bt_msg_set_str(bye, "error", c.error);
    if (bye)
        bt_proto_send(&bye, dealer, NULL, 0);
    zmq_close(pipe);
    zmq_close(dealer);
    free(c.config_json);
    if (opt->stats)
        *opt->stats = stats;
    return st;
}
