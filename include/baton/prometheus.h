/*  prometheus.h — the run's Prometheus endpoint (run.metrics_listen): a small HTTP/1.1 server that
    answers GET /metrics with the text exposition format 0.0.4 over a table of gauges and counters,
    which the run log's lines (a runlog sink) and the controller's loop fill.
    Threading: one server thread of its own answers scrapes; the setters may be called from any
    thread (one mutex guards the table).  Lifetime: one per run, started before the run log opens
    and destroyed after it (the sink's user pointer). */
#ifndef BATON_PROMETHEUS_H
#define BATON_PROMETHEUS_H

#include "baton/registry.h"
#include "baton/runlog.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_prometheus bt_prometheus_t;

/*  Series the table holds at most; a series beyond them is dropped (with one warning). */
#define BT_PROMETHEUS_MAX_SERIES 4096
#define BT_PROMETHEUS_NAME_MAX 128   /* a metric name, its NUL included */
#define BT_PROMETHEUS_LABELS_MAX 256 /* the labels as written between the braces, NUL included */

typedef enum bt_prometheus_type {
    BT_PROMETHEUS_GAUGE = 0,
    BT_PROMETHEUS_COUNTER = 1
} bt_prometheus_type;

/*  Listens on address ("HOST:PORT", as run.metrics_listen validates it) and starts the server
    thread.  Caller owns the result; destroy with bt_prometheus_destroy().  NULL on failure with
    the reason in bt_last_error(), naming the address ("run.metrics_listen: cannot listen on
    127.0.0.1:9464: Address already in use"). */
bt_prometheus_t *bt_prometheus_new(const char *address);
/*  Stops the server thread (a scrape in progress is answered first) and frees the table. */
void bt_prometheus_destroy(bt_prometheus_t **self_p);

/*  Sets the series name{labels} (labels: `key="value",...` as written between the braces, ""
    for none; build it with bt_prometheus_label) to value, adding it when new; help is the
    family's # HELP text, taken from the first series of the name.  A counter's value must not
    fall (it is the caller's total). */
void bt_prometheus_set(bt_prometheus_t *self, const char *name, const char *help,
                       bt_prometheus_type type, const char *labels, double value);
/*  Adds delta (>= 0) to the counter name{labels}, which starts at 0. */
void bt_prometheus_add(bt_prometheus_t *self, const char *name, const char *help,
                       const char *labels, double delta);
/*  Appends `key="value"` (a comma first when labels is not empty) to labels (cap bytes), the value
    escaped as the exposition format asks (\\, \", \n); false when it does not fit. */
bool bt_prometheus_label(char *labels, size_t cap, const char *key, const char *value);

/*  The sink that follows the run log: every numeric field of a train line sets the gauge
    baton_train_<field>{variant}, of an eval line baton_eval_<field>{variant,dataset} (names
    reduced to [a-zA-Z0-9_]; a null field is NaN), all of one line under one lock, so a scrape
    sees one line whole.  After a rewind the train and eval gauges are read again from the last
    lines of dir/metrics.jsonl.  Borrowed: self must outlive the run log. */
bt_runlog_sink bt_prometheus_sink(bt_prometheus_t *self);
/*  Sets the train and eval gauges from the lines dir/metrics.jsonl holds now (a resumed run's
    latest figures before its first new line). */
void bt_prometheus_load(bt_prometheus_t *self, const char *dir);
/*  The registry's figures: baton_workers{role,state} (idle, busy, lost) and
    baton_queued_jobs{role}, published when they changed.  On the controller thread, once a
    turn. */
void bt_prometheus_registry(bt_prometheus_t *self, bt_registry_t *reg);
/*  The text a scrape gets now (caller frees; NULL when out of memory). */
char *bt_prometheus_render(bt_prometheus_t *self);

#ifdef __cplusplus
}
#endif
#endif
