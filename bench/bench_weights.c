/*  bench_weights.c — a weight update as the controller forwards it to a rollout worker, against
    memcpy of the same bytes, for a float32 run and a bf16 one.  The trainer's WEIGHTS message is
    built as the trainer builds it (bt_weights_export, then bt_weights_to_msg: zero-copy) from a
    Llama-shaped model of BATON_BENCH_MB float32 MiB (hidden 512, vocab 4096, untied, as many
    layers as fit), at precision float32 and bf16 (whose matrix-product weights travel as
    bfloat16); the controller makes the worker's copy as s_weights_copy does (tensors shared, not
    copied) and sends it with bt_msg_send() on its ROUTER, over ZeroMQ TCP loopback, to a DEALER
    on another thread that takes it with bt_msg_recv() and answers PING.
    Each side has its own ZeroMQ context, hence its own I/O thread, as two processes would.
    Transfer time = copy + send + receive + decode, up to the PING; best of S_SENDS after a
    warm-up, as is memcpy's.  export_s: bt_weights_export + bt_weights_to_msg (the bf16 cast
    included), best of 3.  Target: ratio = tcp / memcpy >= 0.25.  Prints one JSON line per
    precision; rates in GB/s (10^9 bytes per second).  Environment: BATON_BENCH_MB (default
    100, in MiB).  Then the bytes one sync sends with and without LoRA (model.lora): the WEIGHTS
    message bt_weights_export + bt_weights_to_msg build for a model of S_SYNC_* shape, full and
    with adapters of each rank of s_ranks on every target, one JSON line each. */
#define _POSIX_C_SOURCE 200809L
#include "baton/blas.h"
#include "baton/messages.h"
#include "baton/model.h"
#include "baton/msg.h"
#include "baton/rollout.h"
#include "baton/status.h"
#include "baton/tensor.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define S_SENDS 5

typedef struct s_receiver {
    char endpoint[256];
    size_t bytes; /* expected in every WEIGHTS */
    bt_status status;
} s_receiver;

/*  The worker: says PING, then for each WEIGHTS checks its size and answers PING. */
static void *s_receive(void *arg) {
    s_receiver *r = arg;
    void *ctx = zmq_ctx_new();
    void *dealer = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "worker", 6);
    bt_msg_t *ping = bt_msg_new(BT_MSG_PING);
    r->status = zmq_connect(dealer, r->endpoint) == 0 ? bt_msg_send(&ping, dealer, NULL, 0)
                                                      : bt_fail(BT_EIO, "cannot connect");
    bt_msg_destroy(&ping);
    for (int i = 0; i < S_SENDS + 1 && r->status == BT_OK; i++) {
        bt_msg_t *m = NULL;
        r->status = bt_msg_recv(dealer, &m, NULL, NULL, 0);
        size_t got = 0;
        for (int t = 0; m && t < bt_msg_tensor_count(m); t++)
            got += bt_msg_tensor_at(m, t).nbytes;
        if (r->status == BT_OK && (!m || bt_msg_type_of(m) != BT_MSG_WEIGHTS || got != r->bytes))
            r->status = bt_fail(BT_EFORMAT, "receiver: expected WEIGHTS of %zu bytes", r->bytes);
        ping = bt_msg_new(BT_MSG_PING);
        if (r->status == BT_OK)
            r->status = bt_msg_send(&ping, dealer, NULL, 0);
        bt_msg_destroy(&ping);
        bt_msg_destroy(&m);
    }
    zmq_close(dealer);
    zmq_ctx_term(ctx);
    return NULL;
}

/*  Bytes of a message's tensor frames. */
static size_t s_frame_bytes(const bt_msg_t *m) {
    size_t n = 0;
    for (int i = 0; i < bt_msg_tensor_count(m); i++)
        n += bt_msg_tensor_at(m, i).nbytes;
    return n;
}

/*  The trainer's WEIGHTS of model at precision, and the seconds it took to build. */
static bt_msg_t *s_weights(bt_model *model, bt_dtype precision, double *seconds) {
    bt_weights w;
    bt_weights_init(&w);
    double t0 = bt_now();
    bt_msg_t *m = bt_msg_new(BT_MSG_WEIGHTS);
    bt_status st = m ? bt_model_set_precision(model, precision) : BT_ENOMEM;
    if (st == BT_OK)
        st = bt_weights_export(model, 1, &w);
    if (st == BT_OK)
        st = bt_weights_to_msg(&w, m);
    *seconds = bt_now() - t0;
    bt_weights_release(&w);
    if (st != BT_OK)
        bt_msg_destroy(&m);
    return m;
}

