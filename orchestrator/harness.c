/*  harness.c — offline evaluation of model directories on a config's eval datasets, the results
    cache, the results JSON and the regression gate.  cJSON stays in this file. */
#define _POSIX_C_SOURCE 200809L
#include "baton/harness.h"

#include "baton/episodes.h"
#include "baton/fileio.h"
#include "baton/model.h"
#include "baton/source.h"
#include "baton/tensor.h"
#include "baton/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S_CACHE_FORMAT "baton-eval-cache-4" /* bump when metrics or keys change meaning */

/* ---- modes ----------------------------------------------------------------------------------- */

static const char *const s_modes[] = {"full", "quick", "compare", "incremental"};

const char *bt_harness_mode_name(bt_harness_mode mode) {
    return (unsigned)mode < sizeof s_modes / sizeof *s_modes ? s_modes[mode] : "unknown";
}

bt_status bt_harness_mode_parse(const char *text, bt_harness_mode *out) {
    for (int i = 0; i < (int)(sizeof s_modes / sizeof *s_modes); i++)
        if (!strcmp(text, s_modes[i])) {
            *out = (bt_harness_mode)i;
            return BT_OK;
        }
    return bt_fail(BT_EINVAL,
                   "--mode %s: expected one of \"full\", \"quick\", \"compare\", \"incremental\"",
                   text);
}

void bt_harness_options_init(bt_harness_options *opt) {
    *opt = (bt_harness_options){.mode = BT_HARNESS_FULL, .cache_dir = ".baton-eval-cache"};
}

/* ---- hashing: XXH3-64 (bt_hash64, bt_file_hash), chained ------------------------------------- */

#define S_HASH_START 0x62617430u /* any fixed start */

/*  h followed by v, hashed: the chain step. */
static uint64_t s_mix(uint64_t h, uint64_t v) {
    const uint64_t pair[2] = {h, v};
    return bt_hash64(pair, sizeof pair);
}

/*  A string and its NUL, so that consecutive strings cannot run into each other. */
static uint64_t s_hash_str(uint64_t h, const char *s) {
    return s_mix(h, bt_hash64(s, strlen(s) + 1));
}

/*  A file's bytes and size. */
static bt_status s_hash_file(uint64_t h, const char *path, uint64_t *out) {
    uint64_t hash = 0, size = 0;
    BT_TRY(bt_file_hash(path, &hash, &size));
    *out = s_mix(s_mix(h, hash), size);
    return BT_OK;
}

/*  The model half of the cache key: the bytes of config.json and model.safetensors, or for a
    drawn version-0 model its resolved config and the seed. */
static bt_status s_hash_model(const bt_config *cfg, const char *spec, uint64_t *out) {
    bool init = !strcmp(spec, BT_HARNESS_INIT);
    const char *dir = init ? cfg->model_path : spec;
    uint64_t h = S_HASH_START;
    if (init && !dir[0]) {
        char *json = bt_model_config_to_json(&cfg->model), seed[64];
        if (!json)
            return bt_fail(BT_ENOMEM, "%s: out of memory", spec);
        snprintf(seed, sizeof seed, "seed=%lld", (long long)cfg->run.seed);
        *out = s_hash_str(s_hash_str(h, json), seed);
        free(json);
        return BT_OK;
    }
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, files[i]) >= (int)sizeof path)
            return bt_fail(BT_EINVAL, "%s: path too long", dir);
        BT_TRY(s_hash_file(h, path, &h));
    }
    *out = h;
    return BT_OK;
}

/* ---- the datasets ---------------------------------------------------------------------------- */

/*  What every model is evaluated on, built once. */
typedef struct {
    const bt_config *cfg;
    bt_harness_options opt;
    bt_device dev;
    bt_tokenizer_t *tok;
    bt_source_t *task;
    /* reward.service's client, or NULL */
    bt_reward_service_t *reward;
    bt_eval_suite suite; /* the datasets, their own sources loaded, as on an eval worker */
    bt_episode_source episodes[BT_CONFIG_MAX_SOURCES]; /* each source's environment, as there */
    size_t count[BT_EVAL_MAX_DATASETS];                /* items evaluated in this mode */
    uint64_t hash[BT_EVAL_MAX_DATASETS];               /* the dataset half of the cache key */
} s_data;

