/*  test_ckpt.c — the checkpoint store: a saved folder is a model folder bt_model_load opens
    bit-exactly, MANIFEST describes the bytes on disk, retention keeps what it promises, LATEST only
    ever names a verified full checkpoint, corrupt or partial folders are reported and skipped,
    the mirror gets the same folder, and the background writer hands results back once each.
    Nothing here depends on timing: the writer is held mid-save by a log sink that blocks. */
#define _XOPEN_SOURCE 700
#include "baton/ckpt.h"

#include "baton/fileio.h"
#include "baton/model.h"
#include "baton/rollout.h"
#include "baton/tokenizer.h"

#include "check.h"

#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- fixtures ------------------------------------------------------------------------------- */

static bt_model *s_model;         /* hidden 32, 1 layer, seed 1 */
static bt_weights s_weights;      /* its parameters under Hugging Face names */
static char *s_config_json;       /* its config.json */
static char *s_tokenizer_json;    /* the byte tokenizer's tokenizer_config.json */
static float s_exp_avg[2 * 3];    /* (2, 3) F32: stands in for optimizer state */
static int64_t s_adam_steps = 41; /* () I64 */

static int s_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void s_rm_rf(const char *path) {
    nftw(path, s_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*  A fresh directory under /tmp into dir (64 bytes). */
static void s_tmpdir(char *dir) {
    snprintf(dir, 64, "/tmp/bt_ckpt_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
}

static bool s_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/*  The file's text, or "" when it cannot be read (into a static buffer, one at a time). */
static const char *s_text(const char *path) {
    static char buf[4096];
    char *text = NULL;
    buf[0] = '\0';
    if (bt_file_read(path, sizeof buf - 1, &text, NULL) == BT_OK)
        snprintf(buf, sizeof buf, "%s", text);
    free(text);
    return buf;
}

/*  DIR/ckpt/step-NNNNNNNN (or /FILE when file is not NULL) into a static buffer, one of four. */
static const char *s_at(const char *dir, int64_t step, const char *file) {
    static char bufs[4][1200];
    static int next;
    char *p = bufs[next++ % 4];
    int n = snprintf(p, 1200, "%s/ckpt/step-%08lld", dir, (long long)step);
    if (file)
        snprintf(p + n, (size_t)(1200 - n), "/%s", file);
    return p;
}

static void s_fixtures_init(void) {
    bt_model_config cfg;
    bt_model_config_init(&cfg);
    cfg.hidden_size = 32;
    cfg.num_hidden_layers = 1;
    s_model = bt_model_new(&cfg, bt_cpu(), 1);
    BT_ASSERT(s_model);
    bt_weights_init(&s_weights);
    BT_ASSERT(bt_weights_export(s_model, 0, &s_weights) == BT_OK);
    s_config_json = bt_model_config_to_json(&cfg);
    BT_ASSERT(s_config_json);

    /* the tokenizer's own files, saved by it and carried as text so MANIFEST covers them */
    char dir[64], path[128];
    s_tmpdir(dir);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    BT_ASSERT(tok && bt_tokenizer_save(tok, dir) == BT_OK);
    bt_tokenizer_destroy(&tok);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    BT_ASSERT(bt_file_read(path, SIZE_MAX, &s_tokenizer_json, NULL) == BT_OK);
    s_rm_rf(dir);

    for (int i = 0; i < 6; i++)
        s_exp_avg[i] = 0.25f * (float)i - 1.0f;
}

static void s_fixtures_release(void) {
    bt_weights_release(&s_weights);
    bt_model_destroy(&s_model);
    free(s_config_json);
    free(s_tokenizer_json);
}

/*  What the controller hands over: config.json, tokenizer_config.json, model.safetensors, and for
    a full checkpoint also state.json and optimizer.safetensors. */
static bt_ckpt_snapshot_t *s_snapshot(int64_t step, bool full) {
    bt_ckpt_snapshot_t *s = bt_ckpt_snapshot_new(step, full);
    BT_ASSERT(s);
    bt_st_tensor *model = calloc((size_t)s_weights.n, sizeof *model);
    BT_ASSERT(model);
    for (int i = 0; i < s_weights.n; i++) {
        model[i] = (bt_st_tensor){.name = s_weights.names[i],
                                  .dtype = s_weights.dtype[i],
                                  .ndim = s_weights.ndim[i],
                                  .data = s_weights.data[i]};
        memcpy(model[i].shape, s_weights.shape[i], sizeof model[i].shape);
    }
    CHECK_OK(bt_ckpt_snapshot_add_text(s, "config.json", s_config_json));
    CHECK_OK(bt_ckpt_snapshot_add_text(s, "tokenizer_config.json", s_tokenizer_json));
    CHECK_OK(bt_ckpt_snapshot_add_tensors(s, "model.safetensors", model, s_weights.n));
    free(model);
    if (full) {
        char state[64];
        snprintf(state, sizeof state, "{\"step\": %lld}\n", (long long)step);
        CHECK_OK(bt_ckpt_snapshot_add_text(s, "state.json", state));
        const bt_st_tensor opt[] = {
            {"exp_avg.0", BT_F32, 2, {2, 3}, s_exp_avg},
            {"steps", BT_I64, 0, {0}, &s_adam_steps},
        };
        CHECK_OK(bt_ckpt_snapshot_add_tensors(s, "optimizer.safetensors", opt, 2));
    }
    return s;
}

static bt_ckpt_config s_config(const char *dir, int64_t keep_last, int64_t keep_every) {
    bt_ckpt_config cfg = {.keep_last = keep_last, .keep_every = keep_every};
    snprintf(cfg.dir, sizeof cfg.dir, "%s", dir);
    return cfg;
}

static void s_save(const bt_ckpt_config *cfg, int64_t step, bool full) {
    bt_ckpt_snapshot_t *s = s_snapshot(step, full);
    char path[1200];
    CHECK_OK(bt_ckpt_save(cfg, s, path, sizeof path));
    CHECK(strcmp(path, s_at(cfg->dir, step, NULL)) == 0);
    bt_ckpt_snapshot_destroy(&s);
    CHECK(s == NULL);
}

/*  Entries of dir whose name starts with prefix. */
static int s_count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/*  Flips the bits of the byte in the middle of the file. */
static void s_flip_middle_byte(const char *path) {
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long mid = ftell(f) / 2;
    fseek(f, mid, SEEK_SET);
    int c = fgetc(f);
    fseek(f, mid, SEEK_SET);
    fputc(c ^ 0xFF, f);
    fclose(f);
}

/*  What find_latest reported. */
typedef struct {
    int n;
    char folder[16][1200];
    char reason[16][1100];
} s_rejects;

static void s_on_reject(const char *folder, const char *reason, void *user) {
    s_rejects *r = user;
    if (r->n < 16) {
        snprintf(r->folder[r->n], sizeof r->folder[0], "%s", folder);
        snprintf(r->reason[r->n], sizeof r->reason[0], "%s", reason);
    }
    r->n++;
}

/*  True when a report names a folder ending in folder_tail, with a reason containing needle. */
static bool s_rejected(const s_rejects *r, const char *folder_tail, const char *needle) {
    for (int i = 0; i < r->n && i < 16; i++) {
        size_t n = strlen(r->folder[i]), k = strlen(folder_tail);
        if (n >= k && strcmp(r->folder[i] + n - k, folder_tail) == 0 &&
            strstr(r->reason[i], needle))
            return true;
    }
    return false;
}

/* ---- saving --------------------------------------------------------------------------------- */

/*  MANIFEST: "kind full", then one line per file, sorted, each with the XXH3-64 and size of the
    bytes actually on disk. */
static void s_check_manifest(const char *folder, const char *kind, const char *const *names,
                             int n) {
    char path[1300];
    snprintf(path, sizeof path, "%s/MANIFEST", folder);
    char *text = NULL;
    CHECK_OK(bt_file_read(path, SIZE_MAX, &text, NULL));
    if (!text)
        return;
    char first[32];
    snprintf(first, sizeof first, "kind %s\n", kind);
    CHECK(strncmp(text, first, strlen(first)) == 0);
    const char *line = strchr(text, '\n');
    int i = 0;
    for (; line && line[1]; i++, line = strchr(line + 1, '\n')) {
        unsigned long long hash = 0, size = 0;
        char name[128] = "";
        CHECK(sscanf(line + 1, "%16llx %llu %127s", &hash, &size, name) == 3);
        CHECK(i < n && strcmp(name, names[i]) == 0);
        char file[1300], *bytes = NULL;
        size_t len = 0;
        snprintf(file, sizeof file, "%s/%s", folder, name);
        CHECK_OK(bt_file_read(file, SIZE_MAX, &bytes, &len));
        CHECK(bytes && len == size && bt_hash64(bytes, len) == hash);
        free(bytes);
    }
    CHECK(i == n);
    free(text);
}

/*  Bit-exact: the model bt_model_load builds from folder has the source model's parameters. */
static void s_check_model_folder(const char *folder) {
    bt_model *m = bt_model_load(folder, bt_cpu());
    CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "bt_model_load: %s\n", bt_last_error());
        return;
    }
    bt_weights w;
    bt_weights_init(&w);
    CHECK_OK(bt_weights_export(m, 0, &w));
    CHECK(w.n == s_weights.n);
    for (int i = 0; i < w.n && i < s_weights.n; i++) {
        CHECK(strcmp(w.names[i], s_weights.names[i]) == 0);
        CHECK(w.numel[i] == s_weights.numel[i] && w.dtype[i] == BT_F32);
        CHECK(memcmp(w.data[i], s_weights.data[i], (size_t)w.numel[i] * sizeof(float)) == 0);
    }
    bt_weights_release(&w);
    bt_model_destroy(&m);
    bt_tokenizer_t *tok = NULL;
    CHECK_OK(bt_tokenizer_load(folder, &tok)); /* the tokenizer files came through as text */
    bt_tokenizer_destroy(&tok);
}

static void test_save_retention_and_model_folder(void) {
    char dir[64], ckpt[80];
    s_tmpdir(dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    bt_ckpt_config cfg = s_config(dir, 2, 20);
    for (int64_t step = 10; step <= 40; step += 10)
        s_save(&cfg, step, true);

    /* keep_last 2 keeps 30 and 40; keep_every 20 keeps 20; 10 goes */
    CHECK(!s_exists(s_at(dir, 10, NULL)));
    for (int64_t step = 20; step <= 40; step += 10) {
        CHECK(s_exists(s_at(dir, step, NULL)));
        CHECK_OK(bt_ckpt_verify(s_at(dir, step, NULL)));
    }
    char latest[100];
    snprintf(latest, sizeof latest, "%s/LATEST", ckpt);
    CHECK(strcmp(s_text(latest), "step-00000040\n") == 0);
    CHECK(s_count_entries(ckpt, ".tmp-") == 0); /* no temp folder or file left */

    static const char *const names[] = {"config.json", "model.safetensors", "optimizer.safetensors",
                                        "state.json", "tokenizer_config.json"};
    s_check_manifest(s_at(dir, 40, NULL), "full", names, 5);
    CHECK(strcmp(s_text(s_at(dir, 30, "state.json")), "{\"step\": 30}\n") == 0);
    s_check_model_folder(s_at(dir, 40, NULL));

    s_rejects r = {0};
    char found[1200];
    CHECK_OK(bt_ckpt_find_latest(dir, s_on_reject, &r, found, sizeof found));
    CHECK(strcmp(found, s_at(dir, 40, NULL)) == 0);
    CHECK(r.n == 0);

    /* saving a step again replaces its folder */
    s_save(&cfg, 30, true);
    CHECK_OK(bt_ckpt_verify(s_at(dir, 30, NULL)));
    CHECK(strcmp(s_text(latest), "step-00000030\n") == 0);
    CHECK(s_count_entries(ckpt, ".tmp-") == 0);
    s_rm_rf(dir);
}

static void test_failed_save_changes_nothing(void) {
    char dir[64], ckpt[80], latest[100];
    s_tmpdir(dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    snprintf(latest, sizeof latest, "%s/LATEST", ckpt);
    bt_ckpt_config cfg = s_config(dir, 2, 0);
    s_save(&cfg, 10, true);

    /* two tensors of one name: accepted into the snapshot, refused by the safetensors writer */
    bt_ckpt_snapshot_t *s = s_snapshot(20, true);
    float x = 1.0f;
    const bt_st_tensor twins[] = {{"a", BT_F32, 0, {0}, &x}, {"a", BT_F32, 0, {0}, &x}};
    CHECK_OK(bt_ckpt_snapshot_add_tensors(s, "extra.safetensors", twins, 2));
    CHECK(bt_ckpt_save(&cfg, s, NULL, 0) != BT_OK);
    CHECK_STR_CONTAINS(bt_last_error(), ".tmp-step-00000020/extra.safetensors");
    bt_ckpt_snapshot_destroy(&s);
    CHECK(!s_exists(s_at(dir, 20, NULL)));
    CHECK(s_count_entries(ckpt, ".tmp-") == 0);
    CHECK(strcmp(s_text(latest), "step-00000010\n") == 0);
    CHECK_OK(bt_ckpt_verify(s_at(dir, 10, NULL)));

    /* a snapshot without files, and a config out of range, are refused up front */
    s = bt_ckpt_snapshot_new(30, true);
    CHECK(bt_ckpt_save(&cfg, s, NULL, 0) == BT_EINVAL);
    bt_ckpt_snapshot_destroy(&s);
    s = s_snapshot(30, true);
    bt_ckpt_config bad = s_config(dir, 0, 0);
    CHECK(bt_ckpt_save(&bad, s, NULL, 0) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "keep_last");
    char tiny[8];
    CHECK(bt_ckpt_save(&cfg, s, tiny, sizeof tiny) == BT_ERANGE);
    bt_ckpt_snapshot_destroy(&s);
    CHECK(!s_exists(s_at(dir, 30, NULL)));
    s_rm_rf(dir);
}

static void test_snapshot_rules(void) {
    bt_ckpt_snapshot_t *s = bt_ckpt_snapshot_new(7, false);
    CHECK(bt_ckpt_snapshot_step(s) == 7 && !bt_ckpt_snapshot_is_full(s));
    CHECK_OK(bt_ckpt_snapshot_add_text(s, "state.json", "{}"));
    CHECK(bt_ckpt_snapshot_add_text(s, "state.json", "{}") == BT_EINVAL); /* twice */
    CHECK_OK(bt_ckpt_snapshot_add_text(s, "a/b.json", "{}")); /* one folder level: a variant's */
    CHECK(bt_ckpt_snapshot_add_text(s, "a/b/c.json", "{}") == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_text(s, "/b.json", "{}") == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_text(s, "a/", "{}") == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_text(s, ".a/b.json", "{}") == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_text(s, "a/.b", "{}") == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_text(s, "../b.json", "{}") == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_text(s, "MANIFEST", "x") == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_text(s, ".hidden", "x") == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_text(s, "two words", "x") == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_text(s, "w.safetensors", "x") == BT_EINVAL);
    int64_t v[3] = {1, 2, 3};
    const bt_st_tensor t = {"v", BT_I64, 1, {3}, v};
    CHECK(bt_ckpt_snapshot_add_tensors(s, "w.bin", &t, 1) == BT_EINVAL);
    CHECK(bt_ckpt_snapshot_add_tensors(s, "w.safetensors", &t, 0) == BT_EINVAL);
    const bt_st_tensor no_data = {"v", BT_I64, 1, {3}, NULL};
    CHECK(bt_ckpt_snapshot_add_tensors(s, "w.safetensors", &no_data, 1) == BT_EINVAL);
    CHECK_OK(bt_ckpt_snapshot_add_tensors(s, "w.safetensors", &t, 1));
    v[0] = 99; /* the snapshot holds a copy */
    CHECK(bt_ckpt_snapshot_bytes(s) == 2 + 2 + sizeof v);
    char dir[64];
    s_tmpdir(dir);
    bt_ckpt_config cfg = s_config(dir, 1, 0);
    CHECK_OK(bt_ckpt_save(&cfg, s, NULL, 0));
    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(s_at(dir, 7, "w.safetensors"), &st));
    const bt_st_entry *e = st ? bt_safetensors_find(st, "v") : NULL;
    int64_t back[3] = {0};
    if (e && e->nbytes == sizeof back)
        memcpy(back, e->data, sizeof back);
    CHECK(back[0] == 1 && back[1] == 2 && back[2] == 3);
    bt_safetensors_destroy(&st);
    char *text = NULL; /* the file in a folder of the checkpoint, listed and verified */
    CHECK_OK(bt_ckpt_verify(s_at(dir, 7, NULL)));
    CHECK_OK(bt_ckpt_read_file(s_at(dir, 7, NULL), "a/b.json", 16, &text));
    CHECK(text && strcmp(text, "{}") == 0);
    free(text);
    bt_ckpt_snapshot_destroy(&s);
    bt_ckpt_snapshot_destroy(&s); /* idempotent */
    s_rm_rf(dir);
}

/* ---- verifying and finding ------------------------------------------------------------------ */

/*  A folder made by hand in the documented format verifies; the checks then fail one by one. */
static void test_verify_hand_made_folder(void) {
    char dir[64], folder[100], path[200], manifest[200], text[512];
    s_tmpdir(dir);
    snprintf(folder, sizeof folder, "%s/step-00000007", dir);
    snprintf(manifest, sizeof manifest, "%s/MANIFEST", folder);
    CHECK(mkdir(folder, 0755) == 0);
    const char *a = "hello\n", *b = "not a safetensors file";
    snprintf(path, sizeof path, "%s/a.txt", folder);
    CHECK_OK(bt_file_write(path, a, strlen(a)));
    snprintf(path, sizeof path, "%s/b.safetensors", folder);
    CHECK_OK(bt_file_write(path, b, strlen(b)));

    CHECK(bt_ckpt_verify(folder) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), "MANIFEST: missing");

    snprintf(text, sizeof text, "kind full\n%016llx %zu a.txt\n",
             (unsigned long long)bt_hash64(a, strlen(a)), strlen(a));
    CHECK_OK(bt_file_write(manifest, text, strlen(text)));
    CHECK_OK(bt_ckpt_verify(folder));

    /* listed with the right hash, but not a valid safetensors file */
    snprintf(text, sizeof text, "kind full\n%016llx %zu a.txt\n%016llx %zu b.safetensors\n",
             (unsigned long long)bt_hash64(a, strlen(a)), strlen(a),
             (unsigned long long)bt_hash64(b, strlen(b)), strlen(b));
    CHECK_OK(bt_file_write(manifest, text, strlen(text)));
    CHECK(bt_ckpt_verify(folder) != BT_OK);
    CHECK_STR_CONTAINS(bt_last_error(), "b.safetensors");

    /* wrong size */
    snprintf(text, sizeof text, "kind full\n%016llx 5 a.txt\n",
             (unsigned long long)bt_hash64(a, strlen(a)));
    CHECK_OK(bt_file_write(manifest, text, strlen(text)));
    CHECK(bt_ckpt_verify(folder) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "a.txt: size mismatch (MANIFEST 5, file 6)");

    /* malformed: not sorted, no kind, no files */
    snprintf(text, sizeof text, "kind full\n%016llx %zu b.safetensors\n%016llx %zu a.txt\n",
             (unsigned long long)bt_hash64(b, strlen(b)), strlen(b),
             (unsigned long long)bt_hash64(a, strlen(a)), strlen(a));
    CHECK_OK(bt_file_write(manifest, text, strlen(text)));
    CHECK(bt_ckpt_verify(folder) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "not sorted");
    const char *bad[] = {"0123456789abcdef 6 a.txt\n", "kind full\n", "kind full\nzz 6 a.txt\n",
                         "kind full\n0123456789abcdef 6 ../a.txt\n"};
    for (int i = 0; i < 4; i++) {
        CHECK_OK(bt_file_write(manifest, bad[i], strlen(bad[i])));
        CHECK(bt_ckpt_verify(folder) == BT_EFORMAT);
        CHECK_STR_CONTAINS(bt_last_error(), "MANIFEST");
    }
    s_rm_rf(dir);
}

static void test_find_skips_corrupt_checkpoints(void) {
    char dir[64], ckpt[80], latest[100], found[1200];
    s_tmpdir(dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    snprintf(latest, sizeof latest, "%s/LATEST", ckpt);
    bt_ckpt_config cfg = s_config(dir, 2, 20);
    for (int64_t step = 10; step <= 40; step += 10)
        s_save(&cfg, step, true); /* leaves 20, 30, 40 */

    /* one flipped byte in the newest */
    s_flip_middle_byte(s_at(dir, 40, "model.safetensors"));
    CHECK(bt_ckpt_verify(s_at(dir, 40, NULL)) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "model.safetensors: hash mismatch (MANIFEST ");
    s_rejects r = {0};
    CHECK_OK(bt_ckpt_find_latest(dir, s_on_reject, &r, found, sizeof found));
    CHECK(strcmp(found, s_at(dir, 30, NULL)) == 0);
    CHECK(r.n == 1 && s_rejected(&r, "/step-00000040", "hash"));

    /* a file gone from the next one */
    CHECK(remove(s_at(dir, 30, "optimizer.safetensors")) == 0);
    CHECK(bt_ckpt_verify(s_at(dir, 30, NULL)) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), "optimizer.safetensors: missing");
    r = (s_rejects){0};
    CHECK_OK(bt_ckpt_find_latest(dir, s_on_reject, &r, found, sizeof found));
    CHECK(strcmp(found, s_at(dir, 20, NULL)) == 0);
    CHECK(r.n == 2 && s_rejected(&r, "/step-00000040", "hash") &&
          s_rejected(&r, "/step-00000030", "missing"));

    /* the remains of a save that crashed half-way */
    char tmp[120], part[160];
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-00000050", ckpt);
    snprintf(part, sizeof part, "%s/model.safetensors", tmp);
    CHECK(mkdir(tmp, 0755) == 0);
    CHECK_OK(bt_file_write(part, "\x10\0\0\0", 4));
    r = (s_rejects){0};
    CHECK_OK(bt_ckpt_find_latest(dir, s_on_reject, &r, found, sizeof found));
    CHECK(strcmp(found, s_at(dir, 20, NULL)) == 0);
    CHECK(s_rejected(&r, "/.tmp-step-00000050", "removed"));
    CHECK(!s_exists(tmp));

    /* LATEST naming a folder that is not there: reported, and the scan goes on */
    CHECK_OK(bt_file_write(latest, "step-00000099\n", 14));
    r = (s_rejects){0};
    CHECK_OK(bt_ckpt_find_latest(dir, s_on_reject, &r, found, sizeof found));
    CHECK(strcmp(found, s_at(dir, 20, NULL)) == 0);
    CHECK(s_rejected(&r, "/step-00000099", "missing"));
    CHECK(r.n == 3);

    /* a malformed LATEST is reported too */
    CHECK_OK(bt_file_write(latest, "../../etc\n", 10));
    r = (s_rejects){0};
    CHECK_OK(bt_ckpt_find_latest(dir, s_on_reject, &r, found, sizeof found));
    CHECK(strcmp(found, s_at(dir, 20, NULL)) == 0);
    CHECK(s_rejected(&r, "/ckpt", "malformed"));

    /* nothing left that verifies */
    CHECK(remove(s_at(dir, 20, "MANIFEST")) == 0);
    r = (s_rejects){0};
    CHECK(bt_ckpt_find_latest(dir, s_on_reject, &r, found, sizeof found) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), ckpt);
    CHECK_STR_CONTAINS(bt_last_error(), "no verified checkpoint");
    CHECK(s_rejected(&r, "/step-00000020", "MANIFEST: missing"));

    /* no ckpt folder at all: the same answer, reject may be NULL */
    char empty[64];
    s_tmpdir(empty);
    CHECK(bt_ckpt_find_latest(empty, NULL, NULL, found, sizeof found) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), "/ckpt: no verified checkpoint");
    s_rm_rf(empty);
    s_rm_rf(dir);
}

