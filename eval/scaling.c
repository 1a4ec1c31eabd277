/*  scaling.c — the LR-annealing scaling law: schedule areas, the robust multi-start fit, the
    early-stop cut and the prediction record. */
#include "baton/scaling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Scaling law with LR annealing (Tissue et al. 2024, arXiv 2408.11029), warmup at the max LR */
void bt_scaling_areas(const double *lr, int64_t n, int64_t warmup, double *s1, double *s2) {
    BT_ASSERT(n >= 1 && warmup >= 0 && warmup <= n);
    double eta_max = 0.0;
    for (int64_t i = 0; i < n; i++)
        eta_max = fmax(eta_max, lr[i]);
    double prev = warmup >= 1 ? eta_max : lr[0]; /* eta_0 = eta_1: no momentum at step 1 */
    double m = 0.0, a1 = 0.0, a2 = 0.0;
    for (int64_t i = 1; i <= n; i++) {
        double eta = i <= warmup ? eta_max : lr[i - 1];
        m = BT_SCALING_LAMBDA * m + (prev - eta);
        prev = eta;
        a1 += eta;
        a2 += m;
        s1[i - 1] = a1;
        s2[i - 1] = a2;
    }
}

double bt_scaling_predict(const bt_scaling_params *p, const double *s1, const double *s2,
                          int64_t step) {
    BT_ASSERT(step >= 1);
    if (!(s1[step - 1] > 0.0))
        return NAN;
    return p->L0 + p->A * pow(s1[step - 1], -p->alpha) - p->C * s2[step - 1];
}

void bt_scaling_fit_config_init(bt_scaling_fit_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->delta = 1e-3;
    cfg->max_iter = 200;
    cfg->tol = 1e-10;
}

/* ---- the fit ---------------------------------------------------------------------------------
   Parameters as a vector theta = (L0, A, alpha, C).  Per point j: x = ln S1, z = S2, y = ln loss;
   f = L0 + A exp(-alpha x) - C z; residual r = ln f - y. */

enum { P_L0, P_A, P_ALPHA, P_C, NP };

typedef struct s_points {
    int64_t m;
    const double *x, *z, *y; /* (m,) each */
    double delta;
} s_points;

static double s_huber(double r, double delta) {
    double a = fabs(r);
    return a <= delta ? 0.5 * r * r : delta * (a - 0.5 * delta);
}

/*  Mean Huber loss at theta; +inf where the curve is not positive at some point (no log). */
static double s_objective(const s_points *pt, const double *th, double *rms) {
    double sum = 0.0, sumsq = 0.0;
    for (int64_t j = 0; j < pt->m; j++) {
        double f = th[P_L0] + th[P_A] * exp(-th[P_ALPHA] * pt->x[j]) - th[P_C] * pt->z[j];
        if (!(f > 0.0) || !isfinite(f))
            return INFINITY;
        double r = log(f) - pt->y[j];
        sum += s_huber(r, pt->delta);
        sumsq += r * r;
    }
    if (rms)
        *rms = sqrt(sumsq / (double)pt->m);
    return sum / (double)pt->m;
}

/*  Solves the symmetric system a x = b (n <= NP, row stride NP) by Gaussian elimination with
    partial pivoting on the Jacobi-scaled matrix; false when a pivot is below 1e-12 relative
    (a direction the data does not determine). */
static bool s_solve(int n, const double *a, const double *b, double *x) {
    double m[NP][NP + 1], sc[NP];
    for (int i = 0; i < n; i++) {
        if (!(a[i * NP + i] > 0.0))
            return false;
        sc[i] = 1.0 / sqrt(a[i * NP + i]);
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < n; k++)
            m[i][k] = a[i * NP + k] * sc[i] * sc[k];
        m[i][n] = b[i] * sc[i];
    }
    for (int c = 0; c < n; c++) {
        int piv = c;
        for (int i = c + 1; i < n; i++)
            if (fabs(m[i][c]) > fabs(m[piv][c]))
                piv = i;
        if (!(fabs(m[piv][c]) > 1e-12))
            return false;
        for (int k = 0; k <= n; k++) {
            double t = m[c][k];
            m[c][k] = m[piv][k];
            m[piv][k] = t;
        }
        for (int i = c + 1; i < n; i++) {
            double f = m[i][c] / m[c][c];
            for (int k = c; k <= n; k++)
                m[i][k] -= f * m[c][k];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = m[i][n];
        for (int k = i + 1; k < n; k++)
            s -= m[i][k] * x[k];
        x[i] = s / m[i][i];
    }
    for (int i = 0; i < n; i++)
        x[i] *= sc[i];
    return true;
}

