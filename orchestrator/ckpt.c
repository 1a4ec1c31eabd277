/*  ckpt.c — checkpoint folders: snapshots, MANIFEST, save / verify / find, retention, and the
    background writer.  See ckpt.h for the layout on disk and the order of a save. */
#define _DEFAULT_SOURCE /* syscall(SYS_gettid) */
#define _POSIX_C_SOURCE 200809L
#include "baton/ckpt.h"

#include "baton/dtype.h"
#include "baton/fileio.h"
#include "baton/runlog.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum {
    S_PATH = 2048,            /* any path built here */
    S_MANIFEST_MAX = 1 << 16, /* largest MANIFEST read back */
    S_RESULTS = 16,           /* finished saves a writer holds until polled */
    S_STEP_DIGITS_MAX = 18,   /* step-N: N fits an int64_t */
};

#define S_TMP_PREFIX ".tmp-" /* everything a save leaves behind when it crashes */
#define S_TENSOR_SUFFIX ".safetensors"

/* ---- snapshots ------------------------------------------------------------------------------ */

/*  One file of a snapshot: text, or tensors (names and data owned). */
typedef struct {
    char name[BT_CKPT_NAME_MAX];
    char *text; /* NUL-terminated; NULL for a tensor file */
    size_t text_len;
    bt_st_tensor *tensors; /* (n) */
    int n;
    bool borrowed; /* tensor data belongs to the caller */
} s_file;

struct bt_ckpt_snapshot {
    int64_t step;
    bool full;
    int n_files;
    s_file files[BT_CKPT_MAX_FILES];
    size_t bytes;
};

static void s_file_release(s_file *f) {
    free(f->text);
    for (int i = 0; f->tensors && i < f->n; i++) {
        free((void *)f->tensors[i].name);
        if (!f->borrowed)
            free((void *)f->tensors[i].data);
    }
    free(f->tensors);
    memset(f, 0, sizeof *f);
}

bt_ckpt_snapshot_t *bt_ckpt_snapshot_new(int64_t step, bool full) {
    BT_ASSERT(step >= 0);
    bt_ckpt_snapshot_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "checkpoint snapshot: out of memory");
        return NULL;
    }
    self->step = step;
    self->full = full;
    return self;
}

void bt_ckpt_snapshot_destroy(bt_ckpt_snapshot_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_ckpt_snapshot_t *self = *self_p;
    for (int i = 0; i < self->n_files; i++)
        s_file_release(&self->files[i]);
    free(self);
    *self_p = NULL;
}

int64_t bt_ckpt_snapshot_step(const bt_ckpt_snapshot_t *self) {
    return self->step;
}
bool bt_ckpt_snapshot_is_full(const bt_ckpt_snapshot_t *self) {
    return self->full;
}
size_t bt_ckpt_snapshot_bytes(const bt_ckpt_snapshot_t *self) {
    return self->bytes;
}

static bool s_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/*  One part of a file name: letters, digits, '.', '_', '-', not starting with '.'. */
static bool s_part_ok(const char *part, size_t n) {
    if (n == 0 || part[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = part[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

/*  A file name as ckpt.h defines it: a plain name, or FOLDER/NAME (one folder level). */
static bool s_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n >= BT_CKPT_NAME_MAX || strcmp(name, "MANIFEST") == 0)
        return false;
    const char *slash = strchr(name, '/');
    if (!slash)
        return s_part_ok(name, n);
    size_t folder = (size_t)(slash - name);
    return s_part_ok(name, folder) && s_part_ok(slash + 1, n - folder - 1);
}

/*  Checks that name may be added as a new file of the kind given. */
static bt_status s_check_new_name(const bt_ckpt_snapshot_t *s, const char *name, bool tensors) {
    if (!name || !s_name_ok(name))
        return bt_fail(
            BT_EINVAL,
            "checkpoint file \"%s\": expected a plain file name or FOLDER/NAME (letters, "
            "digits, '.', '_', '-'; no part starting with '.'; not MANIFEST)",
            name ? name : "(null)");
    if (tensors != s_ends_with(name, S_TENSOR_SUFFIX))
        return bt_fail(BT_EINVAL, "checkpoint file \"%s\": %s", name,
                       tensors ? "tensor files are named *.safetensors"
                               : "*.safetensors names are for tensor files");
    for (int i = 0; i < s->n_files; i++)
        if (strcmp(s->files[i].name, name) == 0)
            return bt_fail(BT_EINVAL, "checkpoint file \"%s\": added twice", name);
    if (s->n_files == BT_CKPT_MAX_FILES)
        return bt_fail(BT_ERANGE, "checkpoint file \"%s\": more than %d files", name,
                       BT_CKPT_MAX_FILES);
    return BT_OK;
}

bt_status bt_ckpt_snapshot_add_text(bt_ckpt_snapshot_t *self, const char *name, const char *text) {
    BT_ASSERT(self && text);
    BT_TRY(s_check_new_name(self, name, false));
    s_file *f = &self->files[self->n_files];
    f->text_len = strlen(text);
    f->text = malloc(f->text_len + 1);
    if (!f->text)
        return bt_fail(BT_ENOMEM, "checkpoint file %s: out of memory", name);
    memcpy(f->text, text, f->text_len + 1);
    snprintf(f->name, sizeof f->name, "%s", name);
    self->n_files++;
    self->bytes += f->text_len;
    return BT_OK;
}

/*  Bytes of t's data (numel * element size) into *nbytes; false for a bad dtype or shape. */
static bool s_tensor_nbytes(const bt_st_tensor *t, size_t *nbytes) {
    if (!bt_dtype_code(t->dtype) || t->ndim < 0 || t->ndim > BT_MAX_DIMS)
        return false;
    size_t n = bt_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || (t->shape[d] > 0 && n > SIZE_MAX / (uint64_t)t->shape[d]))
            return false;
        n *= (size_t)t->shape[d];
    }
    *nbytes = n;
    return true;
}

