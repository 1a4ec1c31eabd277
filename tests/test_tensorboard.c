/*  test_tensorboard.c — run.tensorboard: a real run writes TensorBoard event files under
    RUN_DIR/tb/, and a reader written here from the published formats (TFRecord framing with its
    masked CRC-32C; the protobuf wire format walked field by field, the field numbers those of
    the .proto files of tests/data/tensorboard/) finds every numeric field of every train and eval
    line of metrics.jsonl as a scalar at its step with its value (float32), and every events.jsonl
    line as a text.  After a resume, what TensorBoard shows (each new record preempts the records
    of its tag at its step or later, files read in name order) is metrics.jsonl again, no step
    twice, also when a resume turns run.tensorboard on.  With variants, each has its own directory.
   A byte flipped in a copy is reported as a CRC error; --overwrite removes the old files.
   tests/ref/tensorboard_decode.py decodes the same files with Google's protobuf runtime against the
   vendored .proto files; without python3-protobuf that part is skipped and the test exits 77 (when
   all else passed). */
#define _DEFAULT_SOURCE
#include "baton/runlog.h"
#include "baton/tensorboard.h"
#include "baton/tfrecord.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char s_tmp[64];

static const char s_small[] =
    "{\"run\": {\"name\": \"small\", \"tensorboard\": true}," RUNS_MODEL_TINY
    " \"task\": {\"digits\": 1, \"heldout_size\": 4},"
    " \"grpo\": {\"steps\": 2, \"group_size\": 2, \"prompts_per_step\": 2, \"max_new_tokens\": 2},"
    " \"eval\": {\"heldout_count\": 4}, \"checkpoint\": {\"full_every_steps\": 1}}";

static const char s_variants[] =
    "{\"run\": {\"name\": \"two\", \"tensorboard\": true}," RUNS_MODEL_TINY
    " \"task\": {\"digits\": 1, \"heldout_size\": 4},"
    " \"sft\": {\"steps\": 2, \"batch_size\": 4, \"eval_every\": 1},"
    " \"grpo\": {\"steps\": 2, \"group_size\": 2, \"prompts_per_step\": 2, \"max_new_tokens\": 2},"
    " \"eval\": {\"heldout_count\": 4},"
    " \"variants\": [{\"name\": \"base\"}, {\"name\": \"hot\", \"set\": {\"grpo.lr\": 0.003}}]}";

/* ---- the reader: CRC-32C, TFRecord framing, protobuf fields ---------------------------------- */

/*  CRC-32C bit by bit (RFC 3720 B.4: reflected polynomial 0x82F63B78), no table. */
static uint32_t s_crc(const uint8_t *p, size_t n) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ ((crc & 1) ? 0x82f63b78u : 0);
    }
    return ~crc;
}