/*  The dataset's count (0: all), capped in quick mode; probes are always all evaluated. */
static size_t s_count(const s_data *d, int i) {
    size_t n = bt_eval_suite_size(&d->suite, i);
    if (d->cfg->eval.datasets[i].kind != BT_EVAL_PROBES && d->opt.mode == BT_HARNESS_QUICK &&
        n > BT_HARNESS_QUICK_COUNT)
        n = BT_HARNESS_QUICK_COUNT;
    return n;
}

/*  The probes as written, eval.probes then eval.probes_source's: a file's content counts, not
    its name or its layout. */
static uint64_t s_hash_probes(uint64_t h, const bt_eval_suite *suite) {
    for (int64_t i = 0; i < suite->n_probes; i++) {
        const bt_eval_probe *p = &suite->listed[i];
        h = s_hash_str(s_hash_str(h, p->name), p->prompt);
        h = s_hash_str(s_hash_str(s_hash_str(h, p->target), p->better), p->worse);
    }
    return h;
}

/*  The dataset half of the cache key: everything its numbers depend on besides the model.  The
    triggers (every_*) do not change results and are left out. */
static bt_status s_hash_dataset(s_data *d, int i) {
    const bt_config *c = d->cfg;
    const bt_eval_dataset *e = &c->eval.datasets[i];
    char text[5 * BT_CONFIG_PATH_MAX + 512];
    snprintf(text, sizeof text,
             S_CACHE_FORMAT "|index %d|name %s|kind %d|source %s|count %zu|samples %lld|"
                            "temperature %.17g|max_new_tokens %lld|robustness %d|run.seed %lld|"
                            "device %s|precision %d|task %d %lld %lld %s %lld %.17g %s %s "
                            "%d|reward %s",
             i, e->name, (int)e->kind, e->source, d->count[i], (long long)e->samples,
             e->temperature, (long long)e->max_new_tokens, (int)e->robustness,
             (long long)c->run.seed, c->run.device, (int)c->run.precision, (int)c->task.kind,
             (long long)c->task.seed, (long long)c->task.digits, c->task.operators,
             (long long)c->task.heldout_size, c->task.format_reward, c->task.train, c->task.eval,
             (int)c->task.verifier, c->reward.service);
    uint64_t h = s_hash_str(S_HASH_START, text);
    /* the prompting and scoring: chat template, few-shot exemplars (and their file), rolling
       windows, the dataset's verifier and code limits, how choices are put */
    snprintf(text, sizeof text,
             "template %s|system %s|fewshot %lld|%s|%s|stride %lld|code %.17g %lld|verifier %d|"
             "letters %d|shuffle %d",
             c->task.chat_template, c->task.system_prompt, (long long)e->num_fewshot,
             e->fewshot_separator, e->fewshot_delimiter, (long long)e->stride,
             c->task.code_timeout_s, (long long)c->task.code_memory_mb, e->verifier,
             (int)e->choices_letters, (int)e->shuffle_choices);
    h = s_hash_str(h, text);
    /* its episodes: the keys of the source it evaluates (the task's without data.sources) */
    bt_config *one = malloc(sizeof *one);
    int k = e->data_source >= 0 ? e->data_source : 0;
    if (!one || bt_config_source(c, k, one) != BT_OK) {
        free(one);
        return one ? bt_last_status() : bt_fail(BT_ENOMEM, "baton eval: out of memory");
    }
    snprintf(text, sizeof text, "episodes %d %lld %lld %s %s %d %s", (int)one->task.env,
             (long long)one->task.max_turns, (long long)one->task.max_episode_tokens,
             one->task.env_service, one->task.chat_template, one->task.env_reward,
             one->task.observation_template);
    free(one);
    h = s_hash_str(h, text);
    if (e->fewshot_source[0])
        BT_TRY(s_hash_file(h, e->fewshot_source, &h));
    if (e->kind == BT_EVAL_PROBES)
        h = s_hash_probes(h, &d->suite);
    else if (e->source[0])
        BT_TRY(s_hash_file(h, e->source, &h));
    else if (c->task.kind == BT_CONFIG_TASK_JSONL) {
        BT_TRY(s_hash_file(h, c->task.train, &h));
        if (c->task.eval[0])
            BT_TRY(s_hash_file(h, c->task.eval, &h));
    }
    d->hash[i] = h;
    return BT_OK;
}

