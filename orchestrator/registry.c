/*  registry.c — workers and tasks of the controller; see registry.h for the task life cycle. */
#include "baton/registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S_MAX_WORKERS = 4096 };

typedef struct {
    bt_role role;
    bt_source_state state;
    int32_t worker; /* holder while ASSIGNED */
    int32_t attempts;
    void *user;
    int32_t prefer; /* the worker it waits for while that worker lives; -1: any */
    bool only;      /* prefer is the only worker that may take it */
    int64_t assigned_ms;
} s_task;

struct bt_registry {
    int64_t expiry_ms;
    bt_worker_info *workers;
    int32_t n_workers, cap_workers;
    s_task *tasks;
    int64_t n_tasks, cap_tasks;
    int64_t queue_head; /* no QUEUED task below this index */
    int64_t now_ms;     /* the clock: the latest now_ms a call gave */
    /* per role, over the run: closed busy and live intervals (ms), reported CPU and WEIGHTS time */
    int64_t busy_ms[BT_ROLE_COUNT], live_ms[BT_ROLE_COUNT];
    double cpu_s[BT_ROLE_COUNT], weights_s[BT_ROLE_COUNT];
};

static void s_clock(bt_registry_t *self, int64_t now_ms) {
    self->now_ms = now_ms > self->now_ms ? now_ms : self->now_ms;
}

/*  Moves a worker to state, closing and opening its busy and live intervals at the clock. */
static void s_set_state(bt_registry_t *self, bt_worker_info *w, bt_worker_state to) {
    int64_t now = self->now_ms;
    int r = (int)w->role;
    if (w->state == BT_WORKER_BUSY && to != BT_WORKER_BUSY)
        self->busy_ms[r] += now - w->busy_since_ms;
    if (w->state != BT_WORKER_BUSY && to == BT_WORKER_BUSY)
        w->busy_since_ms = now;
    if (w->state != BT_WORKER_LOST && to == BT_WORKER_LOST)
        self->live_ms[r] += now - w->live_since_ms;
    if (w->state == BT_WORKER_LOST && to != BT_WORKER_LOST)
        w->live_since_ms = now;
    w->state = to;
}

bt_registry_t *bt_registry_new(int64_t expiry_ms) {
    bt_registry_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "registry: out of memory");
        return NULL;
    }
    self->expiry_ms = expiry_ms;
    return self;
}

void bt_registry_destroy(bt_registry_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free((*self_p)->workers);
    free((*self_p)->tasks);
    free(*self_p);
    *self_p = NULL;
}

/*  Grows *array (of *cap elements of size) to hold at least need elements. */
static bool s_reserve(void **array, int64_t *cap, int64_t need, size_t size) {
    if (need <= *cap)
        return true;
    int64_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*array, (size_t)n * size);
    if (!p)
        return false;
    *array = p;
    *cap = n;
    return true;
}

/*  A lost entry holding no task, the one silent longest: reused when the table is full (one
    flaky worker reconnecting through a long run must not lock every worker out). */
static bt_worker_info *s_reclaim(bt_registry_t *self) {
    bt_worker_info *best = NULL;
    for (int32_t i = 0; i < self->n_workers; i++) {
        bt_worker_info *w = &self->workers[i];
        if (w->state == BT_WORKER_LOST && w->task < 0 &&
            (!best || w->last_seen_ms < best->last_seen_ms))
            best = w;
    }
    return best;
}