/*  A starting point for a given alpha: L0, A (and C unless fix_c) >= 0 minimising the relative
    squared error sum_j ((f_j - loss_j) / loss_j)^2, which is linear in them.  Every subset of them
    held at 0 is solved; of the solutions >= 0 whose curve is positive at every point, the least
    error wins.  When none is (a large fixed C), L0 = max_j (loss_j + C z_j) and A = 0: a curve
    at or above every loss. */
static void s_start(const s_points *pt, const double *loss, double alpha, bool fix_c, double c,
                    double *th) {
    int nb = fix_c ? 2 : 3; /* basis: L0, A, C */
    double nm[3][3] = {{0}}, v[3] = {0}, tt = 0.0;
    for (int64_t j = 0; j < pt->m; j++) {
        double b[3] = {1.0 / loss[j], exp(-alpha * pt->x[j]) / loss[j], -pt->z[j] / loss[j]};
        double t = fix_c ? 1.0 + c * pt->z[j] / loss[j] : 1.0;
        for (int i = 0; i < nb; i++) {
            v[i] += b[i] * t;
            for (int k = 0; k < nb; k++)
                nm[i][k] += b[i] * b[k];
        }
        tt += t * t;
    }
    double best = INFINITY;
    for (int mask = 1; mask < (1 << nb); mask++) {
        int idx[3], n = 0;
        for (int i = 0; i < nb; i++)
            if (mask & (1 << i))
                idx[n++] = i;
        double a[NP * NP], rhs[NP], sol[NP];
        for (int i = 0; i < n; i++) {
            rhs[i] = v[idx[i]];
            for (int k = 0; k < n; k++)
                a[i * NP + k] = nm[idx[i]][idx[k]];
        }
        if (!s_solve(n, a, rhs, sol))
            continue;
        double q[3] = {0};
        bool feasible = true;
        for (int i = 0; i < n; i++) {
            q[idx[i]] = sol[i];
            feasible = feasible && sol[i] >= 0.0;
        }
        if (!feasible)
            continue;
        double sse = tt; /* sum (b.q - t)^2 = tt - 2 q.v + q'Nq */
        for (int i = 0; i < nb; i++) {
            sse -= 2.0 * q[i] * v[i];
            for (int k = 0; k < nb; k++)
                sse += q[i] * nm[i][k] * q[k];
        }
        double cand[NP] = {q[0], q[1], alpha, fix_c ? c : q[2]};
        if (sse < best && isfinite(s_objective(pt, cand, NULL))) {
            best = sse;
            memcpy(th, cand, sizeof cand);
        }
    }
    if (best == INFINITY) {
        double top = 0.0;
        for (int64_t j = 0; j < pt->m; j++)
            top = fmax(top, loss[j] + (fix_c ? c : 0.0) * pt->z[j]);
        double flat[NP] = {top, 0.0, alpha, fix_c ? c : 0.0};
        memcpy(th, flat, sizeof flat);
    }
}

/*  Projected Levenberg-Marquardt from th, in place.  Each iteration linearises the residuals:
    gradient g = sum psi(r) dr, with psi(r) = r inside delta and delta sign(r) outside; Gauss-Newton
    curvature H = sum over residuals inside delta of dr dr' (the Huber loss is linear outside);
    damping mu * diag(sum w dr dr'), w = min(1, delta/|r|) (the IRLS weights), which stays positive
    when few residuals are inside.  (With the IRLS matrix as curvature the fit converged linearly:
    twice the iterations, past 200 on 1 noisy curve in 100.)  A parameter at 0 whose gradient pushes
   it below stays out of the step, the step is clipped at 0, and only a step that lowers the
   objective is taken (else more damping).  Returns the objective; *iters and *converged say how it
   ended. */
