/*  test_spec.c — the TASK and RESULT specs (spec.h) and the protocol's names (proto.h): every kind
    round-trips through a message, a field out of its range is refused naming the field, the
    fixed settings of the config never ride in a TASK, and roles and kinds parse back to their
    enums. */
#include "baton/proto.h"
#include "baton/spec.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

static const bt_spec_limits s_lim = {.n_variants = 2, .n_datasets = {3, 1}};

/*  t written into a TASK and read back; the message is returned for more checks. */
static bt_msg_t *s_round_trip(const bt_spec_task *t, bt_spec_task *back) {
    bt_msg_t *m = bt_msg_new(BT_MSG_TASK);
    CHECK_OK(bt_spec_task_to_msg(t, m));
    CHECK_OK(bt_proto_check(m)); /* what every TASK must carry */
    CHECK_OK(bt_spec_task_from_msg(m, &s_lim, back));
    CHECK(back->task == t->task && back->kind == t->kind && back->variant == t->variant);
    /* a train TASK's version is its batch's: the oldest its completions were sampled at */
    CHECK(back->version == (t->kind == BT_JOB_TRAIN ? t->u.train.batch->version : t->version));
    CHECK(back->hyper.lr == t->hyper.lr && back->hyper.kl_coef == t->hyper.kl_coef);
    CHECK(back->hyper.temperature == t->hyper.temperature);
    return m;
}

static bt_spec_task s_task(bt_job_kind kind) {
    return (bt_spec_task){.task = 41,
                          .kind = kind,
                          .variant = 1,
                          .version = 6,
                          .hyper = {.lr = 3e-5, .kl_coef = 0.04, .temperature = 0.7}};
}

/*  Not one fixed setting of the config rides in a TASK (they come in WELCOME); the tuner's values
    only as hyper.*.  (A train TASK's batch says its own group_size and sampling temperature.) */