static void test_light_checkpoints_never_resume(void) {
    char dir[64], latest[100], found[1200];
    s_tmpdir(dir);
    snprintf(latest, sizeof latest, "%s/ckpt/LATEST", dir);
    bt_ckpt_config cfg = s_config(dir, 2, 10);
    s_save(&cfg, 10, true);
    for (int64_t step = 20; step <= 40; step += 10)
        s_save(&cfg, step, false);

    CHECK(strcmp(s_text(latest), "step-00000010\n") == 0);
    /* light ones are counted apart: the newest two stay, and keep_every is for full ones */
    CHECK(s_exists(s_at(dir, 10, NULL)));
    CHECK(!s_exists(s_at(dir, 20, NULL)));
    CHECK(s_exists(s_at(dir, 30, NULL)) && s_exists(s_at(dir, 40, NULL)));
    CHECK_OK(bt_ckpt_verify(s_at(dir, 40, NULL)));
    static const char *const names[] = {"config.json", "model.safetensors",
                                        "tokenizer_config.json"};
    s_check_manifest(s_at(dir, 40, NULL), "light", names, 3);
    s_check_model_folder(s_at(dir, 40, NULL)); /* weights only, still a model folder */

    s_rejects r = {0};
    CHECK_OK(bt_ckpt_find_latest(dir, s_on_reject, &r, found, sizeof found));
    CHECK(strcmp(found, s_at(dir, 10, NULL)) == 0);
    CHECK(r.n == 0);

    /* without LATEST the scan still passes over the light ones */
    CHECK(remove(latest) == 0);
    CHECK_OK(bt_ckpt_find_latest(dir, s_on_reject, &r, found, sizeof found));
    CHECK(strcmp(found, s_at(dir, 10, NULL)) == 0);
    CHECK(r.n == 0);
    s_rm_rf(dir);
}

