/*  test_install.c — `cmake --install` into a fresh prefix gives what a user builds against, and
    nothing else: bin/baton (it runs), lib/libbaton.so -> .so.SOVERSION -> .so.VERSION with the
    soname ld.so looks for, exporting exactly the functions the installed headers declare,
    include/baton/ with only baton.h and status.h (baton.h compiles alone, as C11 and as C++),
    baton.pc and the CMake package.  examples/embed.c (the README's embedding section, byte for
    byte) is compiled with `pkg-config --cflags --libs baton` against the installed tree alone and
    trains a tiny policy with its own reward; a second program, built with find_package(baton),
    runs its workers as processes of the installed baton (and, that baton gone, says where it
    looked).  The tree, moved, is still found where it is now.  Needs pkg-config and binutils
    (readelf, nm): without them it prints SKIP and exits 77. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_SKIP 77 /* ctest's SKIP_RETURN_CODE for this test (CMakeLists.txt) */

static char s_tmp[64];
static char s_prefix[128];

/*  The tiny run both consumers train: one layer, 4 GRPO steps of 5 prompts x 4 completions. */
enum { S_STEPS = 4, S_PROMPTS = 5, S_GROUP = 4, S_WORKERS = 3 };
static const char s_config[] =
    "{\"run\": {\"name\": \"embed\", \"seed\": 5}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\","
    "  \"heldout_size\": 6},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 4, \"group_size\": 4, \"prompts_per_step\": 5, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 2, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1}}";

static const char *s_env(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v && v[0] ? v : fallback;
}

/*  The release as CMakeLists.txt's project() line states it: "MAJOR.MINOR.PATCH". */
static void s_project_version(char *out, size_t cap) {
    char path[PATH_MAX], *text = NULL;
    snprintf(path, sizeof path, "%s/CMakeLists.txt", s_env("BATON_SOURCE_DIR", ".."));
    out[0] = '\0';
    CHECK(bt_file_read(path, 1 << 20, &text, NULL) == BT_OK);
    const char *at = text ? strstr(text, "project(baton VERSION ") : NULL;
    CHECK(at != NULL);
    if (at)
        snprintf(out, cap, "%.*s", (int)strspn(at + 22, "0123456789."), at + 22);
    free(text);
}

static bool s_is_link_to(const char *path, const char *target) {
    char got[PATH_MAX];
    ssize_t n = readlink(path, got, sizeof got - 1);
    if (n < 0)
        return false;
    got[n] = '\0';
    return strcmp(got, target) == 0;
}

/*  Appends to names[*n..cap) the functions the header at path declares, comments and macro
    bodies aside: each identifier bt_* followed by '('.  Caller frees them. */
static void s_declared(const char *path, char **names, size_t *n, size_t cap) {
    char *text = NULL;
    CHECK(bt_file_read(path, 1 << 20, &text, NULL) == BT_OK);
    if (!text)
        return;
    bool directive = false;
    for (char *p = text; *p;) {
        if (p[0] == '/' && p[1] == '*') {
            char *end = strstr(p + 2, "*/");
            p = end ? end + 2 : p + strlen(p);
            continue;
        }
        if (*p == '\n') {
            directive = p > text && p[-1] == '\\' ? directive : false;
            p++;
            continue;
        }
        if (*p == '#' && (p == text || p[-1] == '\n'))
            directive = true; /* #define BT_ASSERT(...) ... bt_assert_fail(...): a macro's body */
        bool start = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        if (!directive && start && strncmp(p, "bt_", 3) == 0) {
            size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
            if (p[len] == '(' && *n < cap)
                names[(*n)++] = strndup(p, len);
            p += len;
            continue;
        }
        p++;
    }
    free(text);
}

/*  Runs cmd (with 2>&1), its output into out; returns its exit status and prints it on failure. */
static int s_sh(const char *cmd, char *out, size_t cap) {
    int rc = runs_capture(cmd, out, cap);
    if (rc != 0)
        fprintf(stderr, "exit %d: %s\n%s\n", rc, cmd, out);
    return rc;
}