static uint32_t s_masked(uint32_t crc) {
    return (uint32_t)(((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

static uint64_t s_le(const uint8_t *p, int n) {
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--)
        x = (x << 8) | p[i];
    return x;
}

typedef struct {
    char tag[256];
    int64_t step;
    double wall_time;
    bool text;
    float value; /* scalars */
    char *body;  /* texts (heap) */
    char plugin[32];
} s_value;

typedef struct {
    char path[PATH_MAX];
    char dir[64]; /* "" for RUN_DIR/tb/, else the variant */
    int records;
    char file_version[64];
    int n_starts;
    int64_t start_step;
    double wall_min, wall_max;
    s_value *v;
    int n_v;
    char error[256]; /* "" when every record read */
} s_file;

/*  A varint from [*p, end): 7 bits a byte, low bits first, the top bit set on all but the last. */
static bool s_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t x = 0;
    for (int shift = 0;; shift += 7) {
        if (*p >= end || shift > 63)
            return false;
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
    }
    *out = x;
    return true;
}

/*  One protobuf field from [*p, end): its number, wire type, and value (varint, fixed) or bytes. */
static bool s_field(const uint8_t **p, const uint8_t *end, int *num, int *wire, uint64_t *val,
                    const uint8_t **bytes, size_t *len) {
    uint64_t key;
    if (!s_varint(p, end, &key))
        return false;
    *num = (int)(key >> 3);
    *wire = (int)(key & 7);
    if (*wire == 0 || *wire == 2) {
        if (!s_varint(p, end, val))
            return false;
        if (*wire == 2) {
            if (*val > (uint64_t)(end - *p))
                return false;
            *bytes = *p;
            *len = (size_t)*val;
            *p += *val;
        }
        return true;
    }
    int n = *wire == 1 ? 8 : *wire == 5 ? 4 : 0;
    if (!n || end - *p < n)
        return false;
    *val = s_le(*p, n);
    *p += n;
    return true;
}

/*  The string field num of the message [p, p + n) (the last one), into out. */
static void s_string_of(const uint8_t *p, size_t n, int want, char *out, size_t cap) {
    const uint8_t *end = p + n, *b;
    int num, wire;
    uint64_t val;
    size_t len;
    while (p < end && s_field(&p, end, &num, &wire, &val, &b, &len))
        if (num == want && wire == 2)
            snprintf(out, cap, "%.*s", (int)len, (const char *)b);
}

/*  A Summary.Value: tag 1, simple_value 2, tensor 8 {dtype 1, tensor_shape 2, string_val 8},
    metadata 9 {plugin_data 1 {plugin_name 1}}. */
static bool s_value_of(const uint8_t *p, size_t n, s_value *v) {
    const uint8_t *end = p + n, *b;
    int num, wire;
    uint64_t val;
    size_t len;
    memset(v, 0, sizeof *v);
    bool simple = false;
    while (p < end) {
        if (!s_field(&p, end, &num, &wire, &val, &b, &len))
            return false;
        if (num == 1 && wire == 2)
            snprintf(v->tag, sizeof v->tag, "%.*s", (int)len, (const char *)b);
        else if (num == 2 && wire == 5) {
            uint32_t u = (uint32_t)val;
            memcpy(&v->value, &u, 4);
            simple = true;
        } else if (num == 9 && wire == 2) {
            const uint8_t *q = b, *qe = b + len, *pd;
            int n2, w2;
            uint64_t v2;
            size_t l2;
            while (q < qe && s_field(&q, qe, &n2, &w2, &v2, &pd, &l2))
                if (n2 == 1 && w2 == 2) /* plugin_data */
                    s_string_of(pd, l2, 1, v->plugin, sizeof v->plugin);
        } else if (num == 8 && wire == 2) {
            const uint8_t *q = b, *qe = b + len, *tb;
            int n2, w2;
            uint64_t v2, dtype = 0;
            size_t l2;
            int strings = 0;
            bool shape = false, dims = false;
            while (q < qe) {
                if (!s_field(&q, qe, &n2, &w2, &v2, &tb, &l2))
                    return false;
                if (n2 == 1 && w2 == 0)
                    dtype = v2;
                else if (n2 == 2 && w2 == 2) {
                    shape = true;
                    dims = l2 > 0; /* a scalar's shape has no dim */
                } else if (n2 == 8 && w2 == 2) {
                    strings++;
                    free(v->body);
                    v->body = malloc(l2 + 1);
                    memcpy(v->body, tb, l2);
                    v->body[l2] = '\0';
                }
            }
            if (dtype != 7 || !shape || dims || strings != 1) /* DT_STRING, a scalar */
                return false;
            v->text = true;
        }
    }
    return simple || v->text;
}

/*  An Event: wall_time 1 (double), step 2, file_version 3, summary 5 {value 1}, session_log 7
    {status 1}; appends its values to f. */
static bool s_event_of(const uint8_t *p, size_t n, s_file *f) {
    const uint8_t *end = p + n, *b;
    int num, wire;
    uint64_t val;
    size_t len;
    double wall = NAN;
    int64_t step = 0;
    const uint8_t *summary = NULL, *session = NULL;
    size_t summary_len = 0, session_len = 0;
    while (p < end) {
        if (!s_field(&p, end, &num, &wire, &val, &b, &len))
            return false;
        if (num == 1 && wire == 1)
            memcpy(&wall, &val, 8);
        else if (num == 2 && wire == 0)
            step = (int64_t)val;
        else if (num == 3 && wire == 2)
            snprintf(f->file_version, sizeof f->file_version, "%.*s", (int)len, (const char *)b);
        else if (num == 5 && wire == 2)
            summary = b, summary_len = len;
        else if (num == 7 && wire == 2)
            session = b, session_len = len;
    }
    if (!isfinite(wall))
        return false;
    f->wall_min = f->records == 0 ? wall : fmin(f->wall_min, wall);
    f->wall_max = f->records == 0 ? wall : fmax(f->wall_max, wall);
    if (session) {
        const uint8_t *q = session, *qe = session + session_len;
        while (q < qe && s_field(&q, qe, &num, &wire, &val, &b, &len))
            if (num == 1 && wire == 0 && val == 1) { /* START */
                f->n_starts++;
                f->start_step = step;
            }
    }
    for (const uint8_t *q = summary, *qe = summary + summary_len; summary && q < qe;) {
        if (!s_field(&q, qe, &num, &wire, &val, &b, &len))
            return false;
        if (num != 1 || wire != 2)
            continue;
        f->v = realloc(f->v, (size_t)(f->n_v + 1) * sizeof *f->v);
        s_value *v = &f->v[f->n_v];
        if (!s_value_of(b, len, v))
            return false;
        v->step = step;
        v->wall_time = wall;
        f->n_v++;
    }
    return true;
}

/*  Reads every record of the file at path into f; f->error says what stopped it. */
static void s_read(const char *path, const char *dir, s_file *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    char *blob = NULL;
    size_t n = 0;
    if (bt_file_read(path, 1 << 26, &blob, &n) != BT_OK) {
        snprintf(f->error, sizeof f->error, "cannot read");
        return;
    }
    const uint8_t *p = (const uint8_t *)blob;
    for (size_t at = 0; at < n;) {
        if (n - at < 12) {
            snprintf(f->error, sizeof f->error, "byte %zu: a cut header", at);
            break;
        }
        uint64_t len = s_le(p + at, 8);
        if ((uint32_t)s_le(p + at + 8, 4) != s_masked(s_crc(p + at, 8))) {
            snprintf(f->error, sizeof f->error, "byte %zu: length CRC mismatch", at);
            break;
        }
        if (len > n - at - 12 || n - at - 12 - len < 4) {
            snprintf(f->error, sizeof f->error, "byte %zu: a cut record", at);
            break;
        }
        if ((uint32_t)s_le(p + at + 12 + len, 4) != s_masked(s_crc(p + at + 12, len))) {
            snprintf(f->error, sizeof f->error, "byte %zu: data CRC mismatch", at);
            break;
        }
        if (!s_event_of(p + at + 12, len, f)) {
            snprintf(f->error, sizeof f->error, "byte %zu: not an Event", at);
            break;
        }
        f->records++;
        at += 16 + len;
    }
    free(blob);
}

static void s_free(s_file *f) {
    for (int i = 0; i < f->n_v; i++)
        free(f->v[i].body);
    free(f->v);
    f->v = NULL;
    f->n_v = 0;
}

static int s_cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*  Every event file under RUN_DIR/tb/ (and its subdirectories), read: per directory in name
    order.  Returns how many (at most cap). */
static int s_read_all(const char *run, s_file *files, int cap) {
    char tb[PATH_MAX / 2];
    snprintf(tb, sizeof tb, "%s/tb", run);
    char *names[256];
    int n_names = 0, n = 0;
    DIR *top = opendir(tb);
    CHECK(top != NULL);
    for (struct dirent *e; top && (e = readdir(top)) && n_names < 256;) {
        if (e->d_name[0] == '.')
            continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", tb, e->d_name);
        DIR *sub = opendir(path);
        if (!sub) { /* a file of RUN_DIR/tb/ itself */
            names[n_names++] = strdup(e->d_name);
            continue;
        }
        for (struct dirent *s; (s = readdir(sub)) && n_names < 256;) {
            if (s->d_name[0] == '.')
                continue;
            char rel[PATH_MAX / 4];
            snprintf(rel, sizeof rel, "%.255s/%.255s", e->d_name, s->d_name);
            names[n_names++] = strdup(rel);
        }
        closedir(sub);
    }
    if (top)
        closedir(top);
    qsort(names, (size_t)n_names, sizeof *names, s_cmp_str);
    for (int i = 0; i < n_names; i++) {
        char path[PATH_MAX], dir[64] = "";
        snprintf(path, sizeof path, "%s/%.1023s", tb, names[i]);
        const char *slash = strchr(names[i], '/');
        if (slash)
            snprintf(dir, sizeof dir, "%.*s", (int)(slash - names[i]), names[i]);
        const char *base = slash ? slash + 1 : names[i];
        CHECK(strncmp(base, "events.out.tfevents.", 20) == 0);
        if (n < cap)
            s_read(path, dir, &files[n++]);
        free(names[i]);
    }
    return n;
}

/* ---- what metrics.jsonl and events.jsonl say the files must hold ----------------------------- */

typedef struct {
    char dir[64];
    char tag[256];
    int64_t step;
    float value;
} s_point;

/*  Every numeric field (but the step) of every train, eval and SFT line of metrics.jsonl, in
    order, with the tag it is to have: train/<field>, sft/<field>, eval/<dataset>/<field>, and
    <phase>/eval/<dataset>/<field> for evaluations outside the RL phase. */
static int s_expected(const char *run, s_point *out, int cap) {
    char path[PATH_MAX], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    CHECK(bt_file_read(path, 1 << 24, &text, NULL) == BT_OK);
    int n = 0, lines = 0;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(l);
        CHECK(o != NULL);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(o, "kind"));
        const char *variant = cJSON_GetStringValue(cJSON_GetObjectItem(o, "variant"));
        const char *ds = cJSON_GetStringValue(cJSON_GetObjectItem(o, "dataset"));
        const char *phase = cJSON_GetStringValue(cJSON_GetObjectItem(o, "phase"));
        CHECK(kind && variant &&
              (!strcmp(kind, "train") || !strcmp(kind, "eval") || !strcmp(kind, "sft")));
        /* TensorBoard's step is the line's global_step (monotonic over SFT and RL), else step */
        const cJSON *step = cJSON_GetObjectItem(o, "global_step");
        if (!step)
            step = cJSON_GetObjectItem(o, "step");
        CHECK(cJSON_IsNumber(step));
        for (const cJSON *v = o ? o->child : NULL; v && kind && variant && step; v = v->next) {
            if (!cJSON_IsNumber(v) || !strcmp(v->string, "step") ||
                !strcmp(v->string, "global_step"))
                continue;
            CHECK(n < cap);
            if (n >= cap)
                break;
            s_point *p = &out[n++];
            snprintf(p->dir, sizeof p->dir, "%s", variant);
            if (strcmp(kind, "eval"))
                snprintf(p->tag, sizeof p->tag, "%s/%s", kind, v->string);
            else if (!phase || !strcmp(phase, "rl"))
                snprintf(p->tag, sizeof p->tag, "eval/%s/%s", ds ? ds : "?", v->string);
            else
                snprintf(p->tag, sizeof p->tag, "%s/eval/%s/%s", phase, ds ? ds : "?", v->string);
            p->step = (int64_t)step->valuedouble;
            p->value = (float)v->valuedouble;
        }
        lines++;
        cJSON_Delete(o);
    }
    CHECK(lines >= 3); /* two train lines, evaluations */
    free(text);
    return n;
}