static bt_status s_add_tensors(bt_ckpt_snapshot_t *self, const char *name,
                               const bt_st_tensor *tensors, int n, bool copy) {
    BT_ASSERT(self && (tensors || n <= 0));
    BT_TRY(s_check_new_name(self, name, true));
    if (n < 1)
        return bt_fail(BT_EINVAL, "checkpoint file %s: no tensors", name);
    s_file *f = &self->files[self->n_files];
    f->tensors = calloc((size_t)n, sizeof *f->tensors);
    if (!f->tensors)
        return bt_fail(BT_ENOMEM, "checkpoint file %s: out of memory", name);
    f->n = n;
    f->borrowed = !copy;
    size_t total = 0;
    bt_status rc = BT_OK;
    for (int i = 0; i < n && rc == BT_OK; i++) {
        const bt_st_tensor *src = &tensors[i];
        bt_st_tensor *dst = &f->tensors[i];
        size_t nbytes = 0;
        if (!src->name || !s_tensor_nbytes(src, &nbytes) || (nbytes > 0 && !src->data)) {
            rc = bt_fail(BT_EINVAL,
                         "checkpoint file %s: tensor %d (%s): bad name, dtype, shape or data", name,
                         i, src->name ? src->name : "(null)");
            break;
        }
        dst->dtype = src->dtype;
        dst->ndim = src->ndim;
        memcpy(dst->shape, src->shape, sizeof dst->shape);
        char *copy_name = malloc(strlen(src->name) + 1);
        void *copy_data = copy && nbytes ? malloc(nbytes) : NULL;
        dst->name = copy_name;
        dst->data = copy ? copy_data : src->data;
        if (!copy_name || (copy && nbytes && !copy_data)) {
            rc = bt_fail(BT_ENOMEM, "checkpoint file %s: out of memory", name);
            break;
        }
        strcpy(copy_name, src->name);
        if (copy && nbytes)
            memcpy(copy_data, src->data, nbytes);
        total += nbytes;
    }
    if (rc != BT_OK) {
        s_file_release(f);
        return rc;
    }
    snprintf(f->name, sizeof f->name, "%s", name);
    self->n_files++;
    self->bytes += total;
    return BT_OK;
}

bt_status bt_ckpt_snapshot_add_tensors(bt_ckpt_snapshot_t *self, const char *name,
                                       const bt_st_tensor *tensors, int n) {
    return s_add_tensors(self, name, tensors, n, true);
}

bt_status bt_ckpt_snapshot_add_tensors_borrowed(bt_ckpt_snapshot_t *self, const char *name,
                                                const bt_st_tensor *tensors, int n) {
    return s_add_tensors(self, name, tensors, n, false);
}

/* ---- paths and folders ---------------------------------------------------------------------- */

static bt_status s_join(char *out, const char *dir, const char *name) {
    int n = snprintf(out, S_PATH, "%s/%s", dir, name);
    if (n < 0 || n >= S_PATH)
        return bt_fail(BT_ERANGE, "%s/%s: path too long", dir, name);
    return BT_OK;
}

static void s_step_name(int64_t step, char name[32]) {
    snprintf(name, 32, "step-%08lld", (long long)step);
}

/*  True when name is "step-" and 1 to 18 digits; the number into *step. */
static bool s_parse_step(const char *name, int64_t *step) {
    if (strncmp(name, "step-", 5) != 0)
        return false;
    const char *p = name + 5;
    int64_t v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++)
        v = digits < S_STEP_DIGITS_MAX ? v * 10 + (*p - '0') : v;
    if (*p != '\0' || digits == 0 || digits > S_STEP_DIGITS_MAX)
        return false;
    *step = v;
    return true;
}

/*  A step-* folder of a ckpt directory. */
typedef struct {
    int64_t step;
    char name[32];
} s_folder;

