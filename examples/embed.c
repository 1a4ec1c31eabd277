/*  embed.c — a C program that trains a policy with baton and scores the completions itself.
    Build against an installed baton:  cc embed.c $(pkg-config --cflags --libs baton) -o embed
    Run:  ./embed CONFIG.json [RUN_DIR]      (e.g. configs/arith.json; metrics in RUN_DIR) */
#include <baton/baton.h>

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/*  1 for the reference answer, 0.1 for any other number (the right form), else 0.  Called from
    the workers' threads at once: the count it keeps is atomic. */
static double my_reward(const char *prompt, const char *completion, size_t len, const char *answer,
                        void *user) {
    (void)prompt;
    atomic_long *scored = user;
    atomic_fetch_add(scored, 1);
    if (len == strlen(answer) && memcmp(completion, answer, len) == 0)
        return 1.0;
    size_t digits = 0;
    while (digits < len && isdigit((unsigned char)completion[digits]))
        digits++;
    return len > 0 && digits == len ? 0.1 : 0.0;
}

int main(int argc, char **argv) {
    static char config_json[1 << 20];
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (!f) {
        fprintf(stderr, "usage: embed CONFIG.json [RUN_DIR]\n");
        return 2;
    }
    config_json[fread(config_json, 1, sizeof config_json - 1, f)] = '\0';
    fclose(f);

    bt_run_t *run = bt_run_new(config_json, argv[1], NULL, 0);
    if (!run) {
        fprintf(stderr, "embed: %s\n", bt_last_error());
        return 2;
    }
    atomic_long scored = 0;
    if (argc > 2)
        bt_run_set_dir(run, argv[2]);
    bt_run_set_reward(run, my_reward, &scored);
    bt_status status = bt_run_start(run);
    for (bool done = false; status == BT_OK && !done;)
        status = bt_run_step(run, &done);
    bt_progress p = bt_run_progress(run); /* last reward, last held-out accuracy, ... */
    if (status == BT_OK)
        status = bt_run_finish(run);
    if (status != BT_OK)
        fprintf(stderr, "embed: %s\n", bt_last_error());
    printf("step %lld/%lld reward_mean %.17g accuracy %.17g scored %ld\n", (long long)p.step,
           (long long)p.total, p.reward_mean, p.accuracy, (long)atomic_load(&scored));
    bt_run_destroy(&run);
    return status == BT_OK ? 0 : 1;
}