static double s_refine(const s_points *pt, bool fix_c, double tol, int max_iter, double *th,
                       int *iters, bool *converged) {
    double obj = s_objective(pt, th, NULL);
    double mu = 1e-3;
    *converged = false;
    int it = 0;
    for (; it < max_iter && !*converged; it++) {
        double h[NP * NP] = {0}, g[NP] = {0}, damp[NP] = {0};
        for (int64_t j = 0; j < pt->m; j++) {
            double e = exp(-th[P_ALPHA] * pt->x[j]);
            double f = th[P_L0] + th[P_A] * e - th[P_C] * pt->z[j];
            double r = log(f) - pt->y[j];
            bool inside = fabs(r) <= pt->delta;
            double w = inside ? 1.0 : pt->delta / fabs(r); /* psi(r) = w r */
            double d[NP] = {1.0 / f, e / f, -th[P_A] * pt->x[j] * e / f, -pt->z[j] / f}; /* dr */
            for (int i = 0; i < NP; i++) {
                g[i] += w * r * d[i];
                damp[i] += w * d[i] * d[i];
                if (inside)
                    for (int k = 0; k <= i; k++)
                        h[i * NP + k] += d[i] * d[k];
            }
        }
        for (int i = 0; i < NP; i++)
            for (int k = 0; k < i; k++)
                h[k * NP + i] = h[i * NP + k];
        int free_[NP], nf = 0;
        for (int i = 0; i < NP; i++) {
            bool held = (i == P_C && fix_c) || damp[i] == 0.0 || (th[i] <= 0.0 && g[i] > 0.0);
            if (!held)
                free_[nf++] = i;
        }
        if (nf == 0) {
            *converged = true;
            break;
        }
        for (;;) { /* raise the damping until a step lowers the objective */
            double a[NP * NP], rhs[NP], step[NP], trial[NP];
            for (int i = 0; i < nf; i++) {
                rhs[i] = -g[free_[i]];
                for (int k = 0; k < nf; k++)
                    a[i * NP + k] = h[free_[i] * NP + free_[k]];
                a[i * NP + i] += mu * damp[free_[i]];
            }
            memcpy(trial, th, sizeof trial);
            if (s_solve(nf, a, rhs, step))
                for (int i = 0; i < nf; i++)
                    trial[free_[i]] = fmax(0.0, th[free_[i]] + step[i]);
            double t_obj = s_objective(pt, trial, NULL);
            if (t_obj < obj) {
                bool small_step = true;
                for (int i = 0; i < NP; i++)
                    small_step = small_step && fabs(trial[i] - th[i]) <= tol * (fabs(th[i]) + tol);
                *converged = small_step || obj - t_obj <= tol * obj;
                memcpy(th, trial, sizeof trial);
                obj = t_obj;
                mu = fmax(mu / 3.0, 1e-12);
                break;
            }
            mu *= 4.0;
            if (mu > 1e16) { /* no descent even along the scaled gradient: a minimum */
                *converged = true;
                break;
            }
        }
    }
    *iters = it;
    return obj;
}