/*  What TensorBoard shows of files (in name order) for one directory: each scalar record preempts
    the points of its tag at its step or later (tensorboard/data/server/reservoir.rs, and the
    SessionLog START purge of the Python loader), then is added.  out holds the points left, in
    order. */
static int s_shown(const s_file *files, int n_files, const char *dir, s_point *out, int cap) {
    int n = 0;
    for (int i = 0; i < n_files; i++) {
        if (strcmp(files[i].dir, dir))
            continue;
        for (int k = 0; k < files[i].n_v; k++) {
            const s_value *v = &files[i].v[k];
            if (v->text)
                continue;
            int kept = 0;
            for (int j = 0; j < n; j++)
                if (strcmp(out[j].tag, v->tag) || out[j].step < v->step)
                    out[kept++] = out[j];
            n = kept;
            if (n < cap) {
                snprintf(out[n].dir, sizeof out[n].dir, "%s", dir);
                snprintf(out[n].tag, sizeof out[n].tag, "%s", v->tag);
                out[n].step = v->step;
                out[n].value = v->value;
                n++;
            }
        }
    }
    return n;
}

/*  The points of want (of dir) and got are the same multiset of (tag, step, value). */
static void s_check_same(const s_point *want, int n_want, const char *dir, const s_point *got,
                         int n_got) {
    int count = 0;
    bool *used = calloc((size_t)n_got + 1, 1);
    for (int i = 0; i < n_want; i++) {
        if (strcmp(want[i].dir, dir))
            continue;
        count++;
        bool found = false;
        for (int j = 0; j < n_got && !found; j++)
            if (!used[j] && !strcmp(got[j].tag, want[i].tag) && got[j].step == want[i].step &&
                memcmp(&got[j].value, &want[i].value, sizeof(float)) == 0)
                found = used[j] = true;
        if (!found)
            fprintf(stderr, "missing: %s %s step %lld = %.9g\n", dir, want[i].tag,
                    (long long)want[i].step, want[i].value);
        CHECK(found);
    }
    CHECK(count > 0 && count == n_got);
    free(used);
}

