/*  report.h — `baton report`: reads run directories (config.json, metrics.jsonl, events.jsonl,
    run.json) and writes one self-contained HTML page: tables of the runs (who made them, how far
    they got, the config keys that differ) and a dashboard its own script draws from the data.
    Threading: plain functions; any thread.  Lifetime: stateless; nothing to create or destroy. */
#ifndef BATON_REPORT_H
#define BATON_REPORT_H

#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  Reads the n_dirs (>= 1) run dirs and writes the HTML report to out_path (written to a temp
    file beside it, then renamed).  The page is well-formed XML (XHTML; its script in a CDATA
    section) and names no external URL.  Tables: who made each run (run.json's records: start
    and each resume, baton version, git revision, command, host, user, the keys a resume
    changed), the runs compared (final step, last and best accuracy per dataset with the step of
    the best, completion tokens sampled, and with target_accuracy finite the first RL evaluation
    of each dataset at or above it, step and seconds since the run's start; NaN: no such column),
    the PBT lineage, and the flattened config.json keys whose values differ between the runs.
    The data, every numeric field of every metrics line by series (run and variant) and group
    (train, eval/<dataset>, ...), and the events with a step or a time, is one JSON object in
    <script id="baton-data" type="application/json"> ('<', '>', '&' written as \u escapes);
    orchestrator/report.js draws a chart per group and field from it (docs/architecture.md,
    "The report").  Malformed JSON lines are skipped and counted in a note.
    Errors: BT_EIO naming the path when a dir (or its metrics.jsonl) cannot be read or the output
    cannot be written; BT_ENOMEM. */
bt_status bt_report_write(const char *const *run_dirs, int n_dirs, const char *out_path,
                          double target_accuracy);

/*  Which build and command made the run in run_dir, one line per record of its run.json:
    "DIR: started|resumed TIME by baton VERSION (git REV) on HOST as USER: COMMAND", a resume
    adding " (changed KEY FROM -> TO; ...)"; without run.json one line saying so.  Caller owns
    *text_out (free()).  Errors: BT_ENOMEM. */
bt_status bt_report_identity(const char *run_dir, char **text_out);

#ifdef __cplusplus
}
#endif
#endif