bt_status bt_scaling_fit_curve(const double *s1, const double *s2, int64_t n_steps,
                               const int64_t *steps, const double *loss, int64_t n_points,
                               const bt_scaling_fit_config *cfg, bt_scaling_fit *out) {
    memset(out, 0, sizeof *out);
    if (!(cfg->delta > 0.0) || cfg->max_iter < 1 || !(cfg->tol > 0.0) ||
        (cfg->fix_c && !(cfg->c >= 0.0 && isfinite(cfg->c))))
        return bt_fail(BT_EINVAL,
                       "cfg: expected delta > 0, max_iter >= 1, tol > 0 and c >= 0, "
                       "got %g, %d, %g, %g",
                       cfg->delta, cfg->max_iter, cfg->tol, cfg->c);
    int64_t need = cfg->fix_c ? 3 : 4;
    if (n_points < need)
        return bt_fail(BT_EINVAL, "n_points: expected at least %lld points, got %lld",
                       (long long)need, (long long)n_points);
    for (int64_t j = 0; j < n_points; j++) {
        if (steps[j] < 1 || steps[j] > n_steps)
            return bt_fail(BT_EINVAL, "steps[%lld]: expected 1..%lld, got %lld", (long long)j,
                           (long long)n_steps, (long long)steps[j]);
        if (!(s1[steps[j] - 1] > 0.0) || !isfinite(s1[steps[j] - 1]) || !isfinite(s2[steps[j] - 1]))
            return bt_fail(BT_EINVAL, "steps[%lld]: step %lld has S1 = %g, S2 = %g (no LR yet?)",
                           (long long)j, (long long)steps[j], s1[steps[j] - 1], s2[steps[j] - 1]);
        if (!(loss[j] > 0.0) || !isfinite(loss[j]))
            return bt_fail(BT_EINVAL, "loss[%lld]: expected a finite number > 0, got %g",
                           (long long)j, loss[j]);
    }

    double *buf = malloc(3 * (size_t)n_points * sizeof *buf);
    if (!buf)
        return bt_fail(BT_ENOMEM, "scaling fit: no memory for %lld points", (long long)n_points);
    double *x = buf, *z = buf + n_points, *y = buf + 2 * n_points;
    for (int64_t j = 0; j < n_points; j++) {
        x[j] = log(s1[steps[j] - 1]);
        z[j] = s2[steps[j] - 1];
        y[j] = log(loss[j]);
        out->c_identified = out->c_identified || z[j] != 0.0;
    }
    s_points pt = {n_points, x, z, y, cfg->delta};

    static const double alphas[] = {0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0, 1.5};
    double best = INFINITY;
    for (size_t k = 0; k < sizeof alphas / sizeof alphas[0]; k++) {
        double th[NP];
        s_start(&pt, loss, alphas[k], cfg->fix_c, cfg->c, th);
        int iters;
        bool converged;
        double obj = s_refine(&pt, cfg->fix_c, cfg->tol, cfg->max_iter, th, &iters, &converged);
        if (obj < best) { /* ties keep the earlier start */
            best = obj;
            out->p = (bt_scaling_params){th[P_L0], th[P_A], th[P_ALPHA], th[P_C]};
            out->iterations = iters;
            out->converged = converged;
        }
    }
    double p[NP] = {out->p.L0, out->p.A, out->p.alpha, out->p.C};
    out->objective = s_objective(&pt, p, &out->rms);
    free(buf);
    return BT_OK;
}

/* ---- early stop and the record --------------------------------------------------------------- */

int bt_scaling_early_stop(const double *predicted, int n, double margin, bool *stop) {
    BT_ASSERT(n >= 0 && margin >= 0.0);
    double best = INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(predicted[i]) && predicted[i] < best)
            best = predicted[i];
    int stopped = 0;
    for (int i = 0; i < n; i++) {
        stop[i] = isfinite(predicted[i]) && predicted[i] - best > margin * fabs(best);
        stopped += stop[i];
    }
    return stopped;
}

void bt_scaling_record_init(bt_scaling_record *r) {
    memset(r, 0, sizeof *r);
}

bt_status bt_scaling_record_add(bt_scaling_record *r, int64_t made_at, int64_t target,
                                double predicted) {
    if (r->n >= BT_SCALING_RECORD_MAX)
        return bt_fail(BT_ERANGE, "scaling record: full (%d predictions)", BT_SCALING_RECORD_MAX);
    if (target < made_at)
        return bt_fail(BT_EINVAL, "target: expected a step >= made_at (%lld), got %lld",
                       (long long)made_at, (long long)target);
    r->entries[r->n++] =
        (bt_scaling_prediction){.made_at = made_at, .target = target, .predicted = predicted};
    return BT_OK;
}

int bt_scaling_record_measure(bt_scaling_record *r, int64_t step, double loss) {
    if (!(loss > 0.0) || !isfinite(loss))
        return 0;
    int resolved = 0;
    for (int i = 0; i < r->n; i++) {
        bt_scaling_prediction *e = &r->entries[i];
        if (e->measured || e->target != step)
            continue;
        e->measured = true;
        e->loss = loss;
        e->error = (e->predicted - loss) / loss;
        resolved++;
    }
    return resolved;
}