int32_t bt_registry_join(bt_registry_t *self, bt_role role, const char *name, const uint8_t *peer,
                         size_t peer_len, int64_t now_ms) {
    if (peer_len > BT_PEER_MAX) {
        bt_fail(BT_ERANGE, "registry: peer id of %zu bytes", peer_len);
        return -1;
    }
    s_clock(self, now_ms);
    bt_worker_info *w = NULL;
    for (int32_t i = 0; i < self->n_workers; i++) {
        bt_worker_info *o = &self->workers[i];
        bool same_peer = o->peer_len == peer_len && !memcmp(o->peer, peer, peer_len);
        if (same_peer && !w)
            w = o;
        else if (!same_peer && o->state != BT_WORKER_LOST && name && !strcmp(o->name, name)) {
            bt_fail(BT_EINVAL,
                    "a worker named \"%s\" is already in the run: give each worker its own "
                    "--name",
                    name);
            return -1;
        }
    }
    if (w) {
        bt_registry_remove(self, w->id); /* a second HELLO: whatever it held is re-queued */
    } else {
        int64_t cap = self->cap_workers;
        if (self->n_workers < S_MAX_WORKERS &&
            s_reserve((void **)&self->workers, &cap, self->n_workers + 1, sizeof *w)) {
            self->cap_workers = (int32_t)cap;
            w = &self->workers[self->n_workers];
            memset(w, 0, sizeof *w);
            w->id = self->n_workers++;
            w->state = BT_WORKER_LOST; /* until it is live, below */
            bt_usage_init(&w->usage);
        } else if ((w = s_reclaim(self)) != NULL) {
            int32_t id = w->id;
            int64_t incarnation = w->incarnation + 1;
            memset(w, 0, sizeof *w);
            w->id = id;
            w->incarnation = incarnation;
            w->state = BT_WORKER_LOST;
            bt_usage_init(&w->usage);
        } else {
            bt_fail(BT_ERANGE, "registry: no room for another worker (%d live)", S_MAX_WORKERS);
            return -1;
        }
        memcpy(w->peer, peer, peer_len);
        w->peer_len = peer_len;
    }
    w->role = role; /* LOST here: its intervals closed under its old role */
    snprintf(w->name, sizeof w->name, "%s", name ? name : "");
    s_set_state(self, w, BT_WORKER_IDLE);
    w->quarantined = false;
    w->last_seen_ms = now_ms;
    w->task = -1;
    return w->id;
}

bt_worker_info *bt_registry_find_peer(bt_registry_t *self, const uint8_t *peer, size_t peer_len) {
    for (int32_t i = 0; i < self->n_workers; i++) {
        bt_worker_info *w = &self->workers[i];
        if (w->state != BT_WORKER_LOST && w->peer_len == peer_len &&
            !memcmp(w->peer, peer, peer_len))
            return w;
    }
    return NULL;
}

bt_worker_info *bt_registry_worker(bt_registry_t *self, int32_t id) {
    return (id >= 0 && id < self->n_workers) ? &self->workers[id] : NULL;
}

int32_t bt_registry_worker_count(const bt_registry_t *self) {
    return self->n_workers;
}

int32_t bt_registry_live(const bt_registry_t *self, bt_role role) {
    int32_t n = 0;
    for (int32_t i = 0; i < self->n_workers; i++)
        n += self->workers[i].role == role && self->workers[i].state != BT_WORKER_LOST &&
             !self->workers[i].quarantined;
    return n;
}

void bt_registry_touch(bt_registry_t *self, int32_t worker, int64_t now_ms) {
    s_clock(self, now_ms);
    bt_worker_info *w = bt_registry_worker(self, worker);
    if (w)
        w->last_seen_ms = now_ms;
}

void bt_registry_touch_all(bt_registry_t *self, int64_t now_ms) {
    s_clock(self, now_ms);
    for (int32_t i = 0; i < self->n_workers; i++)
        if (self->workers[i].state != BT_WORKER_LOST)
            self->workers[i].last_seen_ms = now_ms;
}

static void s_requeue(bt_registry_t *self, int64_t task) {
    s_task *t = &self->tasks[task];
    if (t->state == BT_TASK_CANCELLED) {
        t->worker = -1;
        return;
    }
    t->state = BT_TASK_QUEUED;
    t->worker = -1;
    if (task < self->queue_head)
        self->queue_head = task;
}

/*  Takes back what a live worker holds (re-queued) and puts it in state; *out the worker. */
static bt_worker_info *s_take_back(bt_registry_t *self, int32_t worker, bt_worker_state state) {
    bt_worker_info *w = bt_registry_worker(self, worker);
    if (!w || w->state == BT_WORKER_LOST)
        return NULL;
    if (w->task >= 0)
        s_requeue(self, w->task);
    w->task = -1;
    s_set_state(self, w, state);
    return w;
}

void bt_registry_remove(bt_registry_t *self, int32_t worker) {
    s_take_back(self, worker, BT_WORKER_LOST);
}