static void test_mirror(void) {
    char dir[64], mirror[64], found[1200], path[100];
    s_tmpdir(dir);
    s_tmpdir(mirror);
    bt_ckpt_config cfg = s_config(dir, 1, 0);
    snprintf(cfg.mirror_dir, sizeof cfg.mirror_dir, "%s", mirror);
    s_save(&cfg, 10, true);
    s_save(&cfg, 20, true);

    char primary_manifest[4096];
    snprintf(primary_manifest, sizeof primary_manifest, "%s", s_text(s_at(dir, 20, "MANIFEST")));
    CHECK(primary_manifest[0] != '\0');
    CHECK(strcmp(primary_manifest, s_text(s_at(mirror, 20, "MANIFEST"))) == 0);
    CHECK_OK(bt_ckpt_verify(s_at(mirror, 20, NULL)));
    CHECK(!s_exists(s_at(mirror, 10, NULL))); /* the mirror has its own retention */
    snprintf(path, sizeof path, "%s/ckpt/LATEST", mirror);
    CHECK(strcmp(s_text(path), "step-00000020\n") == 0);
    CHECK_OK(bt_ckpt_find_latest(mirror, NULL, NULL, found, sizeof found));
    CHECK(strcmp(found, s_at(mirror, 20, NULL)) == 0);
    s_rm_rf(mirror);
    s_rm_rf(dir);
}

