/*  report.h — `baton report`: reads run directories (config.json, metrics.jsonl, events.jsonl) and
    writes one self-contained HTML file: a table of runs and inline SVG charts against step.
    Threading: plain functions; any thread.  Lifetime: stateless; nothing to create or destroy. */
#ifndef BATON_REPORT_H
#define BATON_REPORT_H

#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  Reads the n_dirs (>= 1) run dirs and writes the HTML report to out_path (written to a temp
    file beside it, then renamed).  The file is well-formed XML (XHTML with inline SVG, no scripts,
    no external URLs).  Charts, each <svg class="chart" data-family="F">, one per family with data:
    accuracy (with evaluation markers and eval_interval / eval_alarm ticks), response_length,
    reward, perplexity, probes, robustness.  Malformed JSON lines are skipped and counted in a note.
    The table compares the runs: final step, last and best accuracy per dataset (with the step of
    the best), completion tokens sampled, and with target_accuracy finite the first RL evaluation
    of each dataset at or above it (step and seconds since the run's start); NaN: no such column.
    Errors: BT_EIO naming the path when a dir (or its metrics.jsonl) cannot be read or the output
    cannot be written; BT_ENOMEM. */
bt_status bt_report_write(const char *const *run_dirs, int n_dirs, const char *out_path,
                          double target_accuracy);

#ifdef __cplusplus
}
#endif
#endif