/*  Every line of events.jsonl is in the newest text of its tag and step in the files of
    RUN_DIR/tb/<variant>/ when it names a variant, else of RUN_DIR/tb/ itself. */
static void s_check_events(const char *run, const s_file *files, int n_files) {
    char path[PATH_MAX], *text = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", run);
    CHECK(bt_file_read(path, 1 << 24, &text, NULL) == BT_OK);
    int lines = 0;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(l);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(o, "event"));
        const char *variant = cJSON_GetStringValue(cJSON_GetObjectItem(o, "variant"));
        const cJSON *step = cJSON_GetObjectItem(o, "step");
        CHECK(kind != NULL);
        char tag[256];
        snprintf(tag, sizeof tag, "events/%s", kind ? kind : "?");
        int64_t s = cJSON_IsNumber(step) ? (int64_t)step->valuedouble : 0;
        const s_value *last = NULL; /* the text TensorBoard keeps: the newest at that step */
        for (int i = 0; i < n_files; i++)
            for (int k = 0; !strcmp(files[i].dir, variant ? variant : "") && k < files[i].n_v; k++)
                if (files[i].v[k].text && !strcmp(files[i].v[k].tag, tag) &&
                    files[i].v[k].step == s)
                    last = &files[i].v[k];
        CHECK(last != NULL && strstr(last->body, l) != NULL && !strcmp(last->plugin, "text"));
        if (!last || !strstr(last->body, l))
            fprintf(stderr, "event not shown: %s\n", l);
        lines++;
        cJSON_Delete(o);
    }
    CHECK(lines >= 3);
    free(text);
}

/*  The properties of every file: whole records, the file_version first, a session START at step
    0, wall times of when it was written, scalars with the scalars plugin. */
static void s_check_files(const s_file *files, int n, time_t before, time_t after) {
    for (int i = 0; i < n; i++) {
        const s_file *f = &files[i];
        if (f->error[0])
            fprintf(stderr, "%s: %s\n", f->path, f->error);
        CHECK(f->error[0] == '\0');
        CHECK_STR_EQ(f->file_version, "brain.Event:2");
        CHECK(f->n_starts == 1 && f->start_step == 0);
        CHECK(f->records >= 2);
        CHECK(f->wall_min >= (double)before - 1 && f->wall_max <= (double)after + 1);
        for (int k = 0; k < f->n_v; k++)
            CHECK(!strcmp(f->v[k].plugin, f->v[k].text ? "text" : "scalars"));
    }
}

static int s_baton(const char *args) {
    char cmd[PATH_MAX * 2], out[16384];
    snprintf(cmd, sizeof cmd, "cd %s && %s run %s 2>&1", s_tmp, getenv("BATON_BIN"), args);
    int rc = runs_capture(cmd, out, sizeof out);
    if (rc != 0)
        fprintf(stderr, "baton run %s: exit %d\n%s\n", args, rc, out);
    return rc;
}

/* ---- python3-protobuf: the same files through Google's decoder ------------------------------- */

/*  Runs tests/ref/tensorboard_decode.py over files; returns its exit status, its JSON in *doc.
    corrupt: the files are expected to be refused (its message goes to stderr as it is). */