void bt_registry_quarantine(bt_registry_t *self, int32_t worker) {
    bt_worker_info *w = s_take_back(self, worker, BT_WORKER_IDLE);
    if (w)
        w->quarantined = true;
}

int bt_registry_expire(bt_registry_t *self, int64_t now_ms) {
    s_clock(self, now_ms);
    int lost = 0;
    for (int32_t i = 0; i < self->n_workers; i++) {
        bt_worker_info *w = &self->workers[i];
        if (w->state != BT_WORKER_LOST && now_ms - w->last_seen_ms > self->expiry_ms) {
            bt_registry_remove(self, w->id);
            lost++;
        }
    }
    return lost;
}

static int64_t s_add(bt_registry_t *self, bt_role role, int32_t worker, bool only, void *user) {
    if (!s_reserve((void **)&self->tasks, &self->cap_tasks, self->n_tasks + 1, sizeof(s_task))) {
        bt_fail(BT_ENOMEM, "registry: out of memory for tasks");
        return -1;
    }
    self->tasks[self->n_tasks] = (s_task){role, BT_TASK_QUEUED, -1, 0, user, worker, only, 0};
    return self->n_tasks++;
}

int64_t bt_registry_add_task(bt_registry_t *self, bt_role role, void *user) {
    return s_add(self, role, -1, false, user);
}

int64_t bt_registry_add_task_for(bt_registry_t *self, bt_role role, int32_t worker, void *user) {
    return s_add(self, role, worker, false, user);
}

int64_t bt_registry_add_task_only(bt_registry_t *self, bt_role role, int32_t worker, void *user) {
    return s_add(self, role, worker, true, user);
}

void bt_registry_cancel(bt_registry_t *self, int64_t task) {
    if (task >= 0 && task < self->n_tasks && self->tasks[task].state != BT_TASK_DONE)
        self->tasks[task].state = BT_TASK_CANCELLED;
}

void bt_registry_cancel_pending(bt_registry_t *self) {
    for (int64_t t = 0; t < self->n_tasks; t++)
        bt_registry_cancel(self, t);
}

int64_t bt_registry_queued(const bt_registry_t *self, bt_role role) {
    int64_t n = 0;
    for (int64_t t = self->queue_head; t < self->n_tasks; t++)
        n += self->tasks[t].state == BT_TASK_QUEUED && self->tasks[t].role == role;
    return n;
}

static const s_task *s_task_at(const bt_registry_t *self, int64_t task) {
    BT_ASSERT(task >= 0 && task < self->n_tasks);
    return &self->tasks[task];
}

bt_source_state bt_registry_task_state(const bt_registry_t *self, int64_t task) {
    return s_task_at(self, task)->state;
}

void *bt_registry_task_user(const bt_registry_t *self, int64_t task) {
    return s_task_at(self, task)->user;
}

int32_t bt_registry_task_attempts(const bt_registry_t *self, int64_t task) {
    return s_task_at(self, task)->attempts;
}

int64_t bt_registry_task_assigned_ms(const bt_registry_t *self, int64_t task) {
    return s_task_at(self, task)->assigned_ms;
}

int32_t bt_registry_task_worker(const bt_registry_t *self, int64_t task) {
    return s_task_at(self, task)->worker;
}

bool bt_registry_next_assignment(bt_registry_t *self, int64_t now_ms, int64_t *task,
                                 int32_t *worker) {
    s_clock(self, now_ms);
    while (self->queue_head < self->n_tasks &&
           self->tasks[self->queue_head].state != BT_TASK_QUEUED)
        self->queue_head++;
    for (int64_t t = self->queue_head; t < self->n_tasks; t++) {
        s_task *q = &self->tasks[t];
        if (q->state != BT_TASK_QUEUED)
            continue;
        const bt_worker_info *p = bt_registry_worker(self, q->prefer);
        bool waits =
            p && (q->only || (p->state != BT_WORKER_LOST && !p->quarantined && p->role == q->role));
        for (int32_t i = 0; i < self->n_workers; i++) {
            bt_worker_info *w = &self->workers[i];
            if (w->state != BT_WORKER_IDLE || w->quarantined || w->role != q->role ||
                (waits && w->id != p->id))
                continue;
            q->state = BT_TASK_ASSIGNED;
            q->worker = w->id;
            q->assigned_ms = now_ms;
            q->attempts++;
            s_set_state(self, w, BT_WORKER_BUSY);
            w->task = t;
            *task = t;
            *worker = w->id;
            return true;
        }
    }
    return false;
}

