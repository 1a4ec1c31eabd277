/*  fuzz_replay.c — runs a libFuzzer target without libFuzzer, as an ordinary test on any compiler:
    every file of the corpus folders named on the command line, then S_MUTATIONS random edits
    (fixed seed: every run feeds the same inputs) of those files, each handed to
    LLVMFuzzerTestOneInput.  The target aborts on a broken property; this program fails when it
    finds no corpus.  Linked with one target: fuzz_wire_replay = tests/fuzz_wire.c + this file. */
#define _POSIX_C_SOURCE 200809L
#include "baton/fileio.h"
#include "baton/status.h"

#include "fuzz.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define S_MUTATIONS 5000
#define S_FILES_MAX 256
#define S_FILE_MAX (1 << 20) /* larger seed files are refused */
#define S_GROWTH 64          /* the most a mutation's 1..4 edits add */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct s_input {
    char *data;
    size_t len;
} s_input;

/*  Reads the files of dir in name order into inputs[*n..], handing each to the target. */
static bt_status s_replay_dir(const char *dir, s_input *inputs, int *n) {
    struct dirent **names = NULL;
    int count = scandir(dir, &names, NULL, alphasort);
    if (count < 0)
        return bt_fail(BT_EIO, "%s: cannot list", dir);
    bt_status st = BT_OK;
    for (int i = 0; i < count; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (st == BT_OK && names[i]->d_name[0] != '.' && *n == S_FILES_MAX)
            st = bt_fail(BT_EINVAL, "%s: more than %d seed files", dir, S_FILES_MAX);
        if (st == BT_OK && names[i]->d_name[0] != '.') {
            s_input *in = &inputs[*n];
            st = bt_file_read(path, S_FILE_MAX, &in->data, &in->len);
            if (st == BT_OK) {
                LLVMFuzzerTestOneInput((const uint8_t *)in->data, in->len);
                (*n)++;
            }
        }
        free(names[i]);
    }
    free(names);
    return st;
}

int main(int argc, char **argv) {
    static s_input inputs[S_FILES_MAX];
    int n = 0;
    double t0 = bt_now();
    for (int i = 1; i < argc; i++)
        if (s_replay_dir(argv[i], inputs, &n) != BT_OK) {
            fprintf(stderr, "fuzz_replay: %s\n", bt_last_error());
            return 1;
        }
    if (n == 0) {
        fprintf(stderr, "usage: %s CORPUS_DIR... (with at least one file)\n", argv[0]);
        return 1;
    }
    for (int i = 0; i < S_MUTATIONS; i++) {
        const s_input *seed = &inputs[s_rand() % (uint32_t)n];
        size_t len = seed->len, cap = seed->len + S_GROWTH;
        char *buf = malloc(cap);
        if (!buf)
            return 1;
        memcpy(buf, seed->data, len);
        for (int k = 1 + (int)(s_rand() % 4); k > 0; k--)
            s_mutate(buf, &len, cap);
        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
        free(buf);
    }
    printf("fuzz_replay: %d files and %d mutations of them in %.2f s\n", n, S_MUTATIONS,
           bt_now() - t0);
    for (int i = 0; i < n; i++)
        free(inputs[i].data);
    return 0;
}