static void s_data_release(s_data *d) {
    bt_eval_suite_release(&d->suite);
    bt_reward_service_destroy(&d->reward);
    for (int k = 0; k < BT_CONFIG_MAX_SOURCES; k++)
        bt_episode_source_release(&d->episodes[k]);
    bt_source_destroy(&d->task);
    bt_tokenizer_destroy(&d->tok);
}

static bt_status s_data_build(s_data *d) {
    BT_TRY(bt_device_parse(d->cfg->run.device, &d->dev));
    if (d->cfg->run.threads > 0)
        bt_set_num_threads((int)d->cfg->run.threads);
    BT_TRY(bt_tokenizer_for_model(d->cfg->model_path, &d->tok));
    BT_TRY(bt_config_new_task(d->cfg, &d->task));
    BT_TRY(bt_config_eval_suite(d->cfg, d->task, &d->suite));
    if (d->cfg->reward.service[0]) /* scored as on an eval worker of the run */
        BT_TRY(bt_reward_service_new(d->cfg->reward.service, d->cfg->reward.timeout_ms,
                                     d->cfg->reward.retries, &d->reward));
    d->suite.reward_service = d->reward;
    int n_sources = bt_config_n_sources(d->cfg);
    for (int k = 0; k < n_sources; k++) /* episodes evaluate as on an eval worker */
        BT_TRY(bt_episode_source_new(NULL, d->cfg, k, &d->episodes[k]));
    bt_eval_suite_set_episodes(&d->suite, d->episodes, n_sources);
    for (int i = 0; i < d->cfg->eval.n_datasets; i++) {
        d->count[i] = s_count(d, i);
        BT_TRY(s_hash_dataset(d, i));
    }
    return BT_OK;
}

/* ---- evaluating one (model, dataset) pair ---------------------------------------------------- */

/*  Dataset i as one shard [0, count), seeded as a training run's step-0 evaluation with one eval
    worker, so `baton eval init` reproduces those eval lines. */
static bt_status s_evaluate(const s_data *d, bt_model *model, int i, bt_evaluator_sums *sums) {
    const bt_eval_dataset *e = &d->cfg->eval.datasets[i];
    return bt_eval_suite_run(&d->suite, i, model, d->tok, 0, d->count[i], e->robustness,
                             bt_config_eval_seed(d->cfg, i, 0, 0), sums);
}

static bt_status s_load_model(const s_data *d, const char *spec, bt_model **out) {
    bool init = !strcmp(spec, BT_HARNESS_INIT);
    const char *dir = init ? d->cfg->model_path : spec;
    *out = init && !dir[0] ? bt_model_new(&d->cfg->model, d->dev, (uint64_t)d->cfg->run.seed)
                           : bt_model_load(dir, d->dev);
    if (*out && bt_model_set_precision(*out, bt_config_precision_dtype(d->cfg)) == BT_OK)
        return BT_OK;
    bt_model_destroy(out);
    char why[768];
    snprintf(why, sizeof why, "%s", bt_last_error());
    return bt_fail(BT_EINVAL, "%s: cannot load the model: %s", spec, why);
}

/* ---- the cache: DIR/<model hash>-<dataset hash>.json ----------------------------------------- */

/*  An exact JSON number ("%.17g" round-trips a double), or null when not finite. */
static cJSON *s_number(double x) {
    char buf[32];
    if (!isfinite(x))
        return cJSON_CreateNull();
    snprintf(buf, sizeof buf, "%.17g", x);
    return cJSON_CreateRaw(buf);
}

