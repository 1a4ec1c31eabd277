/*  test_mixture.c — prompt draws over data sources: frequencies follow the weights (a binomial
    bound), each source's stream is taken in order, the position and the curriculum survive a
    JSON round trip exactly, and the curriculum drops a record after `window` all-solved (or
    all-failed) groups, and only then. */
#define _DEFAULT_SOURCE
#include "baton/mixture.h"
#include "baton/rollout.h"
#include "baton/source.h"

#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_tmp[64];

/*  A JSONL task of n records "q<i>" -> "<i>". */
static bt_source_t *s_jsonl(int n) {
    char path[128];
    snprintf(path, sizeof path, "%s/t%d.jsonl", s_tmp, n);
    FILE *f = fopen(path, "w");
    for (int i = 0; f && i < n; i++)
        fprintf(f, "{\"prompt\": \"q%d\", \"answer\": \"%d\"}\n", i, i);
    if (f)
        fclose(f);
    bt_source_jsonl_config c = {.train_path = path, .heldout_path = path, .seed = 5};
    bt_source_t *t = NULL;
    CHECK_OK(bt_source_new_jsonl(&c, &t));
    return t;
}

static void test_frequencies_follow_weights(void) {
    bt_mixture_config mc = {.n_sources = 3, .seed = 11};
    bt_mixture_t *m = bt_mixture_new(&mc);
    bt_source_t *tasks[3] = {NULL, NULL, NULL}; /* no curriculum: the tasks are not read */
    double w[3] = {2, 1, 1};
    const int N = 40000;
    int64_t count[3] = {0}, dropped = 0;
    uint64_t next[3] = {0}, id = 0;
    bool in_order = true;
    for (int i = 0; i < N; i++) {
        if (i == N / 2) /* the weights may change between draws (the tuner's mixture rule) */
            w[0] = 0.5, w[1] = 3, w[2] = 0.5;
        CHECK_OK(bt_mixture_next(m, tasks, w, 1, &id, NULL, 0, &dropped));
        int s = BT_PROMPT_SOURCE(id);
        in_order &= BT_PROMPT_INDEX(id) == next[s]++;
        count[s]++;
    }
    CHECK(in_order); /* each source's stream, index after index */
    CHECK(dropped == 0);
    /* expected: half the draws at 2:1:1, half at 0.5:3:0.5; each count within 5 sigma */
    const double p[3] = {0.5 * 0.5 + 0.5 * 0.125, 0.5 * 0.25 + 0.5 * 0.75,
                         0.5 * 0.25 + 0.5 * 0.125};
    for (int s = 0; s < 3; s++) {
        double sigma = sqrt(N / 2.0 * 0.5 * 0.5 + N / 2.0 * 0.25 * 0.75); /* a loose upper bound */
        CHECK_NEAR((double)count[s], N * p[s], 5 * sigma);
    }
    bt_mixture_position pos = bt_mixture_get_position(m);
    CHECK(pos.draws == (uint64_t)N);
    CHECK(pos.drawn[0] + pos.drawn[1] + pos.drawn[2] == (uint64_t)N);
    bt_mixture_destroy(&m);
    CHECK(m == NULL);
}

/*  A resumed mixture (position and streaks read back from JSON) draws and drops exactly as the
    one that kept going. */