/*  What the controller's s_weights_copy does for each recipient. */
static bt_msg_t *s_copy(const bt_msg_t *src) {
    bt_msg_t *m = bt_msg_new(BT_MSG_WEIGHTS);
    bt_status st = m ? bt_msg_set_int(m, "version", 1) : BT_ENOMEM;
    for (int i = 0; st == BT_OK && i < bt_msg_tensor_count(src); i++)
        st = bt_msg_add_tensor_shared(m, src, i);
    if (st != BT_OK)
        bt_msg_destroy(&m);
    return m;
}

/*  The sync model: a small Llama (32000 ids, 4 layers of width 256), built on the CPU. */
#define S_SYNC_VOCAB 32000
#define S_SYNC_HIDDEN 256
#define S_SYNC_LAYERS 4

/*  Bytes of the tensors of the WEIGHTS message a trainer publishes for m. */
static bt_status s_sync_bytes(const bt_model *m, size_t *bytes) {
    bt_weights w;
    bt_weights_init(&w);
    bt_msg_t *msg = bt_msg_new(BT_MSG_WEIGHTS);
    bt_status st = msg ? bt_weights_export(m, 1, &w) : BT_ENOMEM;
    if (st == BT_OK)
        st = bt_weights_to_msg(&w, msg);
    *bytes = 0;
    for (int t = 0; st == BT_OK && t < bt_msg_tensor_count(msg); t++)
        *bytes += bt_msg_tensor_at(msg, t).nbytes;
    bt_weights_release(&w);
    bt_msg_destroy(&msg);
    return st;
}

/*  One line per rank: bytes per sync with LoRA on every target against the full weights. */
static bt_status s_bench_lora_sync(void) {
    static const int64_t s_ranks[] = {8, 16, 64};
    bt_model_config c;
    bt_model_config_init(&c);
    c.vocab_size = S_SYNC_VOCAB;
    c.hidden_size = S_SYNC_HIDDEN;
    c.intermediate_size = S_SYNC_HIDDEN * 11 / 4;
    c.num_hidden_layers = S_SYNC_LAYERS;
    size_t full = 0;
    bt_model *m = bt_model_new(&c, bt_cpu(), 1);
    bt_status st = m ? s_sync_bytes(m, &full) : BT_ENOMEM;
    bt_model_destroy(&m);
    for (size_t i = 0; i < sizeof s_ranks / sizeof s_ranks[0] && st == BT_OK; i++) {
        bt_lora_config l;
        bt_lora_config_init(&l);
        l.rank = s_ranks[i];
        size_t lora = 0;
        m = bt_model_new(&c, bt_cpu(), 1);
        st = m ? bt_model_add_lora(m, &l, 1) : BT_ENOMEM;
        if (st == BT_OK)
            st = s_sync_bytes(m, &lora);
        bt_model_destroy(&m);
        if (st == BT_OK)
            printf("{\"bench\":\"weights_lora\",\"vocab\":%d,\"hidden\":%d,\"layers\":%d,"
                   "\"rank\":%lld,\"targets\":7,\"full_bytes\":%zu,\"lora_bytes\":%zu,"
                   "\"fraction\":%.5f}\n",
                   S_SYNC_VOCAB, S_SYNC_HIDDEN, S_SYNC_LAYERS, (long long)l.rank, full, lora,
                   (double)lora / (double)full);
    }
    return st;
}