/*  Adds item under key; on failure deletes item and clears *ok. */
static void s_add(cJSON *object, const char *key, cJSON *item, bool *ok) {
    if (!object || !item || !cJSON_AddItemToObject(object, key, item)) {
        cJSON_Delete(item);
        *ok = false;
    }
}

static cJSON *s_metrics_json(const bt_harness_dataset *ds, bool *ok) {
    cJSON *o = cJSON_CreateObject();
    for (int j = 0; j < ds->n_metrics; j++)
        s_add(o, ds->metrics[j].name, s_number(ds->metrics[j].value), ok);
    return o;
}

/*  Writes text to path through path.tmp and a rename, so a reader sees all of it or nothing. */
static bt_status s_write_atomic(const char *path, const char *text) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return bt_fail(BT_EINVAL, "%s: path too long", path);
    return bt_file_replace(path, tmp, text, strlen(text));
}

/*  Prints root (unless building it failed: !ok) to path atomically, and deletes it. */
static bt_status s_write_json(const char *path, cJSON *root, bool ok) {
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    bt_status st = s_write_atomic(path, text);
    cJSON_free(text);
    return st;
}

static bt_status s_cache_path(const s_data *d, uint64_t model_hash, int i, char *path) {
    if (mkdir(d->opt.cache_dir, 0755) != 0 && errno != EEXIST)
        return bt_fail(BT_EIO, "%s: cannot create the cache directory: %s", d->opt.cache_dir,
                       strerror(errno));
    if (snprintf(path, PATH_MAX, "%s/%016llx-%016llx.json", d->opt.cache_dir,
                 (unsigned long long)model_hash, (unsigned long long)d->hash[i]) >= PATH_MAX)
        return bt_fail(BT_EINVAL, "%s: path too long", d->opt.cache_dir);
    return BT_OK;
}

/*  Fills ds->metrics from the cache file at path; false when there is none or it is unusable. */
static bool s_cache_read(const char *path, bt_harness_dataset *ds) {
    char *text = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0 || bt_file_read(path, 1 << 20, &text, NULL) != BT_OK)
        return false;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "dataset");
    const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(root, "metrics"), *v;
    bool ok =
        cJSON_IsObject(metrics) && cJSON_IsString(name) && !strcmp(name->valuestring, ds->name);
    int n = 0;
    cJSON_ArrayForEach(v, metrics) {
        ok = ok && n < BT_EVAL_MAX_METRICS && (cJSON_IsNumber(v) || cJSON_IsNull(v)) &&
             strlen(v->string) < sizeof ds->metrics[n].name;
        if (!ok)
            break;
        snprintf(ds->metrics[n].name, sizeof ds->metrics[n].name, "%s", v->string);
        ds->metrics[n++].value = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    }
    cJSON_Delete(root);
    if (!ok)
        bt_log(BT_LOG_WARN, "%s: not a usable cache entry; evaluating again", path);
    ds->n_metrics = ok ? n : 0;
    return ok;
}

static bt_status s_cache_write(const char *path, const char *spec, const bt_harness_dataset *ds) {
    bool ok = true;
    cJSON *root = cJSON_CreateObject();
    s_add(root, "format", cJSON_CreateString(S_CACHE_FORMAT), &ok);
    s_add(root, "model", cJSON_CreateString(spec), &ok);
    s_add(root, "dataset", cJSON_CreateString(ds->name), &ok);
    s_add(root, "seconds", s_number(ds->seconds), &ok);
    s_add(root, "metrics", s_metrics_json(ds, &ok), &ok);
    return s_write_json(path, root, ok);
}

/* ---- running --------------------------------------------------------------------------------- */

/*  Dataset i for one model: from the cache in incremental mode when there, else computed (and
    then cached in incremental mode).  Loads *model on first need. */