static void test_round_trip(void) {
    bt_source_t *a = s_jsonl(7), *b = s_jsonl(5);
    bt_source_t *tasks[2] = {a, b};
    bt_mixture_config mc = {.n_sources = 2, .seed = 3, .window = 1, .skip_solved = true};
    bt_mixture_t *m = bt_mixture_new(&mc);
    double w[2] = {1, 1};
    uint64_t id, dropped[64];
    int64_t n_dropped = 0;
    for (int i = 0; i < 9; i++) { /* some records solved by every sample: dropped next time */
        CHECK_OK(bt_mixture_next(m, tasks, w, 100, &id, dropped, 64, &n_dropped));
        bt_mixture_observe(m, tasks, id, i % 3 == 0 ? 4 : 2, 4);
    }
    bt_mixture_position pos = bt_mixture_get_position(m);
    char *json = bt_mixture_to_json(m, &pos);
    CHECK(json != NULL);
    bt_mixture_t *r = bt_mixture_new(&mc);
    bt_mixture_position back;
    CHECK_OK(bt_mixture_from_json(r, json, "data.json", &back));
    CHECK(memcmp(&back, &pos, sizeof pos) == 0);
    CHECK(bt_mixture_dropping(r) == bt_mixture_dropping(m) && bt_mixture_dropping(m) == 3);
    bool same = true;
    int64_t d1 = 0, d2 = 0;
    for (int i = 0; i < 40; i++) {
        uint64_t x, y;
        CHECK_OK(bt_mixture_next(m, tasks, w, 100, &x, dropped, 64, &d1));
        CHECK_OK(bt_mixture_next(r, tasks, w, 100, &y, dropped, 64, &d2));
        same &= x == y;
    }
    CHECK(same && d1 == d2 && d2 > 0);
    CHECK(bt_mixture_dropped(m) == bt_mixture_dropped(r));

    /* malformed state is refused, naming the field */
    CHECK(bt_mixture_from_json(r,
                               "{\"draws\": 1, \"dropped\": 0, \"drawn\": [1], \"curriculum\": []}",
                               "x.json", &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "x.json: drawn: expected 2 counts");
    CHECK(bt_mixture_from_json(r,
                               "{\"draws\": 1, \"dropped\": 0, \"drawn\": [1, 0], "
                               "\"curriculum\": [[1, 2]]}",
                               "x.json", &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "curriculum[0]: expected [prompt id, solved, failed]");
    free(json);
    bt_mixture_destroy(&m);
    bt_mixture_destroy(&r);
    bt_source_destroy(&a);
    bt_source_destroy(&b);
}

/*  window 2: a record is dropped only after 2 all-failed groups in a row; a mixed group resets
    its streak; skip_solved off keeps the always-solved ones. */
static void test_curriculum(void) {
    bt_source_t *a = s_jsonl(4);
    bt_source_t *tasks[1] = {a};
    bt_mixture_config mc = {.n_sources = 1, .seed = 1, .window = 2, .skip_failed = true};
    bt_mixture_t *m = bt_mixture_new(&mc);
    double w[1] = {1};
    uint64_t id, dropped[64];
    int64_t n_dropped = 0;
    /* epoch 0 and 1 (indices 0..7): record of index i gets the outcome out[record] */
    for (int i = 0; i < 8; i++) {
        CHECK_OK(bt_mixture_next(m, tasks, w, 100, &id, dropped, 64, &n_dropped));
        uint64_t rec = bt_source_record(a, BT_PROMPT_INDEX(id));
        int64_t correct = rec == 0 ? 0 : rec == 1 ? (i < 4 ? 0 : 1) : rec == 2 ? 3 : 0;
        /* record 0: failed twice; 1: failed, then mixed; 2: solved (kept: skip_solved off);
           3: failed twice */
        bt_mixture_observe(m, tasks, id, correct, 3);
    }
    CHECK(n_dropped == 0); /* nothing is dropped before its window is full */
    CHECK(bt_mixture_dropping(m) == 2);
    /* epoch 2 (indices 8..11): records 0 and 3 are dropped, 1 and 2 handed out; the third prompt
       is epoch 3's first kept one */
    bool kept[4] = {false};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(bt_mixture_next(m, tasks, w, 100, &id, dropped, 64, &n_dropped));
        if (i < 2)
            kept[bt_source_record(a, BT_PROMPT_INDEX(id))] = true;
    }
    CHECK(kept[1] && kept[2] && !kept[0] && !kept[3]);
    int in_epoch_2 = 0;
    for (int64_t i = 0; i < n_dropped; i++) {
        uint64_t rec = bt_source_record(a, BT_PROMPT_INDEX(dropped[i]));
        CHECK(rec == 0 || rec == 3);
        in_epoch_2 += BT_PROMPT_INDEX(dropped[i]) >= 8 && BT_PROMPT_INDEX(dropped[i]) < 12;
    }
    CHECK(in_epoch_2 == 2 && bt_mixture_dropped(m) == n_dropped);
    /* the epochs still move on: 11 prompts handed out, the dropped ones drawn too */
    CHECK(bt_mixture_get_position(m).drawn[0] == 11 + (uint64_t)n_dropped);
    /* everything dropped: an error, not a hang */
    bt_mixture_config all = {.n_sources = 1, .seed = 1, .window = 1, .skip_failed = true};
    bt_mixture_t *z = bt_mixture_new(&all);
    for (int i = 0; i < 4; i++) {
        CHECK_OK(bt_mixture_next(z, tasks, w, 100, &id, dropped, 64, &n_dropped));
        bt_mixture_observe(z, tasks, id, 0, 3);
    }
    CHECK(bt_mixture_next(z, tasks, w, 50, &id, dropped, 64, &n_dropped) == BT_ERANGE);
    CHECK_STR_CONTAINS(bt_last_error(), "dropped by data.curriculum");
    bt_mixture_destroy(&z);
    bt_mixture_destroy(&m);
    bt_source_destroy(&a);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_mixture_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    test_frequencies_follow_weights();
    test_round_trip();
    test_curriculum();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