static void s_no_config(const bt_msg_t *m) {
    const char *fixed[] = {"top_p", "top_k", "max_new_tokens", "timeout_ms", "lr", "kl_coef"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        CHECK(!bt_msg_has(m, fixed[i]));
}

static void test_names(void) {
    for (int r = 0; r < BT_ROLE_COUNT; r++) {
        bt_role back;
        CHECK_OK(bt_role_parse(bt_role_name((bt_role)r), &back));
        CHECK(back == (bt_role)r);
    }
    bt_role role;
    CHECK(bt_role_parse("admin", &role) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "got \"admin\"");
    for (int k = 0; k < BT_JOB_KIND_COUNT; k++) {
        bt_job_kind back;
        CHECK(bt_job_kind_parse(bt_job_kind_name((bt_job_kind)k), &back) && back == (bt_job_kind)k);
    }
    bt_job_kind kind;
    CHECK(!bt_job_kind_parse("pretrain", &kind) && !bt_job_kind_parse(NULL, &kind));
    CHECK(strcmp(bt_job_kind_name((bt_job_kind)99), "?") == 0);
    CHECK(bt_job_kind_role(BT_JOB_ROLLOUT) == BT_ROLE_ROLLOUT);
    CHECK(bt_job_kind_role(BT_JOB_EVAL) == BT_ROLE_EVAL);
    CHECK(bt_job_kind_role(BT_JOB_GROUP) == BT_ROLE_TRAINER);
}

/*  The rules every message type carries, as msg.c checked them before they moved here. */
static void test_message_rules(void) {
    bt_msg_t *m = bt_msg_new(BT_MSG_HELLO);
    CHECK(bt_proto_check(m) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "HELLO: field 'role': missing");
    bt_msg_set_str(m, "role", "admin");
    CHECK(bt_proto_check(m) == BT_EFORMAT);
    CHECK_STR_CONTAINS(
        bt_last_error(),
        "HELLO: field 'role': expected one of rollout, trainer, eval, got \"admin\"");
    bt_msg_destroy(&m);
    m = bt_msg_new(BT_MSG_PING); /* nothing required */
    CHECK_OK(bt_proto_check(m));
    bt_msg_destroy(&m);
}

static void test_rollout(void) {
    uint64_t prompts[3] = {5, 9, (uint64_t)1 << 40};
    bt_spec_task t = s_task(BT_JOB_ROLLOUT), back;
    t.u.rollout = (bt_spec_rollout){.seed = 77, .n_prompts = 3, .prompts = prompts};
    bt_msg_t *m = s_round_trip(&t, &back);
    CHECK(!bt_msg_has(m, "group_size") && !bt_msg_has(m, "temperature"));
    CHECK(back.u.rollout.seed == 77 && back.u.rollout.n_prompts == 3);
    CHECK(memcmp(back.u.rollout.prompts, prompts, sizeof prompts) == 0);
    s_no_config(m);
    bt_spec_task_release(&back);
    bt_spec_task_release(&back); /* idempotent */
    /* the tuner's temperature out of range is named */
    bt_msg_set_double(m, "hyper.temperature", -1);
    CHECK(bt_spec_task_from_msg(m, &s_lim, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'hyper.temperature': expected a number in");
    bt_msg_destroy(&m);
}

static void test_train(void) {
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    CHECK_OK(bt_rollout_batch_alloc(&b, 1, 2, 3, 4));
    b.version = 5;
    b.temperature = 0.7;
    for (int i = 0; i < 2; i++) {
        b.prompt_lens[i] = 2;
        b.lengths[i] = 3;
        b.rewards[i] = i;
    }
    double adv[2] = {-0.5, 0.5};
    bt_spec_task t = s_task(BT_JOB_TRAIN), back;
    t.u.train = (bt_spec_train){.publish = true,
                                .expect_version = 5,
                                .freeze_reference = true,
                                .inject_nan = false,
                                .batch = &b,
                                .adv = adv};
    bt_msg_t *m = s_round_trip(&t, &back);
    const bt_spec_train *g = &back.u.train;
    CHECK(g->publish && g->expect_version == 5 && g->freeze_reference && !g->inject_nan);
    CHECK(g->batch->n == 2 && g->batch->group_size == 2 && g->batch->rewards[1] == 1);
    CHECK(g->adv[0] == -0.5 && g->adv[1] == 0.5);
    s_no_config(m);
    bt_spec_task_release(&back);
    bt_msg_set_double(m, "hyper.kl_coef", 2e6);
    CHECK(bt_spec_task_from_msg(m, &s_lim, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'hyper.kl_coef'");
    bt_msg_destroy(&m);

    t.u.train.expect_version = -1; /* applies to any version: the field stays out */
    m = s_round_trip(&t, &back);
    CHECK(!bt_msg_has(m, "expect_version") && back.u.train.expect_version == -1);
    bt_spec_task_release(&back);
    bt_msg_destroy(&m);

    /* a batch with turn rewards: advantages per turn, (n, BT_MAX_TURNS) */
    b.has_turn_rewards = true;
    double turn_adv[2 * BT_MAX_TURNS] = {0};
    turn_adv[0] = 0.5;
    turn_adv[BT_MAX_TURNS + 1] = -2.0;
    t.u.train.adv = turn_adv;
    m = s_round_trip(&t, &back);
    CHECK(back.u.train.batch->has_turn_rewards);
    CHECK(memcmp(back.u.train.adv, turn_adv, sizeof turn_adv) == 0);
    bt_spec_task_release(&back);
    bt_msg_destroy(&m);
    b.has_turn_rewards = false; /* per-episode advantages on a batch with turn rewards: refused */
    t.u.train.adv = adv;
    m = bt_msg_new(BT_MSG_TASK);
    CHECK_OK(bt_spec_task_to_msg(&t, m));
    CHECK_OK(bt_msg_add_tensor(m, "turn_rewards", BT_F64, 2, (const int64_t[]){2, BT_MAX_TURNS},
                               turn_adv));
    CHECK(bt_spec_task_from_msg(m, &s_lim, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "'adv'");
    bt_spec_task_release(&back);
    bt_msg_destroy(&m);
    bt_rollout_batch_release(&b);
}

static void test_sft(void) {
    bt_spec_task t = s_task(BT_JOB_SFT), back;
    t.u.sft = (bt_spec_sft){.publish = false, .expect_version = 2, .start = 16, .count = 8};
    bt_msg_t *m = s_round_trip(&t, &back);
    CHECK(!back.u.sft.publish && back.u.sft.expect_version == 2);
    CHECK(back.u.sft.start == 16 && back.u.sft.count == 8);
    bt_msg_set_int(m, "count", 0);
    CHECK(bt_spec_task_from_msg(m, &s_lim, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'count': expected an integer in [1, 1048576]");
    bt_msg_set_double(m, "count", 8);
    bt_msg_set_double(m, "hyper.lr", 1e4);
    CHECK(bt_spec_task_from_msg(m, &s_lim, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'hyper.lr'");
    bt_msg_destroy(&m);
    /* the sender refuses what the receiver would */
    t.u.sft.count = 0;
    m = bt_msg_new(BT_MSG_TASK);
    CHECK(bt_spec_task_to_msg(&t, m) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'count'");
    bt_msg_destroy(&m);
}

static void test_eval(void) {
    bt_spec_task t = s_task(BT_JOB_EVAL), back;
    t.variant = 0;
    t.u.eval =
        (bt_spec_eval){.dataset = 2, .start = 100, .count = 50, .seed = 9, .robustness = true};
    bt_msg_t *m = s_round_trip(&t, &back);
    CHECK(back.u.eval.dataset == 2 && back.u.eval.start == 100 && back.u.eval.count == 50);
    CHECK(back.u.eval.seed == 9 && back.u.eval.robustness);
    bt_msg_destroy(&m);
    /* variant 1 has one dataset: dataset 2 is out of its range */
    t.variant = 1;
    m = bt_msg_new(BT_MSG_TASK);
    CHECK_OK(bt_spec_task_to_msg(&t, m));
    CHECK(bt_spec_task_from_msg(m, &s_lim, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(),
                       "TASK: field 'dataset': expected an integer in [0, 0], got 2");
    bt_msg_set_int(m, "variant", 2); /* this worker has two variants */
    CHECK(bt_spec_task_from_msg(m, &s_lim, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'variant': expected an integer in [0, 1]");
    bt_msg_destroy(&m);
}

static void test_restore_snapshot_group(void) {
    bt_spec_task t = s_task(BT_JOB_RESTORE), back;
    t.u.restore.initial = true;
    bt_msg_t *m = s_round_trip(&t, &back);
    CHECK(back.u.restore.initial);
    bt_msg_destroy(&m);

    bt_msg_t *state = bt_msg_new(BT_MSG_TASK);
    float w[2] = {1, 2};
    int64_t shape[1] = {2};
    CHECK_OK(bt_msg_add_tensor(state, "param.w", BT_F32, 1, shape, w));
    t.u.restore = (bt_spec_restore){.restore_version = 12, .adam_steps = 30, .state = state};
    m = s_round_trip(&t, &back);
    CHECK(!back.u.restore.initial && back.u.restore.restore_version == 12);
    CHECK(back.u.restore.adam_steps == 30);
    bt_msg_tensor got;
    CHECK_OK(bt_msg_get_tensor(m, "param.w", BT_F32, 1, &got)); /* shared into the TASK */
    bt_msg_destroy(&state);
    bt_msg_destroy(&m);

    t = s_task(BT_JOB_SNAPSHOT);
    t.u.snapshot.expect_version = 4;
    m = s_round_trip(&t, &back);
    CHECK(back.u.snapshot.expect_version == 4);
    bt_msg_destroy(&m);

    t = s_task(BT_JOB_GROUP);
    t.u.group = (bt_spec_group){.rank = 1, .world = 2, .store_port = 29500};
    snprintf(t.u.group.prefix, sizeof t.u.group.prefix, "g3");
    m = s_round_trip(&t, &back);
    CHECK(back.u.group.rank == 1 && back.u.group.world == 2 && back.u.group.store_port == 29500);
    CHECK(strcmp(back.u.group.prefix, "g3") == 0);
    s_no_config(m); /* workers.collective_timeout_ms comes in WELCOME */
    bt_msg_set_int(m, "rank", 2);
    CHECK(bt_spec_task_from_msg(m, &s_lim, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'rank': expected an integer in [0, 1], got 2");
    bt_msg_set_int(m, "rank", 1);
    bt_msg_set_int(m, "store_port", 0);
    CHECK(bt_spec_task_from_msg(m, &s_lim, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'store_port'");
    bt_msg_destroy(&m);
}

/*  A RESULT of kind through its spec and back. */
static bt_msg_t *s_result(const bt_spec_result *r, bt_spec_result *back) {
    bt_msg_t *m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_spec_result_to_msg(r, m));
    CHECK_OK(bt_proto_check(m));
    CHECK_OK(bt_spec_result_from_msg(m, r->kind, back));
    CHECK(back->task == r->task && back->kind == r->kind);
    return m;
}

static void test_results(void) {
    bt_spec_result r, back;
    bt_spec_result_init(&r, BT_JOB_ROLLOUT);
    r.task = 8;
    r.compute_s = 0.25;
    CHECK_OK(bt_rollout_batch_alloc(&r.batch, 2, 2, 2, 2));
    for (int i = 0; i < 4; i++)
        r.batch.prompt_lens[i] = r.batch.lengths[i] = 1;
    bt_msg_t *m = s_result(&r, &back);
    CHECK(back.batch.n_prompts == 2 && back.batch.n == 4);
    CHECK(!bt_msg_has(m, "trainer_version")); /* a rollout worker holds no trainer */
    bt_spec_result_release(&back);
    bt_spec_result_release(&r);
    bt_msg_destroy(&m);

    bt_spec_result_init(&r, BT_JOB_TRAIN);
    r.task = 9;
    r.trainer_version = 3;
    r.stats = (bt_trainer_stats){.loss = 0.5, .kl = 0.01, .tokens = 10, .version = 3};
    m = s_result(&r, &back);
    CHECK(back.trainer_version == 3 && back.stats.loss == 0.5 && back.stats.kl == 0.01);
    bt_msg_destroy(&m);

    bt_spec_result_init(&r, BT_JOB_SNAPSHOT);
    r.task = 10;
    r.trainer_version = 3;
    r.canary_loss = 1.5;
    m = s_result(&r, &back);
    CHECK(back.canary_loss == 1.5);
    bt_msg_set_double(m, "canary_loss", -1);
    CHECK(bt_spec_result_from_msg(m, BT_JOB_SNAPSHOT, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "RESULT: field 'canary_loss'");
    bt_msg_destroy(&m);

    bt_spec_result_init(&r, BT_JOB_GROUP);
    r.task = 11;
    m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_spec_result_to_msg(&r, m)); /* no trainer version: refused on arrival */
    CHECK(bt_spec_result_from_msg(m, BT_JOB_GROUP, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "RESULT: field 'trainer_version': missing");
    bt_msg_destroy(&m);

    bt_spec_result_init(&r, BT_JOB_EVAL);
    r.task = 12;
    bt_evaluator_sums_init(&r.sums, 4);
    r.sums.examples = 3;
    r.sums.completions = 12;
    m = s_result(&r, &back);
    CHECK(back.sums.examples == 3 && back.sums.samples == 4);
    bt_msg_destroy(&m);
}

int main(void) {
    test_names();
    test_message_rules();
    test_rollout();
    test_train();
    test_sft();
    test_eval();
    test_restore_snapshot_group();
    test_results();
    return check_exit();
}