static bt_status s_run_dataset(const s_data *d, const char *spec, bt_harness_model *m, int i,
                               bt_model **model) {
    const bt_config *c = d->cfg;
    bt_harness_dataset *ds = &m->datasets[i];
    double t0 = bt_now();
    snprintf(ds->name, sizeof ds->name, "%s", c->eval.datasets[i].name);
    bool incremental = d->opt.mode == BT_HARNESS_INCREMENTAL;
    char path[PATH_MAX];
    if (incremental) {
        BT_TRY(s_cache_path(d, m->hash, i, path));
        ds->cached = s_cache_read(path, ds);
        ds->seconds = bt_now() - t0;
        if (ds->cached)
            return BT_OK;
    }
    if (!*model)
        BT_TRY(s_load_model(d, spec, model));
    bt_evaluator_sums sums;
    BT_TRY(s_evaluate(d, *model, i, &sums));
    ds->n_metrics =
        bt_eval_suite_metrics(&d->suite, i, &sums, ds->metrics, BT_EVAL_MAX_METRICS, NULL);
    ds->seconds = bt_now() - t0;
    return incremental ? s_cache_write(path, spec, ds) : BT_OK;
}

static bt_status s_run_model(const s_data *d, const char *spec, bt_harness_model *m) {
    double t0 = bt_now();
    if (snprintf(m->path, sizeof m->path, "%s", spec) >= (int)sizeof m->path)
        return bt_fail(BT_EINVAL, "%s: path too long", spec);
    BT_TRY(s_hash_model(d->cfg, spec, &m->hash));
    bt_model *model = NULL;
    bt_status st = BT_OK;
    for (int i = 0; i < d->cfg->eval.n_datasets && st == BT_OK; i++)
        st = s_run_dataset(d, spec, m, i, &model);
    bt_model_destroy(&model);
    bt_device_release_cache(d->dev); /* the next model starts on an empty device */
    m->seconds = bt_now() - t0;
    return st;
}

bt_status bt_harness_run(const bt_config *cfg, const char *const *models, int n_models,
                         const bt_harness_options *opt, bt_harness_result **out) {
    BT_ASSERT(cfg && models && n_models >= 1 && out);
    *out = NULL;
    bt_harness_result *r = calloc(1, sizeof *r);
    bt_harness_model *m = calloc((size_t)n_models, sizeof *m);
    s_data d = {.cfg = cfg};
    bt_harness_options_init(&d.opt);
    if (opt)
        d.opt = (bt_harness_options){opt->mode, opt->cache_dir ? opt->cache_dir : d.opt.cache_dir};
    bt_status st = r && m ? s_data_build(&d) : bt_fail(BT_ENOMEM, "eval: out of memory");
    for (int k = 0; k < n_models && st == BT_OK; k++)
        st = s_run_model(&d, models[k], &m[k]);
    s_data_release(&d);
    if (st != BT_OK) {
        free(m);
        free(r);
        return st;
    }
    *r = (bt_harness_result){.mode = d.opt.mode, .cfg = *cfg, .n_models = n_models, .models = m};
    *out = r;
    return BT_OK;
}

void bt_harness_result_destroy(bt_harness_result **self_p) {
    if (!self_p || !*self_p)
        return;
    free((*self_p)->models);
    free(*self_p);
    *self_p = NULL;
}

/* ---- the table ------------------------------------------------------------------------------- */

static const bt_eval_metric *s_find(const bt_harness_dataset *ds, const char *name) {
    for (int j = 0; j < ds->n_metrics; j++)
        if (!strcmp(ds->metrics[j].name, name))
            return &ds->metrics[j];
    return NULL;
}

static bool s_is_stderr(const char *name) {
    size_t n = strlen(name);
    return n >= 7 && !strcmp(name + n - 7, "_stderr");
}

/*  Prints text left-aligned in width columns (UTF-8 aware: "±" is one column). */
static void s_pad(FILE *out, const char *text, int width) {
    int cols = 0;
    for (const char *p = text; *p; p++)
        cols += ((unsigned char)*p & 0xC0) != 0x80;
    fprintf(out, "%s%*s", text, width > cols ? width - cols : 0, "");
}