/*  Best seconds of S_SENDS memcpy of bytes between two buffers already faulted in. */
static double s_memcpy_best(size_t bytes) {
    char *a = malloc(bytes), *b = malloc(bytes);
    double best = 1e30;
    if (!a || !b) {
        free(a);
        free(b);
        return best;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    for (int i = 0; i < S_SENDS + 1; i++) {
        double t0 = bt_now();
        memcpy(b, a, bytes);
        double t = bt_now() - t0;
        best = i && t < best ? t : best;
        a[i] = b[bytes - 1 - (size_t)i]; /* keeps each copy needed */
    }
    free(a);
    free(b);
    return best;
}

/*  Best seconds of S_SENDS transfers of stored to a receiver thread over TCP loopback. */
static bt_status s_transfer_best(const bt_msg_t *stored, double *best) {
    s_receiver r = {.bytes = s_frame_bytes(stored), .status = BT_OK};
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    int linger = 0;
    size_t len = sizeof r.endpoint;
    zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(router, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, r.endpoint, &len) != 0) {
        zmq_close(router);
        zmq_ctx_term(ctx);
        return bt_fail(BT_EIO, "cannot bind: %s", zmq_strerror(zmq_errno()));
    }
    pthread_t thread;
    pthread_create(&thread, NULL, s_receive, &r);
    uint8_t peer[BT_WIRE_PEER_MAX];
    size_t peer_len = 0;
    bt_msg_t *ack = NULL;
    bt_status st = bt_msg_recv(router, &ack, peer, &peer_len, 0);
    *best = 1e30;
    for (int i = 0; i < S_SENDS + 1 && st == BT_OK; i++) { /* send 0 is the warm-up */
        bt_msg_destroy(&ack);
        double t0 = bt_now();
        bt_msg_t *copy = s_copy(stored);
        st = copy ? bt_msg_send(&copy, router, peer, peer_len) : BT_ENOMEM;
        if (st == BT_OK)
            st = bt_msg_recv(router, &ack, peer, &peer_len, 0);
        double t = bt_now() - t0;
        *best = i && t < *best ? t : *best;
    }
    bt_msg_destroy(&ack);
    pthread_join(thread, NULL);
    zmq_close(router);
    zmq_ctx_term(ctx);
    if (st == BT_OK && r.status != BT_OK)
        st = bt_fail(r.status, "receiver failed");
    return st;
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    size_t mib = getenv("BATON_BENCH_MB") ? (size_t)atol(getenv("BATON_BENCH_MB")) : 100;
    /* As main() of every baton process begins; it also links the ATen shim, whose allocator
       policy (freed memory stays in the heap) is then this process's too. */
    if (bt_threads_from_env() != BT_OK) {
        fprintf(stderr, "bench_weights: %s\n", bt_last_error());
        return 1;
    }
    bt_model_config cfg;
    bt_model_config_init(&cfg);
    cfg.vocab_size = 4096;
    cfg.hidden_size = 512;
    cfg.intermediate_size = 1408;
    cfg.num_attention_heads = 8;
    cfg.num_key_value_heads = 8;
    int64_t C = cfg.hidden_size, per_layer = 4 * C * C + 3 * C * cfg.intermediate_size + 2 * C;
    int64_t params = (int64_t)(mib << 20) / 4 - 2 * cfg.vocab_size * C - C;
    cfg.num_hidden_layers = params / per_layer > 1 ? params / per_layer : 1;
    bt_model *model = bt_model_new(&cfg, bt_cpu(), 1);
    if (!model) {
        fprintf(stderr, "bench_weights: %s\n", bt_last_error());
        return 1;
    }
    const bt_dtype precisions[2] = {BT_F32, BT_BF16};
    size_t f32_bytes = 0;
    for (int k = 0; k < 2; k++) {
        double export_s = 1e30, best = 0, t = 0;
        bt_msg_t *stored = NULL;
        for (int i = 0; i < 3; i++) { /* best of 3: the first also faults its pages in */
            bt_msg_destroy(&stored);
            stored = s_weights(model, precisions[k], &t);
            export_s = t < export_s ? t : export_s;
        }
        bt_status st = stored ? s_transfer_best(stored, &best) : BT_ENOMEM;
        size_t bytes = stored ? s_frame_bytes(stored) : 0;
        int tensors = stored ? bt_msg_tensor_count(stored) : 0;
        bt_msg_destroy(&stored);
        if (st != BT_OK) {
            fprintf(stderr, "bench_weights: %s\n", bt_last_error());
            bt_model_destroy(&model);
            return 1;
        }
        f32_bytes = k == 0 ? bytes : f32_bytes;
        double mem = s_memcpy_best(bytes);
        double tcp_gbps = (double)bytes / best / 1e9, mem_gbps = (double)bytes / mem / 1e9;
        printf("{\"bench\":\"weights\",\"precision\":\"%s\",\"params\":%lld,\"layers\":%lld,"
               "\"bytes\":%zu,\"bytes_vs_float32\":%.4f,\"tensors\":%d,\"export_s\":%.4f,"
               "\"tcp_s\":%.4f,\"tcp_gbps\":%.3f,\"memcpy_s\":%.4f,\"memcpy_gbps\":%.3f,"
               "\"ratio\":%.3f}\n",
               k ? "bf16" : "float32", (long long)(f32_bytes / 4), (long long)cfg.num_hidden_layers,
               bytes, (double)bytes / (double)f32_bytes, tensors, export_s, best, tcp_gbps, mem,
               mem_gbps, tcp_gbps / mem_gbps);
    }
    bt_model_destroy(&model);
    if (s_bench_lora_sync() != BT_OK) {
        fprintf(stderr, "bench_weights: %s\n", bt_last_error());
        return 1;
    }
    return 0;
}
