/*  env.c — the environment interface's checks around an implementation (include/baton/env.h). */
#include "baton/env.h"

#include <math.h>
#include <stdlib.h>

struct bt_env {
    bt_env_ops ops;
    void *user;
};

bt_status bt_env_new(const bt_env_ops *ops, void *user, bt_env_t **out) {
    *out = NULL;
    bt_env_t *self = calloc(1, sizeof *self);
    if (!self) {
        if (ops->destroy)
            ops->destroy(user);
        return bt_fail(BT_ENOMEM, "environment: out of memory");
    }
    self->ops = *ops;
    self->user = user;
    *out = self;
    return BT_OK;
}

void bt_env_destroy(bt_env_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_env_t *self = *self_p;
    if (self->ops.destroy)
        self->ops.destroy(self->user);
    free(self);
    *self_p = NULL;
}

/*  Every reply of a call within what env.h promises. */
static bt_status s_check(const uint64_t *episodes, size_t stride, int64_t n,
                         const bt_env_reply *out) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t e = *(const uint64_t *)((const char *)episodes + (size_t)i * stride);
        bool missing = !out[i].observation && out[i].observation_len;
        if (out[i].observation_len > BT_ENV_OBSERVATION_MAX || missing)
            return bt_fail(BT_EFORMAT,
                           "environment: episode %llu: an observation of %zu bytes (at most %d)",
                           (unsigned long long)e, out[i].observation_len, BT_ENV_OBSERVATION_MAX);
        if (!isfinite(out[i].reward))
            return bt_fail(BT_EFORMAT, "environment: episode %llu: a reward that is not finite",
                           (unsigned long long)e);
    }
    return BT_OK;
}

bt_status bt_env_reset(bt_env_t *self, const bt_env_reset_item *items, int64_t n,
                       bt_env_reply *out) {
    if (n <= 0)
        return BT_OK;
    BT_TRY(self->ops.reset(self->user, items, n, out));
    return s_check(&items[0].episode, sizeof *items, n, out);
}

bt_status bt_env_step(bt_env_t *self, const bt_env_step_item *items, int64_t n, bt_env_reply *out) {
    if (n <= 0)
        return BT_OK;
    BT_TRY(self->ops.step(self->user, items, n, out));
    return s_check(&items[0].episode, sizeof *items, n, out);
}

const char *bt_env_stop_strings(const bt_env_t *self) {
    return self->ops.stop_strings;
}