static int s_python(const s_file *files, int n, cJSON **doc, bool corrupt) {
    const char *src = getenv("BATON_SOURCE_DIR");
    size_t cap = (size_t)n * PATH_MAX + 2 * PATH_MAX;
    char *cmd = malloc(cap), *out = malloc(1 << 22);
    int len = snprintf(
        cmd, cap, "/usr/bin/python3 %s/tests/ref/tensorboard_decode.py %s/tests/data/tensorboard",
        src ? src : "..", src ? src : "..");
    for (int i = 0; i < n; i++)
        len += snprintf(cmd + len, cap - (size_t)len, " '%s'", files[i].path);
    int rc = runs_capture(cmd, out, 1 << 22);
    *doc = rc == 0 ? cJSON_Parse(out) : NULL;
    if (rc != 0 && rc != 77 && !corrupt)
        fprintf(stderr, "tensorboard_decode.py: exit %d: %s\n", rc, out);
    if (rc == 77)
        printf("%s", out);
    free(cmd);
    free(out);
    return rc;
}

/*  The decoder's view of each file equals the reader's: records, version, starts, every value. */
static void s_check_python(const s_file *files, int n, const cJSON *doc) {
    const cJSON *list = cJSON_GetObjectItem(doc, "files");
    CHECK(cJSON_GetArraySize(list) == n);
    for (int i = 0; i < n && i < cJSON_GetArraySize(list); i++) {
        const s_file *f = &files[i];
        const cJSON *o = cJSON_GetArrayItem(list, i);
        CHECK(cJSON_GetObjectItem(o, "records")->valuedouble == f->records);
        CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(o, "file_version")), "brain.Event:2");
        const cJSON *starts = cJSON_GetObjectItem(o, "session_starts");
        CHECK(cJSON_GetArraySize(starts) == 1 && cJSON_GetArrayItem(starts, 0)->valuedouble == 0);
        const cJSON *sc = cJSON_GetObjectItem(o, "scalars"), *tx = cJSON_GetObjectItem(o, "texts");
        int n_sc = 0, n_tx = 0;
        for (int k = 0; k < f->n_v; k++) {
            const s_value *v = &f->v[k];
            const cJSON *e = cJSON_GetArrayItem(v->text ? tx : sc, v->text ? n_tx++ : n_sc++);
            CHECK(e != NULL);
            if (!e)
                continue;
            CHECK_STR_EQ(cJSON_GetArrayItem(e, 0)->valuestring, v->tag);
            CHECK(cJSON_GetArrayItem(e, 1)->valuedouble == (double)v->step);
            if (v->text) {
                CHECK_STR_EQ(cJSON_GetArrayItem(e, 2)->valuestring, v->body);
            } else {
                CHECK(cJSON_GetArrayItem(e, 2)->valuedouble == (double)v->value);
            }
            CHECK_STR_EQ(cJSON_GetArrayItem(e, 3)->valuestring, v->plugin);
        }
        CHECK(cJSON_GetArraySize(sc) == n_sc && cJSON_GetArraySize(tx) == n_tx);
    }
}

/*  The writer on a run log of its own, its calls made here: a line another thread wrote before a
    rebuild read the file, and handed over after it, is written once; a cut starts new files; an
    evaluation or event that comes after a later step's of its tag is shown, the later one too
    (TensorBoard would drop it). */