/* ---- the background writer ------------------------------------------------------------------ */

/*  A log sink that holds any thread that logs while the gate is closed: the writer logs each save
    it completes, so closing the gate keeps a save in flight for as long as the test needs. */
static pthread_mutex_t s_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s_gate_open = PTHREAD_COND_INITIALIZER;
static bool s_gate_closed;

static void s_gate(bool closed) {
    pthread_mutex_lock(&s_gate_lock);
    s_gate_closed = closed;
    pthread_cond_broadcast(&s_gate_open);
    pthread_mutex_unlock(&s_gate_lock);
}

static void s_gated_sink(bt_log_level level, const char *msg, void *user) {
    (void)user;
    if (level >= BT_LOG_WARN)
        fprintf(stderr, "log: %s\n", msg);
    pthread_mutex_lock(&s_gate_lock);
    while (s_gate_closed)
        pthread_cond_wait(&s_gate_open, &s_gate_lock);
    pthread_mutex_unlock(&s_gate_lock);
}

static void test_writer(void) {
    char dir[64];
    s_tmpdir(dir);
    bt_ckpt_config cfg = s_config(dir, 3, 0);
    bt_ckpt_writer_t *w = bt_ckpt_writer_new(&cfg);
    CHECK(w != NULL);
    if (!w)
        return;
    bt_ckpt_result res;
    CHECK(!bt_ckpt_writer_is_busy(w) && !bt_ckpt_writer_poll(w, &res));

    /* a save held in flight refuses a second one, which stays with the caller */
    s_gate(true);
    bt_ckpt_snapshot_t *a = s_snapshot(10, true), *b = s_snapshot(20, true);
    CHECK_OK(bt_ckpt_writer_submit(w, &a));
    CHECK(a == NULL);
    CHECK(bt_ckpt_writer_is_busy(w));
    CHECK(bt_ckpt_writer_submit(w, &b) == BT_ERANGE);
    CHECK_STR_CONTAINS(bt_last_error(), "busy");
    CHECK(b != NULL && bt_ckpt_snapshot_step(b) == 20);
    s_gate(false);
    bt_ckpt_writer_wait(w);
    CHECK(!bt_ckpt_writer_is_busy(w));
    CHECK(bt_ckpt_writer_poll(w, &res));
    CHECK(res.status == BT_OK && res.step == 10 && res.full && res.error[0] == '\0');
    CHECK(strcmp(res.path, s_at(dir, 10, NULL)) == 0);
    CHECK(res.seconds >= 0);
    CHECK(!bt_ckpt_writer_poll(w, &res)); /* once */

    /* results wait to be polled, oldest first */
    CHECK_OK(bt_ckpt_writer_submit(w, &b));
    bt_ckpt_writer_wait(w);
    bt_ckpt_snapshot_t *c = s_snapshot(30, false);
    CHECK_OK(bt_ckpt_writer_submit(w, &c));
    bt_ckpt_writer_wait(w);
    CHECK(bt_ckpt_writer_poll(w, &res) && res.step == 20 && res.status == BT_OK);
    CHECK(bt_ckpt_writer_poll(w, &res) && res.step == 30 && !res.full && res.status == BT_OK);
    CHECK(!bt_ckpt_writer_poll(w, &res));
    CHECK_OK(bt_ckpt_verify(s_at(dir, 30, NULL)));

    /* a save that fails: the run directory is a regular file */
    char file[100];
    snprintf(file, sizeof file, "%s/not-a-dir", dir);
    CHECK_OK(bt_file_write(file, "x", 1));
    bt_ckpt_config bad = s_config(file, 1, 0);
    bt_ckpt_writer_t *wb = bt_ckpt_writer_new(&bad);
    CHECK(wb != NULL);
    bt_ckpt_snapshot_t *d = s_snapshot(40, true);
    CHECK_OK(bt_ckpt_writer_submit(wb, &d));
    bt_ckpt_writer_wait(wb);
    CHECK(bt_ckpt_writer_poll(wb, &res));
    CHECK(res.status != BT_OK && res.step == 40);
    CHECK_STR_CONTAINS(res.error, file);
    CHECK(!bt_ckpt_writer_poll(wb, &res));
    bt_ckpt_writer_destroy(&wb);
    CHECK(wb == NULL);

    /* destroy waits for the save in flight */
    bt_ckpt_snapshot_t *e = s_snapshot(50, true);
    CHECK_OK(bt_ckpt_writer_submit(w, &e));
    bt_ckpt_writer_destroy(&w);
    CHECK(w == NULL);
    bt_ckpt_writer_destroy(&w); /* idempotent */
    CHECK_OK(bt_ckpt_verify(s_at(dir, 50, NULL)));
    char latest[100];
    snprintf(latest, sizeof latest, "%s/ckpt/LATEST", dir);
    CHECK(strcmp(s_text(latest), "step-00000050\n") == 0);

    bad = s_config(dir, 0, 0);
    CHECK(bt_ckpt_writer_new(&bad) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "keep_last");
    s_rm_rf(dir);
}

int main(void) {
    bt_log_set_sink(s_gated_sink, NULL, BT_LOG_INFO);
    s_fixtures_init();
    test_snapshot_rules();
    test_save_retention_and_model_folder();
    test_failed_save_changes_nothing();
    test_verify_hand_made_folder();
    test_find_skips_corrupt_checkpoints();
    test_light_checkpoints_never_resume();
    test_mirror();
    test_writer();
    s_fixtures_release();
    return check_exit();
}