/*  True when worker holds task; then releases the worker.  A cancelled task releases its worker
    too, but its result is refused (false). */
static bool s_release(bt_registry_t *self, int64_t task, int32_t worker) {
    bt_worker_info *w = bt_registry_worker(self, worker);
    if (task < 0 || task >= self->n_tasks || !w || w->state != BT_WORKER_BUSY || w->task != task)
        return false;
    s_task *t = &self->tasks[task];
    bool cancelled = t->state == BT_TASK_CANCELLED;
    if (t->worker != worker || (t->state != BT_TASK_ASSIGNED && !cancelled))
        return false;
    s_set_state(self, w, BT_WORKER_IDLE);
    w->task = -1;
    t->worker = -1;
    return !cancelled;
}

bool bt_registry_complete(bt_registry_t *self, int64_t task, int32_t worker) {
    if (!s_release(self, task, worker))
        return false;
    self->tasks[task].state = BT_TASK_DONE;
    self->tasks[task].worker = -1;
    self->workers[worker].done++;
    return true;
}

bool bt_registry_fail(bt_registry_t *self, int64_t task, int32_t worker) {
    if (!s_release(self, task, worker))
        return false;
    s_requeue(self, task);
    return true;
}

int64_t bt_registry_pending(const bt_registry_t *self) {
    int64_t n = 0;
    for (int64_t t = 0; t < self->n_tasks; t++)
        n += self->tasks[t].state != BT_TASK_DONE && self->tasks[t].state != BT_TASK_CANCELLED;
    return n;
}

/*  What a running total grew by since last: all of now when it fell (a new process). */
static double s_growth(double now, double last) {
    if (!isfinite(now))
        return 0;
    return isfinite(last) && now >= last ? now - last : now;
}

void bt_registry_report(bt_registry_t *self, int32_t worker, const bt_usage *u) {
    bt_worker_info *w = bt_registry_worker(self, worker);
    if (!w)
        return;
    self->cpu_s[w->role] += s_growth(u->cpu_s, w->usage.cpu_s);
    self->weights_s[w->role] += s_growth(u->weights_s, w->usage.weights_s);
    const double from[] = {u->cpu_s, u->weights_s, u->peak_rss_mb, u->cuda_allocated_mb,
                           u->cuda_reserved_mb};
    double *to[] = {&w->usage.cpu_s, &w->usage.weights_s, &w->usage.peak_rss_mb,
                    &w->usage.cuda_allocated_mb, &w->usage.cuda_reserved_mb};
    for (size_t i = 0; i < sizeof from / sizeof *from; i++)
        if (isfinite(from[i]))
            *to[i] = from[i];
}

void bt_registry_usage_of(const bt_registry_t *self, bt_role role, bt_registry_usage *out) {
    int r = (int)role;
    int64_t busy = self->busy_ms[r], live = self->live_ms[r];
    *out = (bt_registry_usage){.cpu_s = self->cpu_s[r],
                               .weights_s = self->weights_s[r],
                               .peak_rss_mb = NAN,
                               .cuda_allocated_mb = NAN,
                               .cuda_reserved_mb = NAN};
    for (int32_t i = 0; i < self->n_workers; i++) {
        const bt_worker_info *w = &self->workers[i];
        if (w->role != role || w->state == BT_WORKER_LOST)
            continue;
        out->live++;
        live += self->now_ms - w->live_since_ms;
        busy += w->state == BT_WORKER_BUSY ? self->now_ms - w->busy_since_ms : 0;
        /* fmax skips a NaN: NaN only when no worker reported the figure */
        out->peak_rss_mb = fmax(out->peak_rss_mb, w->usage.peak_rss_mb);
        out->cuda_allocated_mb = fmax(out->cuda_allocated_mb, w->usage.cuda_allocated_mb);
        out->cuda_reserved_mb = fmax(out->cuda_reserved_mb, w->usage.cuda_reserved_mb);
    }
    out->busy_ms = busy;
    out->live_ms = live;
}