static void s_check_sink(void) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/sink", s_tmp);
    bt_runlog_t *log = bt_runlog_open(dir, "{}\n");
    bt_tensorboard_t *tb = bt_tensorboard_new(dir);
    CHECK(log && tb);
    if (!log || !tb)
        return;
    bt_runlog_sink sink = bt_tensorboard_sink(tb);
    CHECK_OK(bt_runlog_add_sink(log, sink));
    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "train");
    bt_jsonl_int(&line, "step", 1);
    bt_jsonl_str(&line, "variant", "main");
    bt_jsonl_num(&line, "loss", 0.5);
    CHECK_OK(bt_runlog_metric(log, &line));
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "event", "worker_refused");
    bt_jsonl_num(&line, "time", 0.25);
    CHECK_OK(bt_runlog_event(log, &line));
    /* the late one: in events.jsonl, its sink call still to come */
    static const char late[] = "{\"event\":\"worker_refused\",\"time\":0.5}";
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    FILE *f = fopen(path, "a");
    CHECK(f && fprintf(f, "%s\n", late) > 0 && fclose(f) == 0);
    CHECK_OK(bt_runlog_truncate_metrics(log, bt_runlog_metrics_size(log))); /* a cut: rewound */
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "train");
    bt_jsonl_int(&line, "step", 2);
    bt_jsonl_str(&line, "variant", "main");
    bt_jsonl_num(&line, "loss", 0.25);
    CHECK_OK(bt_runlog_metric(log, &line)); /* new files: both train lines, both events */
    sink.line(sink.user, false, late, strlen(late));
    for (int i = 0; i < 400; i++) { /* 400 events of a kind at one step: the newest 16 KiB shown */
        char who[64];
        snprintf(who, sizeof who, "rollout-%03d", i);
        bt_jsonl_init(&line);
        bt_jsonl_str(&line, "event", "worker_joined");
        bt_jsonl_num(&line, "time", 1 + i);
        bt_jsonl_str(&line, "worker", who);
        CHECK_OK(bt_runlog_event(log, &line));
    }
    for (int i = 0; i < 2; i++) { /* events of one kind at steps 5, then 3 */
        bt_jsonl_init(&line);
        bt_jsonl_str(&line, "event", "rollback");
        bt_jsonl_num(&line, "time", 500 + i);
        bt_jsonl_int(&line, "step", 5 - 2 * i);
        CHECK_OK(bt_runlog_event(log, &line));
    }
    for (int i = 0; i < 2; i++) { /* evaluations of steps 4 and 2, finished in that order */
        bt_jsonl_init(&line);
        bt_jsonl_str(&line, "kind", "eval");
        bt_jsonl_str(&line, "phase", "rl");
        bt_jsonl_int(&line, "step", 4 - 2 * i);
        bt_jsonl_str(&line, "variant", "main");
        bt_jsonl_str(&line, "dataset", "heldout");
        bt_jsonl_num(&line, "accuracy", 0.75 - 0.5 * i);
        CHECK_OK(bt_runlog_metric(log, &line));
    }
    bt_runlog_destroy(&log);
    bt_tensorboard_destroy(&tb);
    CHECK(tb == NULL);
    s_file files[8];
    int n = s_read_all(dir, files, 8);
    /* tb/ and tb/main/, each a file before the cut, one after, one written sorted when the step-3
       event came after step 5's, and one more when the step-2 evaluation came after step 4's */
    CHECK(n == 8);
    int texts = 0, late_seen = 0, shown = 0;
    for (int i = 0; i < n; i++) {
        CHECK(files[i].error[0] == '\0');
        if (i != 3 && i != 7) /* the newest of each directory */
            continue;
        const s_value *joined = NULL, *refused = NULL;
        for (int k = 0; k < files[i].n_v; k++) {
            const s_value *v = &files[i].v[k];
            if (v->text && !strcmp(v->tag, "events/worker_joined"))
                joined = v;
            if (!v->text || strcmp(v->tag, "events/worker_refused"))
                continue;
            texts++;
            refused = v;
        }
        for (const char *at = refused ? refused->body : ""; (at = strstr(at, late)); at++)
            late_seen++; /* in the newest text of the tag */
        if (i == 3) {    /* whole lines, the newest ones, at most 16 KiB */
            CHECK(joined && strlen(joined->body) <= 16 * 1024);
            CHECK(joined && !strncmp(joined->body, "    {\"event\":\"worker_joined\",", 29));
            CHECK(joined && strstr(joined->body, "rollout-399") &&
                  !strstr(joined->body, "rollout-000"));
        }
    }
    CHECK(texts == 2 && late_seen == 1);
    s_point got[8], want[4] = {{"main", "train/loss", 1, 0.5f},
                               {"main", "train/loss", 2, 0.25f},
                               {"main", "eval/heldout/accuracy", 4, 0.75f},
                               {"main", "eval/heldout/accuracy", 2, 0.25f}};
    shown = s_shown(files, n, "main", got, 8);
    s_check_same(want, 4, "main", got, shown);
    int64_t steps[8]; /* the rollback texts TensorBoard keeps: each preempts its step and later */
    int n_steps = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; !files[i].dir[0] && k < files[i].n_v; k++) {
            const s_value *v = &files[i].v[k];
            if (!v->text || strcmp(v->tag, "events/rollback"))
                continue;
            int kept = 0;
            for (int j = 0; j < n_steps; j++)
                if (steps[j] < v->step)
                    steps[kept++] = steps[j];
            n_steps = kept;
            if (n_steps < 8)
                steps[n_steps++] = v->step;
        }
    CHECK(n_steps == 2 && steps[0] == 3 && steps[1] == 5);
    for (int i = 0; i < n; i++)
        s_free(&files[i]);
}