static int s_by_step_desc(const void *a, const void *b) {
    int64_t x = ((const s_folder *)a)->step, y = ((const s_folder *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

/*  The step-* entries of ckpt, highest step first, into *out (caller frees) and *n.  When
    leftovers is true, every .tmp-* entry is removed and reported through reject. */
static bt_status s_list_folders(const char *ckpt, bool leftovers, bt_ckpt_reject_fn *reject,
                                void *user, s_folder **out, int *n) {
    DIR *d = opendir(ckpt);
    if (!d)
        return bt_fail(BT_EIO, "%s: cannot open: %s", ckpt, strerror(errno));
    s_folder *list = NULL;
    int count = 0, cap = 0;
    bt_status rc = BT_OK;
    char path[S_PATH];
    for (struct dirent *e; rc == BT_OK && (e = readdir(d));) {
        int64_t step;
        if (leftovers && strncmp(e->d_name, S_TMP_PREFIX, strlen(S_TMP_PREFIX)) == 0 &&
            s_join(path, ckpt, e->d_name) == BT_OK) {
            char reason[1100] = "leftover of an interrupted save: removed";
            if (bt_rmtree(path) != BT_OK)
                snprintf(reason, sizeof reason,
                         "leftover of an interrupted save: cannot remove: %s", bt_last_error());
            if (reject)
                reject(path, reason, user);
            continue;
        }
        if (!s_parse_step(e->d_name, &step))
            continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 16;
            s_folder *grown = realloc(list, (size_t)cap * sizeof *list);
            if (!grown) {
                rc = bt_fail(BT_ENOMEM, "%s: out of memory", ckpt);
                break;
            }
            list = grown;
        }
        list[count].step = step;
        memcpy(list[count].name, e->d_name, strlen(e->d_name) + 1); /* <= 23 bytes, parsed */
        count++;
    }
    closedir(d);
    if (rc != BT_OK) {
        free(list);
        return rc;
    }
    if (count > 1)
        qsort(list, (size_t)count, sizeof *list, s_by_step_desc);
    *out = list;
    *n = count;
    return BT_OK;
}

/*  The folder name LATEST holds into name, "" when there is no LATEST.  BT_EIO when it cannot be
    read, BT_EFORMAT when it is not "step-N\n". */
static bt_status s_read_latest(const char *ckpt, char name[32]) {
    char path[S_PATH];
    name[0] = '\0';
    BT_TRY(s_join(path, ckpt, "LATEST"));
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT ? BT_OK
                               : bt_fail(BT_EIO, "%s: cannot stat: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    BT_TRY(bt_file_read(path, 64, &text, &len));
    if (len > 0 && text[len - 1] == '\n')
        text[--len] = '\0';
    int64_t step;
    bt_status rc = BT_OK;
    if (len >= 32 || strlen(text) != len || !s_parse_step(text, &step))
        rc = bt_fail(BT_EFORMAT, "%s: malformed: expected \"step-NNNNNNNN\"", path);
    else
        snprintf(name, 32, "%s", text);
    free(text);
    return rc;
}

/* ---- MANIFEST ------------------------------------------------------------------------------- */

typedef struct {
    char name[BT_CKPT_NAME_MAX];
    uint64_t hash; /* XXH3-64 */
    uint64_t size;
} s_entry;

typedef struct {
    bool full;
    int n;
    s_entry e[BT_CKPT_MAX_FILES];
} s_manifest;

static int s_by_name(const void *a, const void *b) {
    return strcmp(((const s_entry *)a)->name, ((const s_entry *)b)->name);
}

/*  Parses MANIFEST text (see ckpt.h); path names it in errors. */
static bt_status s_manifest_parse(const char *text, const char *path, s_manifest *m) {
    const char *p = text;
    m->n = 0;
    if (strncmp(p, "kind full\n", 10) == 0) {
        m->full = true;
        p += 10;
    } else if (strncmp(p, "kind light\n", 11) == 0) {
        m->full = false;
        p += 11;
    } else {
        return bt_fail(BT_EFORMAT,
                       "%s: line 1: malformed (expected \"kind full\" or \"kind light\")", path);
    }
    for (int line = 2; *p; line++) {
        const char *end = strchr(p, '\n');
        if (!end)
            return bt_fail(BT_EFORMAT, "%s: line %d: no newline at the end", path, line);
        if (m->n == BT_CKPT_MAX_FILES)
            return bt_fail(BT_EFORMAT, "%s: more than %d files", path, BT_CKPT_MAX_FILES);
        s_entry *e = &m->e[m->n];
        bool ok = end - p > 19;
        e->hash = 0;
        for (int i = 0; ok && i < 16; i++) {
            char c = p[i];
            ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
            e->hash = e->hash << 4 | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
        }
        const char *q = p + 17;
        ok = ok && p[16] == ' ' && *q >= '0' && *q <= '9';
        e->size = 0;
        int digits = 0;
        for (; ok && q < end && *q >= '0' && *q <= '9'; q++, digits++)
            e->size = e->size * 10 + (uint64_t)(*q - '0');
        ok = ok && digits <= 19 && q < end && *q == ' ' && end - (q + 1) < BT_CKPT_NAME_MAX;
        if (ok) {
            memcpy(e->name, q + 1, (size_t)(end - (q + 1)));
            e->name[end - (q + 1)] = '\0';
            ok = s_name_ok(e->name);
        }
        if (!ok)
            return bt_fail(BT_EFORMAT,
                           "%s: line %d: malformed (expected \"<16 hex digits> <size> <name>\")",
                           path, line);
        if (m->n > 0 && strcmp(m->e[m->n - 1].name, e->name) >= 0)
            return bt_fail(BT_EFORMAT, "%s: line %d: %s: not sorted by name, or repeated", path,
                           line, e->name);
        m->n++;
        p = end + 1;
    }
    if (m->n == 0)
        return bt_fail(BT_EFORMAT, "%s: lists no files", path);
    return BT_OK;
}

static bt_status s_manifest_read(const char *folder, s_manifest *m) {
    char path[S_PATH];
    BT_TRY(s_join(path, folder, "MANIFEST"));
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT ? bt_fail(BT_EIO, "%s: missing", path)
                               : bt_fail(BT_EIO, "%s: cannot stat: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    BT_TRY(bt_file_read(path, S_MANIFEST_MAX, &text, &len));
    bt_status rc = strlen(text) == len ? s_manifest_parse(text, path, m)
                                       : bt_fail(BT_EFORMAT, "%s: holds a NUL byte", path);
    free(text);
    return rc;
}

/*  Writes m (sorted here) to folder/MANIFEST, durably. */
static bt_status s_manifest_write(const char *folder, s_manifest *m) {
    char path[S_PATH];
    BT_TRY(s_join(path, folder, "MANIFEST"));
    qsort(m->e, (size_t)m->n, sizeof m->e[0], s_by_name);
    size_t cap = 16 + (size_t)m->n * (16 + 1 + 20 + 1 + BT_CKPT_NAME_MAX + 1), len = 0;
    char *text = malloc(cap);
    if (!text)
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    len += (size_t)snprintf(text, cap, "kind %s\n", m->full ? "full" : "light");
    for (int i = 0; i < m->n; i++)
        len += (size_t)snprintf(text + len, cap - len, "%016llx %llu %s\n",
                                (unsigned long long)m->e[i].hash, (unsigned long long)m->e[i].size,
                                m->e[i].name);
    bt_status rc = bt_file_write(path, text, len);
    free(text);
    return rc;
}

/* ---- verification --------------------------------------------------------------------------- */

/*  Checks tensors read back against what the snapshot file f holds. */
static bt_status s_compare_tensors(const bt_safetensors_t *st, const s_file *f, const char *path) {
    if (bt_safetensors_count(st) != f->n)
        return bt_fail(BT_EFORMAT, "%s: %d tensors read back, %d written", path,
                       bt_safetensors_count(st), f->n);
    for (int i = 0; i < f->n; i++) {
        const bt_st_tensor *t = &f->tensors[i];
        const bt_st_entry *e = bt_safetensors_find(st, t->name);
        size_t nbytes = 0;
        s_tensor_nbytes(t, &nbytes);
        bool same = e && e->dtype == t->dtype && e->ndim == t->ndim &&
                    memcmp(e->shape, t->shape, (size_t)t->ndim * sizeof t->shape[0]) == 0 &&
                    e->nbytes == nbytes && (nbytes == 0 || memcmp(e->data, t->data, nbytes) == 0);
        if (!same)
            return bt_fail(BT_EFORMAT, "%s: tensor %s differs from the snapshot", path, t->name);
    }
    return BT_OK;
}

/*  Checks folder/e->name against its MANIFEST entry; a safetensors file must open, and match
    expect (may be NULL) when given.  A save's own check of a tensor file (expect given) skips
    re-hashing it: its MANIFEST hash was just taken from the file, and the byte-for-byte comparison
    with the snapshot proves more, for one read of the file instead of two. */
static bt_status s_check_file(const char *folder, const s_entry *e, const s_file *expect) {
    char path[S_PATH];
    BT_TRY(s_join(path, folder, e->name));
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT ? bt_fail(BT_EIO, "%s: missing", path)
                               : bt_fail(BT_EIO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return bt_fail(BT_EFORMAT, "%s: not a regular file", path);
    bool tensors = s_ends_with(e->name, S_TENSOR_SUFFIX);
    uint64_t hash = e->hash, size = (uint64_t)st.st_size;
    if (!(tensors && expect))
        BT_TRY(bt_file_hash(path, &hash, &size));
    if (size != e->size)
        return bt_fail(BT_EFORMAT, "%s: size mismatch (MANIFEST %llu, file %llu)", path,
                       (unsigned long long)e->size, (unsigned long long)size);
    if (hash != e->hash)
        return bt_fail(BT_EFORMAT, "%s: hash mismatch (MANIFEST %016llx, file %016llx)", path,
                       (unsigned long long)e->hash, (unsigned long long)hash);
    if (!tensors)
        return BT_OK;
    bt_safetensors_t *reader = NULL;
    BT_TRY(bt_safetensors_open(path, &reader));
    bt_status rc = expect ? s_compare_tensors(reader, expect, path) : BT_OK;
    bt_safetensors_destroy(&reader);
    return rc;
}

/*  bt_ckpt_verify, and when s is given, also: MANIFEST lists exactly s's files, of s's kind,
    with the tensors s holds.  The MANIFEST read goes into *m. */
static bt_status s_verify(const char *folder, const bt_ckpt_snapshot_t *s, s_manifest *m) {
    BT_TRY(s_manifest_read(folder, m));
    if (s && (m->n != s->n_files || m->full != s->full))
        return bt_fail(BT_EFORMAT, "%s/MANIFEST: does not list the files written", folder);
    for (int i = 0; i < m->n; i++) {
        const s_file *expect = NULL;
        for (int j = 0; s && j < s->n_files && !expect; j++)
            if (strcmp(s->files[j].name, m->e[i].name) == 0)
                expect = &s->files[j];
        if (s && !expect)
            return bt_fail(BT_EFORMAT, "%s/MANIFEST: lists %s, which was not written", folder,
                           m->e[i].name);
        BT_TRY(s_check_file(folder, &m->e[i], expect && expect->tensors ? expect : NULL));
    }
    return BT_OK;
}

bt_status bt_ckpt_verify(const char *folder) {
    BT_ASSERT(folder);
    s_manifest m;
    return s_verify(folder, NULL, &m);
}

bt_status bt_ckpt_read_file(const char *folder, const char *name, size_t max, char **out) {
    s_manifest m;
    BT_TRY(s_manifest_read(folder, &m));
    for (int i = 0; i < m.n; i++) {
        if (strcmp(m.e[i].name, name) != 0)
            continue;
        char path[S_PATH];
        BT_TRY(s_check_file(folder, &m.e[i], NULL));
        BT_TRY(s_join(path, folder, name));
        return bt_file_read(path, max, out, NULL);
    }
    return bt_fail(BT_EFORMAT, "%s/MANIFEST: does not list %s", folder, name);
}

bt_status bt_ckpt_latest_named(const char *dir, char *path, size_t len) {
    char ckpt[S_PATH], latest[32];
    BT_TRY(s_join(ckpt, dir, "ckpt"));
    BT_TRY(s_read_latest(ckpt, latest));
    int n = latest[0] ? snprintf(path, len, "%s/%s", ckpt, latest) : snprintf(path, len, "%s", "");
    if (n < 0 || (size_t)n >= len)
        return bt_fail(BT_ERANGE, "%s/%s: longer than the %zu bytes given for it", ckpt, latest,
                       len);
    return BT_OK;
}

/* ---- saving --------------------------------------------------------------------------------- */

static bt_status s_config_check(const bt_ckpt_config *cfg) {
    if (!memchr(cfg->dir, '\0', sizeof cfg->dir) || cfg->dir[0] == '\0' ||
        !memchr(cfg->mirror_dir, '\0', sizeof cfg->mirror_dir))
        return bt_fail(BT_EINVAL, "checkpoint config: dir: expected a path");
    if (cfg->keep_last < 1)
        return bt_fail(BT_EINVAL,
                       "checkpoint config: keep_last: expected an integer >= 1, got %lld",
                       (long long)cfg->keep_last);
    if (cfg->keep_every < 0)
        return bt_fail(BT_EINVAL,
                       "checkpoint config: keep_every: expected an integer >= 0, got %lld",
                       (long long)cfg->keep_every);
    return BT_OK;
}

/*  Writes every file of s and then MANIFEST into folder, and fsyncs folder. */
static bt_status s_write_folder(const char *folder, const bt_ckpt_snapshot_t *s) {
    static const char *const meta[] = {"format", "pt"};
    s_manifest m = {.full = s->full, .n = s->n_files};
    char path[S_PATH];
    for (int i = 0; i < s->n_files; i++) {
        const s_file *f = &s->files[i];
        s_entry *e = &m.e[i];
        snprintf(e->name, sizeof e->name, "%s", f->name);
        BT_TRY(s_join(path, folder, f->name));
        char *slash = strrchr(path, '/');
        if (strchr(f->name, '/')) { /* FOLDER/NAME: the folder first */
            *slash = '\0';
            BT_TRY(bt_mkdirs(path));
            *slash = '/';
        }
        if (f->text) {
            BT_TRY(bt_file_write(path, f->text, f->text_len));
            e->hash = bt_hash64(f->text, f->text_len); /* of the bytes meant, not those read */
            e->size = f->text_len;
        } else {
            BT_TRY(bt_safetensors_write(path, f->tensors, f->n, meta, 1));
            BT_TRY(bt_file_hash(path, &e->hash, &e->size));
        }
    }
    BT_TRY(s_manifest_write(folder, &m));
    for (int i = 0; i < s->n_files; i++) { /* each subfolder's entries, once */
        const char *name = s->files[i].name, *slash = strchr(name, '/');
        bool first = slash != NULL;
        for (int j = 0; first && j < i; j++)
            first = strncmp(s->files[j].name, name, (size_t)(slash - name) + 1) != 0;
        if (first) {
            char sub[S_PATH];
            BT_TRY(s_join(sub, folder, name));
            sub[strlen(sub) - strlen(slash)] = '\0'; /* folder/FOLDER */
            BT_TRY(bt_dir_sync(sub));
        }
    }
    return bt_dir_sync(folder);
}

/*  Renames tmp to final, replacing a folder final by way of aside. */
static bt_status s_install(const char *tmp, const char *final, const char *aside) {
    struct stat st;
    bool replace = lstat(final, &st) == 0;
    if (replace) {
        BT_TRY(bt_rmtree(aside));
        if (rename(final, aside) != 0)
            return bt_fail(BT_EIO, "%s: cannot move aside to %s: %s", final, aside,
                           strerror(errno));
    }
    if (rename(tmp, final) != 0) {
        int err = errno;
        if (replace)
            rename(aside, final);
        return bt_fail(BT_EIO, "%s: cannot rename to %s: %s", tmp, final, strerror(err));
    }
    if (replace && bt_rmtree(aside) != BT_OK)
        bt_log(BT_LOG_WARN, "%s", bt_last_error());
    return BT_OK;
}

/*  Replaces ckpt/LATEST with "name\n": temp file, rename, directory fsync. */
static bt_status s_write_latest(const char *ckpt, const char *name) {
    char tmp[S_PATH], path[S_PATH], text[40];
    BT_TRY(s_join(tmp, ckpt, S_TMP_PREFIX "LATEST"));
    BT_TRY(s_join(path, ckpt, "LATEST"));
    int len = snprintf(text, sizeof text, "%s\n", name);
    BT_TRY(bt_file_replace(path, tmp, text, (size_t)len));
    return bt_dir_sync(ckpt);
}

/*  Removes the step-* folders of ckpt that retention does not keep (see bt_ckpt_save); problems
    are logged. */
static void s_retain(const char *ckpt, const bt_ckpt_config *cfg, int64_t saved) {
    s_folder *list = NULL;
    int n = 0;
    if (s_list_folders(ckpt, false, NULL, NULL, &list, &n) != BT_OK) {
        bt_log(BT_LOG_WARN, "retention: %s", bt_last_error());
        return;
    }
    char latest[32], folder[S_PATH];
    if (s_read_latest(ckpt, latest) != BT_OK)
        latest[0] = '\0';     /* none protected but the one just saved */
    int64_t rank[2] = {0, 0}; /* light, full folders seen so far, newest first */
    int removed = 0;
    for (int i = 0; i < n; i++) {
        s_manifest m;
        if (s_join(folder, ckpt, list[i].name) != BT_OK || s_manifest_read(folder, &m) != BT_OK)
            continue; /* kind unknown: left for a person to look at */
        bool keep = rank[m.full]++ < cfg->keep_last || list[i].step == saved ||
                    strcmp(list[i].name, latest) == 0 ||
                    (m.full && cfg->keep_every > 0 && list[i].step % cfg->keep_every == 0);
        if (keep)
            continue;
        if (bt_rmtree(folder) != BT_OK) {
            bt_log(BT_LOG_WARN, "retention: %s", bt_last_error());
            continue;
        }
        bt_log(BT_LOG_INFO, "%s: removed by retention", folder);
        removed++;
    }
    free(list);
    if (removed && bt_dir_sync(ckpt) != BT_OK)
        bt_log(BT_LOG_WARN, "retention: %s", bt_last_error());
}

/*  Removes tmp after a failed save, keeping the error that failed it. */
static bt_status s_abandon(bt_status rc, const char *tmp) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", bt_last_error());
    if (bt_rmtree(tmp) != BT_OK)
        bt_log(BT_LOG_WARN, "%s", bt_last_error());
    return bt_fail(rc, "%s", msg);
}

/*  One full save of s under root/ckpt (see bt_ckpt_save); the folder's path into final. */
static bt_status s_save_into(const char *root, const bt_ckpt_config *cfg,
                             const bt_ckpt_snapshot_t *s, char *final) {
    char ckpt[S_PATH], name[32], tmp[S_PATH], aside[S_PATH], tmp_name[64], aside_name[64];
    s_step_name(s->step, name);
    snprintf(tmp_name, sizeof tmp_name, S_TMP_PREFIX "%s", name);
    snprintf(aside_name, sizeof aside_name, S_TMP_PREFIX "old-%s", name);
    BT_TRY(s_join(ckpt, root, "ckpt"));
    BT_TRY(s_join(final, ckpt, name));
    BT_TRY(s_join(tmp, ckpt, tmp_name));
    BT_TRY(s_join(aside, ckpt, aside_name));
    BT_TRY(bt_mkdirs(ckpt));
    BT_TRY(bt_rmtree(tmp));
    if (mkdir(tmp, 0755) != 0)
        return bt_fail(BT_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    s_manifest m;
    bt_status rc = s_write_folder(tmp, s);
    if (rc == BT_OK && cfg->pause_ms > 0) /* a test's window to kill the process mid-save */
        nanosleep(&(struct timespec){cfg->pause_ms / 1000, (cfg->pause_ms % 1000) * 1000000}, NULL);
    if (rc == BT_OK)
        rc = s_verify(tmp, s, &m);
    if (rc == BT_OK)
        rc = s_install(tmp, final, aside);
    if (rc != BT_OK)
        return s_abandon(rc, tmp);
    BT_TRY(bt_dir_sync(ckpt));
    if (s->full)
        BT_TRY(s_write_latest(ckpt, name));
    bt_log(BT_LOG_INFO, "%s: saved (%s, %zu bytes of data)", final, s->full ? "full" : "light",
           s->bytes);
    s_retain(ckpt, cfg, s->step);
    return BT_OK;
}

bt_status bt_ckpt_save(const bt_ckpt_config *cfg, const bt_ckpt_snapshot_t *s, char *out_path,
                       size_t len) {
    BT_ASSERT(cfg && s);
    BT_TRY(s_config_check(cfg));
    if (s->n_files == 0)
        return bt_fail(BT_EINVAL, "%s/ckpt: step %lld: the snapshot holds no files", cfg->dir,
                       (long long)s->step);
    char final[S_PATH], name[32];
    s_step_name(s->step, name);
    int need = snprintf(NULL, 0, "%s/ckpt/%s", cfg->dir, name);
    if (out_path && need >= (int)len)
        return bt_fail(BT_ERANGE, "%s/ckpt/%s: longer than the %zu bytes given for it", cfg->dir,
                       name, len);
    BT_TRY(s_save_into(cfg->dir, cfg, s, final));
    if (out_path)
        snprintf(out_path, len, "%s", final);
    if (cfg->mirror_dir[0] != '\0') {
        char mirror[S_PATH];
        BT_TRY(s_save_into(cfg->mirror_dir, cfg, s, mirror));
    }
    return BT_OK;
}

/* ---- finding -------------------------------------------------------------------------------- */

typedef enum { S_BAD = 0, S_LIGHT = 1, S_FULL = 2 } s_verdict;

/*  A light folder is passed over on its MANIFEST alone; anything else is verified, and reported
    through reject when it fails. */
static s_verdict s_try(const char *folder, bt_ckpt_reject_fn *reject, void *user) {
    s_manifest m;
    if (s_manifest_read(folder, &m) == BT_OK && !m.full)
        return S_LIGHT;
    if (s_verify(folder, NULL, &m) == BT_OK)
        return S_FULL;
    char reason[1024];
    snprintf(reason, sizeof reason, "%s", bt_last_error());
    if (reject)
        reject(folder, reason, user);
    return S_BAD;
}

bt_status bt_ckpt_find_latest(const char *dir, bt_ckpt_reject_fn *reject, void *user, char *path,
                              size_t len) {
    BT_ASSERT(dir && path);
    char ckpt[S_PATH], folder[S_PATH], latest[32];
    BT_TRY(s_join(ckpt, dir, "ckpt"));
    s_folder *list = NULL;
    int n = 0;
    if (s_list_folders(ckpt, true, reject, user, &list, &n) != BT_OK) {
        int err = errno;
        return bt_fail(BT_EIO, "%s: no verified checkpoint (cannot open it: %s)", ckpt,
                       strerror(err));
    }
    bool found = false;
    if (s_read_latest(ckpt, latest) != BT_OK) {
        char reason[1024];
        snprintf(reason, sizeof reason, "%s", bt_last_error());
        latest[0] = '\0';
        if (reject)
            reject(ckpt, reason, user);
    } else if (latest[0] != '\0' && s_join(folder, ckpt, latest) == BT_OK) {
        struct stat st;
        s_verdict v = S_BAD;
        if (stat(folder, &st) != 0) {
            if (reject)
                reject(folder, "named by LATEST but missing", user);
        } else if ((v = s_try(folder, reject, user)) == S_LIGHT && reject) {
            reject(folder, "named by LATEST but a light checkpoint", user);
        }
        found = v == S_FULL;
    }
    for (int i = 0; i < n && !found; i++)
        if (strcmp(list[i].name, latest) != 0 && s_join(folder, ckpt, list[i].name) == BT_OK)
            found = s_try(folder, reject, user) == S_FULL;
    free(list);
    if (!found)
        return bt_fail(BT_EIO, "%s: no verified checkpoint", ckpt);
    if (snprintf(path, len, "%s", folder) >= (int)len)
        return bt_fail(BT_ERANGE, "%s: longer than the %zu bytes given for it", folder, len);
    return BT_OK;
}

/* ---- the background writer ------------------------------------------------------------------ */

struct bt_ckpt_writer {
    bt_ckpt_config cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* a snapshot to save, or stop */
    pthread_cond_t idle;     /* the save in flight finished */
    bt_ckpt_snapshot_t *job; /* the save in flight (only compared with NULL once handed over) */
    int64_t job_step;
    bool stop;
    bt_ckpt_result results[S_RESULTS]; /* ring: count results from head */
    int head, count;
};

static void *s_writer_main(void *arg) {
    bt_ckpt_writer_t *w = arg;
    /* Linux: nice applies per thread.  Saving yields the cores to training, which it overlaps. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) != 0)
        bt_log(BT_LOG_WARN, "checkpoint writer: cannot lower its priority: %s", strerror(errno));
    for (;;) {
        pthread_mutex_lock(&w->lock);
        while (!w->job && !w->stop)
            pthread_cond_wait(&w->wake, &w->lock);
        bt_ckpt_snapshot_t *job = w->job;
        pthread_mutex_unlock(&w->lock);
        if (!job)
            return NULL; /* stop, nothing in flight */

        bt_ckpt_result r = {.step = job->step, .full = job->full};
        double t0 = bt_now();
        r.status = bt_ckpt_save(&w->cfg, job, r.path, sizeof r.path);
        r.seconds = bt_now() - t0;
        if (r.status != BT_OK)
            snprintf(r.error, sizeof r.error, "%s", bt_last_error());
        bt_ckpt_snapshot_destroy(&job);

        pthread_mutex_lock(&w->lock);
        int64_t dropped = -1;
        if (w->count == S_RESULTS) {
            dropped = w->results[w->head].step;
            w->head = (w->head + 1) % S_RESULTS;
            w->count--;
        }
        w->results[(w->head + w->count) % S_RESULTS] = r;
        w->count++;
        w->job = NULL;
        pthread_cond_broadcast(&w->idle);
        pthread_mutex_unlock(&w->lock);
        if (dropped >= 0)
            bt_log(BT_LOG_WARN, "%s/ckpt: result of step %lld dropped, never polled", w->cfg.dir,
                   (long long)dropped);
    }
}

bt_ckpt_writer_t *bt_ckpt_writer_new(const bt_ckpt_config *cfg) {
    BT_ASSERT(cfg);
    if (s_config_check(cfg) != BT_OK)
        return NULL;
    bt_ckpt_writer_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "checkpoint writer: out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    pthread_cond_init(&self->idle, NULL);
    int err = pthread_create(&self->thread, NULL, s_writer_main, self);
    if (err != 0) {
        pthread_cond_destroy(&self->idle);
        pthread_cond_destroy(&self->wake);
        pthread_mutex_destroy(&self->lock);
        free(self);
        bt_fail(BT_EIO, "checkpoint writer: cannot start a thread: %s", strerror(err));
        return NULL;
    }
    return self;
}

void bt_ckpt_writer_destroy(bt_ckpt_writer_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_ckpt_writer_t *self = *self_p;
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    pthread_cond_destroy(&self->idle);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

bt_status bt_ckpt_writer_submit(bt_ckpt_writer_t *self, bt_ckpt_snapshot_t **snap_p) {
    BT_ASSERT(self && snap_p && *snap_p);
    pthread_mutex_lock(&self->lock);
    if (self->job) {
        int64_t step = self->job_step;
        pthread_mutex_unlock(&self->lock);
        return bt_fail(BT_ERANGE, "%s/ckpt: busy: the save of step %lld is in flight",
                       self->cfg.dir, (long long)step);
    }
    self->job = *snap_p;
    self->job_step = (*snap_p)->step;
    *snap_p = NULL;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    return BT_OK;
}

bool bt_ckpt_writer_is_busy(bt_ckpt_writer_t *self) {
    pthread_mutex_lock(&self->lock);
    bool busy = self->job != NULL;
    pthread_mutex_unlock(&self->lock);
    return busy;
}

bool bt_ckpt_writer_poll(bt_ckpt_writer_t *self, bt_ckpt_result *out) {
    pthread_mutex_lock(&self->lock);
    bool any = self->count > 0;
    if (any) {
        *out = self->results[self->head];
        self->head = (self->head + 1) % S_RESULTS;
        self->count--;
    }
    pthread_mutex_unlock(&self->lock);
    return any;
}

void bt_ckpt_writer_wait(bt_ckpt_writer_t *self) {
    pthread_mutex_lock(&self->lock);
    while (self->job)
        pthread_cond_wait(&self->idle, &self->lock);
    pthread_mutex_unlock(&self->lock);
}
