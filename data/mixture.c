/*  mixture.c — source draws, per-source positions and curriculum streaks; see mixture.h.  cJSON
    stays in this file. */
#include "baton/mixture.h"
#include "baton/rng.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t key; /* BT_PROMPT_ID(source, record) + 1; 0: empty */
    uint16_t solved, failed;
} s_slot;

struct bt_mixture {
    bt_mixture_config cfg;
    bt_mixture_position pos;
    s_slot *slots; /* open addressing, a power of two */
    size_t cap, n;
    int64_t dropped;
};

bt_mixture_t *bt_mixture_new(const bt_mixture_config *cfg) {
    BT_ASSERT(cfg->n_sources >= 1 && cfg->n_sources <= BT_MIXTURE_MAX_SOURCES);
    bt_mixture_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "mixture: out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    return self;
}

void bt_mixture_destroy(bt_mixture_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free((*self_p)->slots);
    free(*self_p);
    *self_p = NULL;
}

/*  The slot of key, or the empty slot where it would go. */
static s_slot *s_find(const bt_mixture_t *self, uint64_t key) {
    size_t mask = self->cap - 1;
    for (size_t h = bt_rng_finalize(key) & mask;; h = (h + 1) & mask)
        if (self->slots[h].key == key || self->slots[h].key == 0)
            return &self->slots[h];
}

static bool s_grow(bt_mixture_t *self) {
    if (self->cap && 2 * (self->n + 1) <= self->cap)
        return true;
    size_t cap = self->cap ? 2 * self->cap : 1024;
    s_slot *old = self->slots;
    size_t old_cap = self->cap;
    self->slots = calloc(cap, sizeof *self->slots);
    if (!self->slots) {
        self->slots = old;
        return false;
    }
    self->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key)
            *s_find(self, old[i].key) = old[i];
    free(old);
    return true;
}

static bool s_drops(const bt_mixture_t *self, const s_slot *slot) {
    int64_t w = self->cfg.window;
    return slot->key && w > 0 &&
           ((self->cfg.skip_solved && slot->solved >= w) ||
            (self->cfg.skip_failed && slot->failed >= w));
}

static int s_pick(const bt_mixture_t *self, const double *weights) {
    int n = self->cfg.n_sources;
    if (n == 1)
        return 0;
    double total = 0;
    for (int s = 0; s < n; s++)
        total += weights[s];
    uint64_t r = bt_rng_finalize(
        bt_rng_finalize(self->cfg.seed * 0x9E3779B97F4A7C15ull + 0x5bd1e995u) + self->pos.draws);
    double u = bt_rng_unit(r) * total;
    for (int s = 0; s < n - 1; s++) {
        if (u < weights[s])
            return s;
        u -= weights[s];
    }
    return n - 1;
}

bt_status bt_mixture_next(bt_mixture_t *self, bt_source_t *const *sources, const double *weights,
                          int64_t max_draws, uint64_t *id, uint64_t *dropped, int64_t cap_dropped,
                          int64_t *n_dropped) {
    for (int64_t tries = 0; tries < max_draws; tries++) {
        int s = s_pick(self, weights);
        self->pos.draws++;
        uint64_t index = self->pos.drawn[s]++;
        *id = BT_PROMPT_ID(s, index);
        if (self->cfg.window > 0 && self->n > 0) {
            uint64_t key = BT_PROMPT_ID(s, bt_source_record(sources[s], index)) + 1;
            if (s_drops(self, s_find(self, key))) {
                if (*n_dropped < cap_dropped)
                    dropped[*n_dropped] = *id;
                (*n_dropped)++;
                self->dropped++;
                continue;
            }
        }
        return BT_OK;
    }
    return bt_fail(BT_ERANGE,
                   "data: %lld draws in a row were all dropped by data.curriculum: every prompt "
                   "left is always solved or always failed",
                   (long long)max_draws);
}

void bt_mixture_observe(bt_mixture_t *self, bt_source_t *const *sources, uint64_t id,
                        int64_t correct, int64_t group_size) {
    if (self->cfg.window <= 0)
        return;
    int s = BT_PROMPT_SOURCE(id);
    BT_ASSERT(s < self->cfg.n_sources);
    uint64_t key = BT_PROMPT_ID(s, bt_source_record(sources[s], BT_PROMPT_INDEX(id))) + 1;
    bool all = correct == group_size, none = correct == 0;
    s_slot *slot = self->cap ? s_find(self, key) : NULL;
    if (!all && !none && (!slot || !slot->key))
        return; /* mixed results: nothing to remember */
    if (!slot || !slot->key) {
        if (!s_grow(self))
            return; /* out of memory: the curriculum forgets, training goes on */
        slot = s_find(self, key);
        slot->key = key;
        self->n++;
    }
    slot->solved =
        all ? (uint16_t)(slot->solved < UINT16_MAX ? slot->solved + 1 : slot->solved) : 0;
    slot->failed =
        none ? (uint16_t)(slot->failed < UINT16_MAX ? slot->failed + 1 : slot->failed) : 0;
}

bt_mixture_position bt_mixture_get_position(const bt_mixture_t *self) {
    return self->pos;
}

void bt_mixture_set_position(bt_mixture_t *self, const bt_mixture_position *pos) {
    self->pos = *pos;
}

int64_t bt_mixture_dropped(const bt_mixture_t *self) {
    return self->dropped;
}