/*  The installed files: names, links, soname, exported symbols, headers. */
static void s_check_tree(const char *version) {
    char path[PATH_MAX], want[PATH_MAX], out[1 << 16], cmd[PATH_MAX * 2];
    int major = 0, minor = 0;
    CHECK(sscanf(version, "%d.%d", &major, &minor) == 2);
    char soversion[32];
    if (major == 0) /* while the major is 0, each minor release may change the ABI */
        snprintf(soversion, sizeof soversion, "0.%d", minor);
    else
        snprintf(soversion, sizeof soversion, "%d", major);

    /* lib/libbaton.so -> libbaton.so.SOVERSION -> libbaton.so.VERSION, a regular file */
    snprintf(path, sizeof path, "%s/lib/libbaton.so", s_prefix);
    snprintf(want, sizeof want, "libbaton.so.%s", soversion);
    CHECK(s_is_link_to(path, want));
    snprintf(path, sizeof path, "%s/lib/libbaton.so.%s", s_prefix, soversion);
    snprintf(want, sizeof want, "libbaton.so.%s", version);
    CHECK(s_is_link_to(path, want));
    snprintf(path, sizeof path, "%s/lib/libbaton.so.%s", s_prefix, version);
    struct stat st;
    CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
    snprintf(cmd, sizeof cmd, "readelf -d %s 2>&1", path);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    snprintf(want, sizeof want, "Library soname: [libbaton.so.%s]", soversion);
    CHECK_STR_CONTAINS(out, want);

    /* include/baton/ holds the two public headers, the source tree's own, and nothing else */
    snprintf(path, sizeof path, "%s/include/baton", s_prefix);
    DIR *d = opendir(path);
    CHECK(d != NULL);
    int n_headers = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        n_headers++;
        CHECK(!strcmp(e->d_name, "baton.h") || !strcmp(e->d_name, "status.h"));
        char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        snprintf(path, sizeof path, "%s/include/baton/%s", s_prefix, e->d_name);
        snprintf(want, sizeof want, "%s/include/baton/%s", s_env("BATON_SOURCE_DIR", ".."),
                 e->d_name);
        CHECK(bt_file_read(path, 1 << 20, &a, &na) == BT_OK);
        CHECK(bt_file_read(want, 1 << 20, &b, &nb) == BT_OK);
        CHECK(a && b && na == nb && memcmp(a, b, na) == 0);
        free(a);
        free(b);
    }
    if (d)
        closedir(d);
    CHECK(n_headers == 2);

    /* baton.h compiles alone against the installed tree, as pedantic C11 and as C++ */
    snprintf(cmd, sizeof cmd,
             "%s -std=c11 -pedantic -Wall -Wextra -Werror -fsyntax-only -I%s/include -x c "
             "%s/include/baton/baton.h 2>&1",
             s_env("BATON_CC", "cc"), s_prefix, s_prefix);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd,
             "%s -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I%s/include -x c++ "
             "%s/include/baton/baton.h 2>&1",
             s_env("BATON_CXX", "c++"), s_prefix, s_prefix);
    CHECK(s_sh(cmd, out, sizeof out) == 0);

    /* the dynamic symbols it defines: the functions the installed headers declare, all of them */
    enum { S_CAP = 256 };
    char **declared = calloc(S_CAP, sizeof *declared), **exported = calloc(S_CAP, sizeof *exported);
    size_t n_declared = 0, n_exported = 0;
    snprintf(path, sizeof path, "%s/include/baton/baton.h", s_prefix);
    s_declared(path, declared, &n_declared, S_CAP);
    snprintf(path, sizeof path, "%s/include/baton/status.h", s_prefix);
    s_declared(path, declared, &n_declared, S_CAP);
    /* nm -D: "ADDR T bt_run_new@@BATON_0"; A is the version node, not a symbol */
    snprintf(cmd, sizeof cmd, "nm -D --defined-only %s/lib/libbaton.so 2>&1", s_prefix);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    for (char *l = strtok(out, "\n"); l && n_exported < S_CAP; l = strtok(NULL, "\n")) {
        char type, name[256];
        if (sscanf(l, "%*s %c %255[^@ ]", &type, name) == 2 && type != 'A')
            exported[n_exported++] = strdup(name);
    }
    CHECK(n_declared >= 30); /* baton.h's bt_run_* and status.h's: the reader found them */
    char want_syms[1 << 13], got_syms[1 << 13];
    CHECK_STR_EQ(runs_join_sorted(exported, n_exported, got_syms, sizeof got_syms),
                 runs_join_sorted(declared, n_declared, want_syms, sizeof want_syms));

    /* the installed baton runs (its libraries found) and is this release */
    snprintf(cmd, sizeof cmd, "%s/bin/baton --version 2>&1", s_prefix);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    snprintf(want, sizeof want, "baton %s ", version);
    CHECK(strncmp(out, want, strlen(want)) == 0);
}

/*  The README's embedding section shows examples/embed.c whole: the ```c block after
    "**Embed it.**" is the file, byte for byte. */