static void s_cell(const bt_harness_dataset *ds, const char *metric, char *buf, size_t len) {
    char name[80];
    const bt_eval_metric *v = s_find(ds, metric);
    snprintf(name, sizeof name, "%s_stderr", metric);
    const bt_eval_metric *se = s_find(ds, name);
    if (!v)
        snprintf(buf, len, "-");
    else if (se && isfinite(se->value))
        snprintf(buf, len, "%.6g \u00b1 %.2g", v->value, se->value);
    else
        snprintf(buf, len, "%.6g", v->value);
}

void bt_harness_print(const bt_harness_result *r, FILE *out) {
    int wd = 8, wm = 24, wv = 22; /* column widths: dataset, metric, each model */
    for (int i = 0; i < r->cfg.eval.n_datasets; i++) {
        int n = (int)strlen(r->cfg.eval.datasets[i].name);
        wd = n > wd ? n : wd;
    }
    for (int k = 0; k < r->n_models; k++) {
        int n = (int)strlen(r->models[k].path);
        wv = n > wv ? n : wv;
    }
    s_pad(out, "dataset", wd + 2);
    s_pad(out, "metric", wm + 2);
    for (int k = 0; k < r->n_models; k++)
        s_pad(out, r->models[k].path, wv + 2);
    fputc('\n', out);
    const bt_harness_dataset *first = r->models[0].datasets;
    for (int i = 0; i < r->cfg.eval.n_datasets; i++)
        for (int j = 0; j < first[i].n_metrics; j++) {
            const char *metric = first[i].metrics[j].name;
            if (s_is_stderr(metric))
                continue;
            s_pad(out, first[i].name, wd + 2);
            s_pad(out, metric, wm + 2);
            for (int k = 0; k < r->n_models; k++) {
                char cell[96];
                s_cell(&r->models[k].datasets[i], metric, cell, sizeof cell);
                s_pad(out, cell, wv + 2);
            }
            fputc('\n', out);
        }
}

/* ---- the results JSON ------------------------------------------------------------------------ */

static cJSON *s_model_json(const bt_harness_result *r, const bt_harness_model *m, bool *ok) {
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)m->hash);
    cJSON *o = cJSON_CreateObject(), *results = cJSON_CreateObject(),
          *timings = cJSON_CreateObject(), *cached = cJSON_CreateArray();
    for (int i = 0; i < r->cfg.eval.n_datasets; i++) {
        const bt_harness_dataset *ds = &m->datasets[i];
        s_add(results, ds->name, s_metrics_json(ds, ok), ok);
        s_add(timings, ds->name, s_number(ds->seconds), ok);
        cJSON *name = ds->cached ? cJSON_CreateString(ds->name) : NULL;
        if (ds->cached && !(name && cJSON_AddItemToArray(cached, name)))
            *ok = false;
    }
    s_add(timings, "total", s_number(m->seconds), ok);
    s_add(o, "model", cJSON_CreateString(m->path), ok);
    s_add(o, "hash", cJSON_CreateString(hash), ok);
    s_add(o, "results", results, ok);
    s_add(o, "timings", timings, ok);
    s_add(o, "cached", cached, ok);
    return o;
}

bt_status bt_harness_write_json(const bt_harness_result *r, const char *path) {
    bool ok = true;
    cJSON *root = cJSON_CreateObject(), *models = cJSON_CreateArray();
    char *config = bt_config_to_json(&r->cfg);
    s_add(root, "mode", cJSON_CreateString(bt_harness_mode_name(r->mode)), &ok);
    s_add(root, "config", config ? cJSON_Parse(config) : NULL, &ok);
    free(config);
    for (int k = 0; k < r->n_models; k++) {
        cJSON *m = s_model_json(r, &r->models[k], &ok);
        if (!m || !models || !cJSON_AddItemToArray(models, m)) {
            cJSON_Delete(m);
            ok = false;
        }
    }
    cJSON *results = cJSON_Duplicate(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(models, 0), "results"), true);
    s_add(root, "models", models, &ok);
    s_add(root, "results", results, &ok);
    return s_write_json(path, root, ok);
}