int64_t bt_mixture_dropping(const bt_mixture_t *self) {
    int64_t n = 0;
    for (size_t i = 0; i < self->cap; i++)
        n += s_drops(self, &self->slots[i]);
    return n;
}

char *bt_mixture_to_json(const bt_mixture_t *self, const bt_mixture_position *pos) {
    cJSON *root = cJSON_CreateObject();
    char num[32];
    snprintf(num, sizeof num, "%llu", (unsigned long long)pos->draws);
    bool ok = root && cJSON_AddItemToObject(root, "draws", cJSON_CreateRaw(num));
    cJSON *drawn = ok ? cJSON_AddArrayToObject(root, "drawn") : NULL;
    for (int s = 0; drawn && ok && s < self->cfg.n_sources; s++) {
        snprintf(num, sizeof num, "%llu", (unsigned long long)pos->drawn[s]);
        ok = cJSON_AddItemToArray(drawn, cJSON_CreateRaw(num));
    }
    snprintf(num, sizeof num, "%lld", (long long)self->dropped);
    ok = ok && drawn && cJSON_AddItemToObject(root, "dropped", cJSON_CreateRaw(num));
    cJSON *streaks = ok ? cJSON_AddArrayToObject(root, "curriculum") : NULL;
    for (size_t i = 0; streaks && ok && i < self->cap; i++) {
        const s_slot *slot = &self->slots[i];
        if (!slot->key)
            continue;
        char row[96]; /* [prompt id of the record, solved streak, failed streak] */
        snprintf(row, sizeof row, "[%llu,%u,%u]", (unsigned long long)(slot->key - 1),
                 (unsigned)slot->solved, (unsigned)slot->failed);
        ok = cJSON_AddItemToArray(streaks, cJSON_CreateRaw(row));
    }
    char *text = ok && streaks ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

static bool s_is_count(const cJSON *v, double max) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= max &&
           v->valuedouble == floor(v->valuedouble);
}

bt_status bt_mixture_from_json(bt_mixture_t *self, const char *text, const char *source,
                               bt_mixture_position *pos) {
    cJSON *root = cJSON_Parse(text);
    const cJSON *draws = cJSON_GetObjectItemCaseSensitive(root, "draws");
    const cJSON *drawn = cJSON_GetObjectItemCaseSensitive(root, "drawn");
    const cJSON *dropped = cJSON_GetObjectItemCaseSensitive(root, "dropped");
    const cJSON *streaks = cJSON_GetObjectItemCaseSensitive(root, "curriculum");
    const double max = 9007199254740992.0; /* 2^53 */
    bt_status st = BT_OK;
    if (!cJSON_IsObject(root))
        st = bt_fail(BT_EFORMAT, "%s: not a JSON object", source);
    else if (!s_is_count(draws, max) || !s_is_count(dropped, max))
        st = bt_fail(BT_EFORMAT, "%s: draws or dropped: missing or not a count", source);
    else if (!cJSON_IsArray(drawn) || cJSON_GetArraySize(drawn) != self->cfg.n_sources)
        st = bt_fail(BT_EFORMAT, "%s: drawn: expected %d counts (the config's data sources)",
                     source, self->cfg.n_sources);
    else if (!cJSON_IsArray(streaks))
        st = bt_fail(BT_EFORMAT, "%s: curriculum: expected an array", source);
    bt_mixture_position p = {0};
    int s = 0;
    const cJSON *v;
    const cJSON *counts = st == BT_OK ? drawn : NULL, *rows = NULL;
    cJSON_ArrayForEach(v, counts) {
        if (!s_is_count(v, max)) {
            st = bt_fail(BT_EFORMAT, "%s: drawn[%d]: not a count", source, s);
            break;
        }
        p.drawn[s++] = (uint64_t)v->valuedouble;
    }
    if (st == BT_OK) {
        free(self->slots);
        self->slots = NULL;
        self->cap = self->n = 0;
    }
    int i = 0;
    rows = st == BT_OK ? streaks : NULL;
    cJSON_ArrayForEach(v, rows) {
        const cJSON *k = cJSON_GetArrayItem(v, 0), *a = cJSON_GetArrayItem(v, 1),
                    *b = cJSON_GetArrayItem(v, 2);
        if (cJSON_GetArraySize(v) != 3 || !s_is_count(k, max) || !s_is_count(a, UINT16_MAX) ||
            !s_is_count(b, UINT16_MAX) ||
            BT_PROMPT_SOURCE((uint64_t)k->valuedouble) >= self->cfg.n_sources) {
            st = bt_fail(BT_EFORMAT, "%s: curriculum[%d]: expected [prompt id, solved, failed]",
                         source, i);
            break;
        }
        if (!s_grow(self)) {
            st = bt_fail(BT_ENOMEM, "%s: out of memory", source);
            break;
        }
        s_slot *slot = s_find(self, (uint64_t)k->valuedouble + 1);
        if (!slot->key)
            self->n++;
        *slot = (s_slot){(uint64_t)k->valuedouble + 1, (uint16_t)a->valuedouble,
                         (uint16_t)b->valuedouble};
        i++;
    }
    if (st == BT_OK) {
        p.draws = (uint64_t)draws->valuedouble;
        self->dropped = (int64_t)dropped->valuedouble;
        self->pos = p;
        *pos = p;
    }
    cJSON_Delete(root);
    return st;
}