static void s_check_readme(void) {
    char path[PATH_MAX], *readme = NULL, *example = NULL;
    size_t n_example = 0;
    snprintf(path, sizeof path, "%s/README.md", s_env("BATON_SOURCE_DIR", ".."));
    CHECK(bt_file_read(path, 1 << 22, &readme, NULL) == BT_OK);
    snprintf(path, sizeof path, "%s/examples/embed.c", s_env("BATON_SOURCE_DIR", ".."));
    CHECK(bt_file_read(path, 1 << 20, &example, &n_example) == BT_OK);
    const char *section = readme ? strstr(readme, "**Embed it.**") : NULL;
    const char *block = section ? strstr(section, "\n```c\n") : NULL;
    CHECK(block != NULL);
    if (block && example) {
        block += strlen("\n```c\n");
        const char *end = strstr(block, "\n```\n");
        CHECK(end != NULL);
        CHECK(end && (size_t)(end + 1 - block) == n_example &&
              memcmp(block, example, n_example) == 0);
    }
    free(readme);
    free(example);
}

/*  n * r as a + b / 10 with whole a, b >= 0, a + b <= n: r is a mean of n of embed.c's rewards
    (1, 0.1 or 0).  a_known >= 0 fixes a (an evaluation's exact answers). */
static bool s_is_mean_of_rewards(double r, int n, int a_known) {
    double tenths = r * n * 10;
    long m = lround(tenths);
    if (fabs(tenths - (double)m) > 1e-6)
        return false;
    for (long a = 0; a <= n && 10 * a <= m; a++)
        if ((a_known < 0 || a == a_known) && a + (m - 10 * a) <= n)
            return true;
    return false;
}

/*  examples/embed.c, compiled through pkg-config against the installed tree alone, trains the tiny
    run with its own reward. */