/* ---- the regression gate --------------------------------------------------------------------- */

typedef enum { S_INFO = 0, S_HIGHER = 1, S_LOWER = 2 } s_direction;

static bool s_starts(const char *s, const char *prefix) {
    return !strncmp(s, prefix, strlen(prefix));
}

static s_direction s_direction_of(const char *name) {
    size_t n = strlen(name);
    if (s_is_stderr(name))
        return S_INFO;
    if (!strcmp(name, "perplexity") || !strcmp(name, "nll_per_token"))
        return S_LOWER;
    if (!strcmp(name, "accuracy") || !strcmp(name, "reward_mean") ||
        !strcmp(name, "pairs_accuracy") || s_starts(name, "pass@") || s_starts(name, "maj@") ||
        s_starts(name, "robust."))
        return S_HIGHER;
    if (s_starts(name, "probe.") && n > 11 && !strcmp(name + n - 5, ".logp"))
        return S_HIGHER;
    return S_INFO;
}

static const bt_eval_metric *s_current(const bt_harness_result *r, const char *dataset,
                                       const char *metric) {
    for (int i = 0; i < r->cfg.eval.n_datasets; i++)
        if (!strcmp(r->models[0].datasets[i].name, dataset))
            return s_find(&r->models[0].datasets[i], metric);
    return NULL;
}

/*  One row of the gate table; returns true for a regression. */
static bool s_gate_row(FILE *table, const char *dataset, const char *metric, double base,
                       double cur, double max_drop) {
    s_direction dir = s_direction_of(metric);
    const char *status = "info";
    char delta[32] = "-", b[32] = "-", c[32] = "-";
    if (isfinite(base) && isfinite(cur) && dir == S_LOWER && base != 0)
        snprintf(delta, sizeof delta, "%+.2f%%", 100 * (cur - base) / fabs(base));
    else if (isfinite(base) && isfinite(cur))
        snprintf(delta, sizeof delta, "%+.6g", cur - base);
    if (dir != S_INFO && isfinite(base) && !isfinite(cur))
        status = "missing";
    else if (dir != S_INFO && isfinite(base)) {
        /* higher is better: absolute drop; lower is better: relative rise */
        double drop = dir == S_HIGHER ? base - cur : (cur - base) / (base != 0 ? fabs(base) : 1);
        status = drop > max_drop ? "DROP" : "ok";
    }
    if (isfinite(base))
        snprintf(b, sizeof b, "%.6g", base);
    if (isfinite(cur))
        snprintf(c, sizeof c, "%.6g", cur);
    fprintf(table, "%-16s %-26s %14s %14s %14s  %s\n", dataset, metric, b, c, delta, status);
    return !strcmp(status, "DROP") || !strcmp(status, "missing");
}

bt_status bt_harness_gate(const bt_harness_result *r, const char *baseline_path, double max_drop,
                          FILE *table, int *regressions) {
    BT_ASSERT(r && r->n_models >= 1 && regressions);
    *regressions = 0;
    char *text = NULL;
    BT_TRY(bt_file_read(baseline_path, (size_t)64 << 20, &text, NULL));
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(root, "results"), *ds, *v;
    if (!cJSON_IsObject(results)) {
        cJSON_Delete(root);
        return bt_fail(BT_EFORMAT, "%s: expected a JSON object with a \"results\" object",
                       baseline_path);
    }
    fprintf(table, "%-16s %-26s %14s %14s %14s  %s\n", "dataset", "metric", "baseline", "current",
            "delta", "status");
    cJSON_ArrayForEach(ds, results) {
        if (!cJSON_IsObject(ds))
            continue;
        cJSON_ArrayForEach(v, ds) {
            const bt_eval_metric *cur = s_current(r, ds->string, v->string);
            *regressions +=
                s_gate_row(table, ds->string, v->string, cJSON_IsNumber(v) ? v->valuedouble : NAN,
                           cur ? cur->value : NAN, max_drop);
        }
    }
    cJSON_Delete(root);
    return BT_OK;
}