int main(void) {
    /* (a) CRC-32C: RFC 3720 B.4's vectors and the standard check value, and the reader's own */
    static const uint8_t zeros[32] = {0};
    uint8_t ones[32], up[32];
    for (int i = 0; i < 32; i++) {
        ones[i] = 0xff;
        up[i] = (uint8_t)i;
    }
    CHECK(bt_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(bt_crc32c(0, zeros, 32) == 0x8A9136AAu);
    CHECK(bt_crc32c(0, ones, 32) == 0x62A8AB43u);
    CHECK(bt_crc32c(0, up, 32) == 0x46DD794Eu);
    CHECK(bt_crc32c(bt_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u); /* continued */
    CHECK(s_crc((const uint8_t *)"123456789", 9) == 0xE3069283u && s_crc(zeros, 32) == 0x8A9136AAu);
    CHECK(bt_crc32c_mask(0xE3069283u) == s_masked(0xE3069283u));
    /* one record framed, read back by the reader */
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_tb_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char path[PATH_MAX], cmd[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/one.tfevents", s_tmp);
    FILE *f = fopen(path, "wb");
    bt_buf ev = {0};
    bt_tfevent_file_version(&ev, 1.5e9);
    CHECK(f && bt_tfrecord_write(f, ev.data, ev.len) == BT_OK);
    bt_buf_release(&ev);
    bt_tfevent_session_start(&ev, 1.5e9, 0);
    CHECK(f && bt_tfrecord_write(f, ev.data, ev.len) == BT_OK);
    bt_buf_release(&ev);
    bt_tfevent_scalar(&ev, 1.5e9 + 0.25, -3, "a/b", 0.1f);
    CHECK(f && bt_tfrecord_write(f, ev.data, ev.len) == BT_OK);
    bt_buf_release(&ev);
    bt_tfevent_text(&ev, 1.5e9 + 0.5, 1LL << 40, "t", "x\0y", 3);
    CHECK(f && bt_tfrecord_write(f, ev.data, ev.len) == BT_OK);
    bt_buf_release(&ev);
    CHECK(f && fclose(f) == 0);
    s_file one;
    s_read(path, "", &one);
    CHECK(one.error[0] == '\0' && one.records == 4 && one.n_v == 2);
    CHECK_STR_EQ(one.file_version, "brain.Event:2");
    CHECK(one.n_starts == 1 && one.start_step == 0);
    CHECK(one.wall_min == 1.5e9 && one.wall_max == 1.5e9 + 0.5);
    if (one.n_v == 2) {
        CHECK_STR_EQ(one.v[0].tag, "a/b");
        CHECK(one.v[0].step == -3 && one.v[0].value == 0.1f && !one.v[0].text);
        CHECK_STR_EQ(one.v[1].tag, "t");
        CHECK(one.v[1].step == 1LL << 40 && one.v[1].text && one.v[1].body[0] == 'x');
    }
    s_free(&one);

    s_check_sink();

    /* (b) a real run with run.tensorboard */
    snprintf(path, sizeof path, "%s/small.json", s_tmp);
    CHECK(bt_file_write(path, s_small, strlen(s_small)) == BT_OK);
    time_t before = time(NULL);
    CHECK(s_baton("small.json --run-dir out") == 0);
    time_t after = time(NULL);
    char run[PATH_MAX];
    snprintf(run, sizeof run, "%s/out", s_tmp);
    enum { CAP = 4096, FILES = 64 };
    s_file *files = calloc(FILES, sizeof *files);
    s_point *want = calloc(CAP, sizeof *want), *got = calloc(CAP, sizeof *got);
    int n_files = s_read_all(run, files, FILES);
    CHECK(n_files == 2); /* RUN_DIR/tb/ (the run's events), RUN_DIR/tb/main/ (its one variant) */
    s_check_files(files, n_files, before, after);
    int n_want = s_expected(run, want, CAP);
    int n_got = 0;
    for (int i = 0; i < n_files; i++) /* every record of the main file: no tag twice at a step */
        for (int k = 0; !strcmp(files[i].dir, "main") && k < files[i].n_v; k++) {
            const s_value *v = &files[i].v[k];
            CHECK(!v->text && n_got < CAP);
            for (int j = 0; j < n_got; j++)
                CHECK(strcmp(got[j].tag, v->tag) || got[j].step != v->step);
            snprintf(got[n_got].tag, sizeof got[n_got].tag, "%s", v->tag);
            got[n_got].step = v->step;
            got[n_got++].value = v->value;
        }
    s_check_same(want, n_want, "main", got, n_got);
    s_check_events(run, files, n_files);
    printf("fresh run: %d files, %d scalars (all %d numeric fields of metrics.jsonl)\n", n_files,
           n_got, n_want);
    for (int i = 0; i < n_files; i++)
        s_free(&files[i]);

    /* a resume: cut back to the step-2 checkpoint, a third step; new files that TensorBoard reads
       after the old ones and that replace them */
    before = time(NULL);
    CHECK(s_baton("small.json --run-dir out --resume --set grpo.steps=3") == 0);
    after = time(NULL);
    n_files = s_read_all(run, files, FILES);
    CHECK(n_files >= 4);
    n_want = s_expected(run, want, CAP);
    n_got = s_shown(files, n_files, "main", got, CAP);
    s_check_same(want, n_want, "main", got, n_got);
    bool step3 = false;
    for (int i = 0; i < n_want; i++)
        step3 |= want[i].step == 3;
    CHECK(step3);
    int newest = -1; /* the newest main file alone holds every point, each once */
    for (int i = 0; i < n_files; i++)
        if (!strcmp(files[i].dir, "main"))
            newest = i;
    CHECK(newest >= 0);
    if (newest >= 0) {
        int n_new = s_shown(files + newest, 1, "main", got, CAP);
        CHECK(n_new == files[newest].n_v); /* nothing preempted inside it */
        s_check_same(want, n_want, "main", got, n_new);
        CHECK(files[newest].wall_min >= (double)before - 1);
    }
    for (int i = 1; i < n_files; i++) /* names in a directory: seconds strictly increasing */
        if (!strcmp(files[i].dir, files[i - 1].dir)) {
            const char *a = strstr(files[i - 1].path, "tfevents.") + 9,
                       *b = strstr(files[i].path, "tfevents.") + 9;
            CHECK(strtoll(a, NULL, 10) < strtoll(b, NULL, 10));
        }
    s_check_events(run, files, n_files);
    printf("resumed: %d files; TensorBoard shows %d scalars, the %d of metrics.jsonl\n", n_files,
           n_got, n_want);

    /* a flipped byte in a copy: in a record's data, then in a length */
    s_file bad;
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s/copy.tfevents", s_tmp);
    char *blob = NULL;
    size_t len = 0;
    CHECK(newest >= 0 && bt_file_read(files[newest].path, 1 << 26, &blob, &len) == BT_OK);
    size_t first = blob ? 16 + (size_t)s_le((const uint8_t *)blob, 8) : 0; /* record 2 */
    CHECK(blob && len > first + 40);
    if (blob && len > first + 40) {
        blob[first + 14] ^= 0x20;
        CHECK(bt_file_write(copy, blob, len) == BT_OK);
        s_read(copy, "", &bad);
        CHECK_STR_CONTAINS(bad.error, "data CRC mismatch");
        CHECK(bad.records == 1);
        s_free(&bad);
        blob[first + 14] ^= 0x20;
        blob[first + 2] ^= 0x01;
        CHECK(bt_file_write(copy, blob, len) == BT_OK);
        s_read(copy, "", &bad);
        CHECK_STR_CONTAINS(bad.error, "length CRC mismatch");
        s_free(&bad);
        blob[first + 2] ^= 0x01;
        blob[first + 14] ^= 0x20; /* the decoder below is given the corrupt copy too */
        CHECK(bt_file_write(copy, blob, len) == BT_OK);
    }
    free(blob);

    /* run.tensorboard turned on by a resume (a key that may change then): the files hold the
       whole run, the steps before the resume too */
    CHECK(s_baton("small.json --run-dir late --set run.tensorboard=false") == 0);
    char late[PATH_MAX];
    snprintf(late, sizeof late, "%s/late/tb", s_tmp);
    CHECK(access(late, F_OK) != 0);
    CHECK(s_baton("small.json --run-dir late --resume --set grpo.steps=3") == 0);
    snprintf(late, sizeof late, "%s/late", s_tmp);
    s_file *lfiles = calloc(FILES, sizeof *lfiles);
    int n_lfiles = s_read_all(late, lfiles, FILES);
    CHECK(n_lfiles >= 2);
    n_want = s_expected(late, want, CAP);
    n_got = s_shown(lfiles, n_lfiles, "main", got, CAP);
    s_check_same(want, n_want, "main", got, n_got);
    bool step1 = false;
    for (int i = 0; i < n_got; i++)
        step1 |= got[i].step == 1 && !strncmp(got[i].tag, "train/", 6);
    CHECK(step1);
    s_check_events(late, lfiles, n_lfiles);
    printf("turned on at the resume: %d files; TensorBoard shows the %d scalars of metrics.jsonl\n",
           n_lfiles, n_got);
    for (int i = 0; i < n_lfiles; i++)
        s_free(&lfiles[i]);
    free(lfiles);

    /* variants and SFT: one directory per variant, each with its own lines; SFT lines and the
       SFT phase's evaluations under their own tags (their steps count SFT steps) */
    snprintf(path, sizeof path, "%s/variants.json", s_tmp);
    CHECK(bt_file_write(path, s_variants, strlen(s_variants)) == BT_OK);
    CHECK(s_baton("variants.json --run-dir vout") == 0);
    char vrun[PATH_MAX];
    snprintf(vrun, sizeof vrun, "%s/vout", s_tmp);
    s_file *vfiles = calloc(FILES, sizeof *vfiles);
    int n_vfiles = s_read_all(vrun, vfiles, FILES);
    CHECK(n_vfiles == 3); /* tb/, tb/base/, tb/hot/ */
    s_check_files(vfiles, n_vfiles, before, time(NULL));
    n_want = s_expected(vrun, want, CAP);
    const char *const names[] = {"base", "hot"};
    for (int k = 0; k < 2; k++) {
        int sft = 0, sft_eval = 0;
        for (int i = 0; i < n_want; i++)
            if (!strcmp(want[i].dir, names[k])) {
                sft += !strncmp(want[i].tag, "sft/", 4) && strncmp(want[i].tag, "sft/eval/", 9);
                sft_eval += !strncmp(want[i].tag, "sft/eval/", 9);
            }
        CHECK(sft > 0 && sft_eval > 0);
        n_got = s_shown(vfiles, n_vfiles, names[k], got, CAP);
        s_check_same(want, n_want, names[k], got, n_got);
        printf("variant %s: %d scalars (%d of SFT, %d of its evaluations)\n", names[k], n_got, sft,
               sft_eval);
    }
    s_check_events(vrun, vfiles, n_vfiles);
    for (int i = 0; i < n_vfiles && n_files < FILES; i++) /* the decoder reads these too */
        files[n_files++] = vfiles[i];
    free(vfiles);

    /* (c) Google's protobuf decoder, against the vendored .proto files */
    cJSON *doc = NULL;
    bool have_python = access("/usr/bin/python3", X_OK) == 0;
    if (!have_python)
        printf("SKIP: /usr/bin/python3 missing: the python3-protobuf decoder cannot run\n");
    int rc = have_python ? s_python(files, n_files, &doc, false) : 77;
    bool skipped = rc == 77;
    if (!skipped) {
        CHECK(rc == 0 && doc != NULL);
        if (doc)
            s_check_python(files, n_files, doc);
        s_file corrupt = {0};
        snprintf(corrupt.path, sizeof corrupt.path, "%s", copy);
        cJSON *none = NULL;
        CHECK(s_python(&corrupt, 1, &none, true) == 1); /* it finds the CRC mismatch too */
        cJSON_Delete(none);
    }
    cJSON_Delete(doc);
    for (int i = 0; i < n_files; i++)
        s_free(&files[i]);

    /* --overwrite removes RUN_DIR/tb/ with the other run files: the new run's files alone */
    CHECK(s_baton("small.json --run-dir out --overwrite") == 0);
    n_files = s_read_all(run, files, FILES);
    CHECK(n_files == 2);
    for (int i = 0; i < n_files; i++)
        s_free(&files[i]);
    free(files);
    free(want);
    free(got);
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    int st = check_exit();
    if (st == 0 && skipped)
        return 77;
    return st;
}