static void s_check_embed(const char *version) {
    char cmd[PATH_MAX * 4], out[1 << 16], flags[4096], path[PATH_MAX];
    char pc[PATH_MAX + 64];
    snprintf(pc, sizeof pc, "PKG_CONFIG_PATH=%s/lib/pkgconfig PKG_CONFIG_LIBDIR=/nonexistent",
             s_prefix);
    /* pkg-config finds baton (only the installed prefix on its path: no system copy) */
    snprintf(cmd, sizeof cmd, "%s pkg-config --modversion baton 2>&1", pc);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    out[strcspn(out, "\n")] = '\0';
    CHECK_STR_EQ(out, version);

    /* with the system's .pc files too (Requires.private: libzmq libxxhash libcjson) */
    snprintf(pc, sizeof pc, "PKG_CONFIG_PATH=%s/lib/pkgconfig", s_prefix);
    snprintf(cmd, sizeof cmd, "%s pkg-config --cflags --libs baton 2>&1", pc);
    CHECK(s_sh(cmd, flags, sizeof flags) == 0);
    flags[strcspn(flags, "\n")] = '\0';
    CHECK(strstr(flags, "-lbaton") != NULL);
    CHECK(strstr(flags, s_env("BATON_SOURCE_DIR", "..")) == NULL); /* never the source tree */
    snprintf(cmd, sizeof cmd, "%s pkg-config --variable=libdir baton", pc);
    char libdir[PATH_MAX];
    CHECK(s_sh(cmd, libdir, sizeof libdir) == 0);
    libdir[strcspn(libdir, "\n")] = '\0';
    snprintf(cmd, sizeof cmd,
             "cd %s && %s -std=c11 -Wall -Wextra -Werror -MD -MF embed.d %s/examples/embed.c %s "
             "-Wl,-rpath,%s -o embed 2>&1",
             s_tmp, s_env("BATON_CC", "cc"), s_env("BATON_SOURCE_DIR", ".."), flags, libdir);
    CHECK(s_sh(cmd, out, sizeof out) == 0);

    /* the baton headers it read are the installed ones (the compiler's own list of them) */
    char *deps = NULL;
    snprintf(path, sizeof path, "%s/embed.d", s_tmp);
    CHECK(bt_file_read(path, 1 << 20, &deps, NULL) == BT_OK);
    int n_baton = 0;
    for (char *t = deps ? strtok(deps, " \\\n") : NULL; t; t = strtok(NULL, " \\\n")) {
        if (!strstr(t, "baton/") || strstr(t, "embed."))
            continue;
        char real[PATH_MAX], real_prefix[PATH_MAX];
        CHECK(realpath(t, real) != NULL && realpath(s_prefix, real_prefix) != NULL);
        if (strncmp(real, real_prefix, strlen(real_prefix)) != 0)
            fprintf(stderr, "embed.c read %s, outside the installed tree\n", t);
        CHECK(strncmp(real, real_prefix, strlen(real_prefix)) == 0);
        n_baton++;
    }
    CHECK(n_baton == 2); /* baton.h and status.h */
    free(deps);

    /* it asks ld.so for the soname */
    snprintf(cmd, sizeof cmd, "readelf -d %s/embed 2>&1", s_tmp);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "Shared library: [libbaton.so.");

    /* a bad config: bt_last_error, across the library's boundary, names the key and what it got */
    snprintf(path, sizeof path, "%s/bad.json", s_tmp);
    const char bad[] = "{\"grpo\": {\"group_size\": 1}}";
    CHECK(bt_file_write(path, bad, strlen(bad)) == BT_OK);
    snprintf(cmd, sizeof cmd, "cd %s && ./embed bad.json 2>&1", s_tmp);
    CHECK(runs_capture(cmd, out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "embed: ");
    CHECK_STR_CONTAINS(out, "grpo.group_size");
    CHECK_STR_CONTAINS(out, "got 1");

    /* the tiny run: exit 0, the last step, and what it printed is what metrics.jsonl holds */
    snprintf(path, sizeof path, "%s/embed.json", s_tmp);
    CHECK(bt_file_write(path, s_config, strlen(s_config)) == BT_OK);
    snprintf(cmd, sizeof cmd, "cd %s && ./embed embed.json run-embed 2>&1", s_tmp);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    long long step = -1, total = -1;
    double reward = NAN, accuracy = NAN;
    long scored = -1;
    const char *line = strstr(out, "step ");
    CHECK(line && sscanf(line, "step %lld/%lld reward_mean %lf accuracy %lf scored %ld", &step,
                         &total, &reward, &accuracy, &scored) == 5);
    CHECK(step == S_STEPS && total == S_STEPS);

    char *metrics = NULL;
    snprintf(path, sizeof path, "%s/run-embed/metrics.jsonl", s_tmp);
    CHECK(bt_file_read(path, 1 << 24, &metrics, NULL) == BT_OK);
    int n_train = 0, n_eval_examples = 0;
    double last_train_reward = NAN, last_eval_accuracy = NAN;
    for (char *l = metrics ? strtok(metrics, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        CHECK(j != NULL);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(j, "kind"));
        double r = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "reward_mean"));
        if (kind && !strcmp(kind, "train")) {
            n_train++;
            CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "step")) == n_train);
            CHECK(s_is_mean_of_rewards(r, S_PROMPTS * S_GROUP, -1));
            last_train_reward = r;
        } else if (kind && !strcmp(kind, "eval")) {
            int examples = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "examples"));
            double acc = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "accuracy"));
            n_eval_examples += examples;
            /* embed.c's reward, not the verifier's 0/1: the exact answers count 1, others 0.1 */
            CHECK(s_is_mean_of_rewards(r, examples, (int)lround(acc * examples)));
            last_eval_accuracy = acc;
        }
        cJSON_Delete(j);
    }
    free(metrics);
    CHECK(n_train == S_STEPS);
    CHECK(reward == last_train_reward);
    CHECK(accuracy == last_eval_accuracy);
    /* every rollout completion and every evaluated one went through my_reward, once */
    CHECK(scored == S_STEPS * S_PROMPTS * S_GROUP + n_eval_examples);
    fprintf(stderr, "embed: %lld steps, reward_mean %.3f, accuracy %.3f, %ld completions scored\n",
            step, reward, accuracy, scored);
}

/*  tests/install/, a CMake project with find_package(baton): its workers are processes of the
    installed baton. */
