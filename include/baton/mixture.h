/*  mixture.h — where the training prompts come from: draws over the data sources by weight, each
    source's position in its own stream, and the curriculum's memory of which prompts were always
    solved or always failed.  Pure state and decisions, no I/O beyond JSON text.
    Threading: one thread (the controller's).  Lifetime: one per controller, from bt_mixture_new()
    to bt_mixture_destroy().

    A draw: draw number d (0, 1, 2, ... over the run) picks source s with probability
    weight[s] / sum(weight), from splitmix64(seed, d) alone, then takes the next index of s's
    stream (drawn[s]++); the prompt id is BT_PROMPT_ID(s, index) (source.h).  So each source's
    epoch (source.h: a permutation of its records) is used exactly once whatever the weights do, and
    the position is drawn[] plus the draw count: a checkpoint keeps both.

    The curriculum (window N > 0): a record whose last N groups all had every sample correct (or
    none) is dropped when drawn again: it still counts as drawn (the epoch moves on) but is not
    sampled.  Streaks live per (source, record) and are saved with the position. */
#ifndef BATON_MIXTURE_H
#define BATON_MIXTURE_H

#include "baton/source.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BT_MIXTURE_MAX_SOURCES 8

typedef struct bt_mixture bt_mixture_t;

typedef struct bt_mixture_config {
    int n_sources;    /* 1..BT_MIXTURE_MAX_SOURCES */
    uint64_t seed;    /* of the source draws */
    int64_t window;   /* curriculum: groups in a row; 0: off */
    bool skip_solved; /* drop records solved by every sample window times in a row */
    bool skip_failed; /* drop records failed by every sample window times in a row */
} bt_mixture_config;

/*  Caller owns the result (NULL when out of memory); destroy with bt_mixture_destroy(). */
bt_mixture_t *bt_mixture_new(const bt_mixture_config *cfg);
void bt_mixture_destroy(bt_mixture_t **self_p);

/*  The next prompt: sources[s] are the sources' tasks (for their records), weights[s] > 0.  Draws
    until a prompt the curriculum keeps; each dropped one is written to dropped[*n_dropped] (up to
    cap_dropped; *n_dropped counts them all).  BT_ERANGE when max_draws draws drop everything
    ("every prompt ... is dropped by the curriculum"). */
bt_status bt_mixture_next(bt_mixture_t *self, bt_source_t *const *sources, const double *weights,
                          int64_t max_draws, uint64_t *id, uint64_t *dropped, int64_t cap_dropped,
                          int64_t *n_dropped);

/*  A group of prompt id was scored: correct of group_size samples right. */
void bt_mixture_observe(bt_mixture_t *self, bt_source_t *const *sources, uint64_t id,
                        int64_t correct, int64_t group_size);

/*  The position: draws so far, and indices drawn per source. */
typedef struct bt_mixture_position {
    uint64_t draws;
    uint64_t drawn[BT_MIXTURE_MAX_SOURCES];
} bt_mixture_position;

bt_mixture_position bt_mixture_get_position(const bt_mixture_t *self);
void bt_mixture_set_position(bt_mixture_t *self, const bt_mixture_position *pos);
/*  Prompts dropped by the curriculum so far, and records it drops now. */
int64_t bt_mixture_dropped(const bt_mixture_t *self);
int64_t bt_mixture_dropping(const bt_mixture_t *self);

/*  JSON text of pos and the curriculum's streaks (data.json of a checkpoint); caller frees.  NULL
    when out of memory. */
char *bt_mixture_to_json(const bt_mixture_t *self, const bt_mixture_position *pos);
/*  Reads it back into self (streaks replaced) and *pos.  BT_EFORMAT naming source and the field. */
bt_status bt_mixture_from_json(bt_mixture_t *self, const char *text, const char *source,
                               bt_mixture_position *pos);

#ifdef __cplusplus
}
#endif
#endif
