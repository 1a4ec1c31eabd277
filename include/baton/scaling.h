/*  scaling.h — the LR-annealing scaling law (Tissue et al. 2024): a loss curve predicted from the
    learning-rate schedule, fitted robustly to observed losses; the early-stop rule built on its
    predictions, and a record of each prediction against the loss later measured.
    Threading: pure functions and plain values, one thread at a time per value.
    Lifetime: nothing to create or destroy; a record is a plain value (a copy checkpoints it). */
#ifndef BATON_SCALING_H
#define BATON_SCALING_H

#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  Decay of the annealing momentum, the paper's lambda. */
#define BT_SCALING_LAMBDA 0.999

/*  The forward and annealing areas of a schedule; step s (1-based, s = 1..n) trains with lr[s-1]
    and its loss is measured after that update.  With eta_i = lr[i-1], except that the first
    warmup steps count at the schedule's largest LR (the paper's convention):
      s1[s-1] = S1(s) = sum_{i<=s} eta_i
      s2[s-1] = S2(s) = sum_{i<=s} m_i,  m_i = lambda * m_{i-1} + (eta_{i-1} - eta_i),
                m_0 = 0, eta_0 = eta_1, lambda = BT_SCALING_LAMBDA.
    Pass the whole planned schedule, future steps included: a prediction at step t reads s1[t-1]
    and s2[t-1].  Requires n >= 1, 0 <= warmup <= n, lr finite and >= 0. */
void bt_scaling_areas(const double *lr, int64_t n, int64_t warmup, double *s1, double *s2);

/*  L(s) = L0 + A * S1(s)^(-alpha) - C * S2(s); every parameter >= 0. */
typedef struct bt_scaling_params {
    double L0;    /* the loss an infinite forward area would reach without annealing */
    double A;     /* scale of the power-law term */
    double alpha; /* its exponent */
    double C;     /* loss removed per unit of annealing area */
} bt_scaling_params;

/*  The law at step (1-based) of the schedule whose areas s1, s2 are: the fitted curve where losses
    were observed, the prediction where they were not.  NaN when s1[step-1] is 0 (no LR yet). */
double bt_scaling_predict(const bt_scaling_params *p, const double *s1, const double *s2,
                          int64_t step);

typedef struct bt_scaling_fit_config {
    double delta; /* Huber threshold on log-loss residuals ln L_fit - ln L_obs, about a relative
                     error: below it a residual counts squared, above it linearly.  Far below
                     the noise (raw per-step losses) the fit is nearly least absolute deviations,
                     robust to spikes; near 1.35 x the noise it is as efficient as least squares
                     on Gaussian noise */
    int max_iter; /* Levenberg-Marquardt iterations per starting point */
    double tol;   /* converged when an accepted step lowers the objective by less than this,
                     relative, or moves no parameter by more than this, relative */
    bool fix_c;   /* hold C at c instead of fitting it: a curve that has not annealed yet says
                     nothing about C, which can come from a run that has (same model and data) */
    double c;     /* the value held when fix_c, >= 0 */
} bt_scaling_fit_config;

/*  delta 1e-3 (the paper's, as Chinchilla's), max_iter 200, tol 1e-10, C fitted. */
void bt_scaling_fit_config_init(bt_scaling_fit_config *cfg);

typedef struct bt_scaling_fit {
    bt_scaling_params p; /* the best fit over every starting point */
    double objective;    /* mean Huber loss of the log residuals at p */
    double rms;          /* root mean square of the log residuals (about the relative error) */
    int iterations;      /* iterations of the winning start */
    bool converged;      /* the winning start met tol within max_iter */
    bool c_identified;   /* some observed point has S2 != 0 (the LR had moved after warmup by
                            then); false with C fitted means C is 0 and unknown: the prediction
                            leaves out the loss that annealing removes */
} bt_scaling_fit;

/*  Fits the law to losses loss[j] observed at steps[j] (1-based, <= n_steps) of the schedule whose
    areas s1, s2 (n_steps each) bt_scaling_areas computed.  Minimises the mean Huber loss of
    ln L(steps[j]) - ln loss[j] over L0, A, alpha, C >= 0 by projected Levenberg-Marquardt
    (Gauss-Newton on the Huber loss), started from 8 points: for alpha in {0.1, 0.2, 0.3, 0.45,
    0.6, 0.8, 1.0, 1.5}, the L0, A, C >= 0 of least relative squared error (linear in them); the
    lowest objective wins.  Deterministic.  Not converging is no error: out->converged says it.
    BT_EINVAL, with a message naming the argument, when a step is outside 1..n_steps or has
    s1 == 0, a loss is not a finite number > 0, there are fewer than 4 points (3 with fix_c), or
    cfg is out of range (delta > 0, max_iter >= 1, tol > 0, c >= 0). */
bt_status bt_scaling_fit_curve(const double *s1, const double *s2, int64_t n_steps,
                               const int64_t *steps, const double *loss, int64_t n_points,
                               const bt_scaling_fit_config *cfg, bt_scaling_fit *out);

/*  ASHA-like cut: sets stop[i] when variant i's predicted final loss exceeds the best (lowest)
    prediction by more than the relative margin, predicted[i] > best * (1 + margin); returns how
    many.  A non-finite prediction (no fit yet) neither stops nor sets the best.  Choose margin
    above the relative errors the record shows for past predictions.  Requires margin >= 0. */
int bt_scaling_early_stop(const double *predicted, int n, double margin, bool *stop);

/*  One prediction and, once measured, its error. */
typedef struct bt_scaling_prediction {
    int64_t made_at;  /* the last step whose loss the fit saw */
    int64_t target;   /* the step predicted, usually the run's last */
    double predicted; /* the loss predicted at target */
    bool measured;    /* a loss at target was recorded */
    double loss;      /* that loss (measured) */
    double error;     /* (predicted - loss) / loss: > 0 predicted too high (measured) */
} bt_scaling_prediction;

#define BT_SCALING_RECORD_MAX 256

/*  Every prediction of one variant, so a report can show each with its later measured error. */
typedef struct bt_scaling_record {
    int n;
    bt_scaling_prediction entries[BT_SCALING_RECORD_MAX]; /* in the order added */
} bt_scaling_record;

void bt_scaling_record_init(bt_scaling_record *r);
/*  Appends a prediction made at step made_at for step target; BT_ERANGE when the record holds
    BT_SCALING_RECORD_MAX, BT_EINVAL when target < made_at. */
bt_status bt_scaling_record_add(bt_scaling_record *r, int64_t made_at, int64_t target,
                                double predicted);
/*  The loss measured at step (the same estimate the fit was given, e.g. smoothed training loss or
    held-out loss) resolves every prediction targeting that step not yet measured; returns how
    many.  A loss that is not a finite number > 0 (a diverged run) resolves nothing. */
int bt_scaling_record_measure(bt_scaling_record *r, int64_t step, double loss);

#ifdef __cplusplus
}
#endif
#endif