static void s_check_find_package(void) {
    char cmd[PATH_MAX * 4], out[1 << 16], path[PATH_MAX], baton[PATH_MAX];
    const char *cmake = s_env("BATON_CMAKE", "cmake");
    snprintf(cmd, sizeof cmd,
             "%s -S %s/tests/install -B %s/consumer -DCMAKE_PREFIX_PATH=%s "
             "-DCMAKE_C_COMPILER=%s -DCMAKE_BUILD_TYPE=Release 2>&1 && %s --build %s/consumer 2>&1",
             cmake, s_env("BATON_SOURCE_DIR", ".."), s_tmp, s_prefix, s_env("BATON_CC", "cc"),
             cmake, s_tmp);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    snprintf(path, sizeof path, "%s/procs.json", s_tmp);
    CHECK(bt_file_write(path, s_config, strlen(s_config)) == BT_OK);
    snprintf(cmd, sizeof cmd, "cd %s && ./consumer/procs procs.json run-procs", s_tmp);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    snprintf(path, sizeof path, "%s/bin/baton", s_prefix);
    CHECK(realpath(path, baton) != NULL);
    int workers = 0;
    char exe[PATH_MAX], package[PATH_MAX], real[PATH_MAX];
    for (const char *l = strstr(out, "worker "); l; l = strstr(l + 1, "\nworker ")) {
        l += l[0] == '\n';
        CHECK(sscanf(l, "worker %*d %4095s", exe) == 1);
        CHECK_STR_EQ(exe, baton);
        workers++;
    }
    CHECK(workers == S_WORKERS);
    const char *p = strstr(out, "package ");
    CHECK(p && sscanf(p, "package %4095s", package) == 1 && realpath(package, real) != NULL);
    CHECK_STR_EQ(real, baton);
    char want[64];
    snprintf(want, sizeof want, "step %d/%d", S_STEPS, S_STEPS);
    CHECK_STR_CONTAINS(out, want);
    char run_dir[128];
    snprintf(run_dir, sizeof run_dir, "%s/run-procs", s_tmp);
    CHECK(runs_train_steps(run_dir) == S_STEPS);

    /* without the installed baton, the run fails before any worker, naming where it looked */
    char moved[PATH_MAX + 8];
    snprintf(moved, sizeof moved, "%s.moved", baton);
    CHECK(rename(baton, moved) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && ./consumer/procs procs.json run-procs2 2>&1", s_tmp);
    CHECK(runs_capture(cmd, out, sizeof out) == 1);
    char why[PATH_MAX];
    snprintf(why, sizeof why, "no baton executable at %s/lib/../bin/baton", s_prefix);
    CHECK_STR_CONTAINS(out, why);
    CHECK(strstr(out, "\nworker ") == NULL && strncmp(out, "worker ", 7) != 0);
    CHECK(rename(moved, baton) == 0);
}

/*  The installed tree moved elsewhere: baton.pc and the CMake package name the new place. */
static void s_check_relocated(void) {
    char cmd[PATH_MAX * 4], out[4096], want[PATH_MAX], real[PATH_MAX];
    snprintf(cmd, sizeof cmd, "mv %s %s/moved 2>&1", s_prefix, s_tmp);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd,
             "PKG_CONFIG_PATH=%s/moved/lib/pkgconfig pkg-config --variable=includedir baton",
             s_tmp);
    CHECK(s_sh(cmd, out, sizeof out) == 0);
    out[strcspn(out, "\n")] = '\0';
    snprintf(want, sizeof want, "%s/moved/include", s_tmp);
    CHECK(realpath(out, real) != NULL);
    CHECK_STR_EQ(real, want);
    /* find_package from the moved tree: baton_EXECUTABLE follows it */
    snprintf(cmd, sizeof cmd,
             "%s -S %s/tests/install -B %s/consumer2 -DCMAKE_PREFIX_PATH=%s/moved "
             "-DCMAKE_C_COMPILER=%s 2>&1 && cat %s/consumer2/CMakeFiles/procs.dir/flags.make",
             s_env("BATON_CMAKE", "cmake"), s_env("BATON_SOURCE_DIR", ".."), s_tmp, s_tmp,
             s_env("BATON_CC", "cc"), s_tmp);
    char big[1 << 14];
    CHECK(s_sh(cmd, big, sizeof big) == 0);
    snprintf(want, sizeof want, "BATON_EXE=\\\"%s/moved/bin/baton\\\"", s_tmp);
    CHECK_STR_CONTAINS(big, want);
    snprintf(want, sizeof want, "-isystem %s/moved/include", s_tmp);
    CHECK_STR_CONTAINS(big, want);
}

int main(void) {
    char out[4096];
    if (runs_capture("pkg-config --version 2>&1", out, sizeof out) != 0) {
        printf("SKIP: pkg-config is missing (Debian: pkg-config)\n");
        return S_SKIP;
    }
    if (runs_capture("readelf --version 2>&1 && nm --version 2>&1", out, sizeof out) != 0) {
        printf("SKIP: readelf or nm is missing (Debian: binutils)\n");
        return S_SKIP;
    }
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_install_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_prefix, sizeof s_prefix, "%s/prefix", s_tmp);
    char cmd[PATH_MAX * 2], out_install[1 << 14], version[32];
    snprintf(cmd, sizeof cmd, "%s --install %s --prefix %s 2>&1", s_env("BATON_CMAKE", "cmake"),
             s_env("BATON_BUILD_DIR", "."), s_prefix);
    CHECK(s_sh(cmd, out_install, sizeof out_install) == 0);
    s_project_version(version, sizeof version);
    s_check_tree(version);
    s_check_readme();
    s_check_embed(version);
    s_check_find_package();
    s_check_relocated();
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (!s_check_failures)
        CHECK(system(cmd) == 0);
    return check_exit();
}
