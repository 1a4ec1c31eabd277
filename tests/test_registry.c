/*  test_registry.c — the controller's worker and task table: assignment by role, expiry re-queues
    in-flight tasks, late and duplicate results are refused (nothing counted twice), tasks bound to
    one worker and cancelled tasks. */
#include "baton/registry.h"
#include "check.h"

static int32_t s_join(bt_registry_t *r, bt_role role, const char *peer, int64_t now) {
    return bt_registry_join(r, role, peer, (const uint8_t *)peer, strlen(peer), now);
}

int main(void) {
    bt_registry_t *r = bt_registry_new(1000);
    int32_t a = s_join(r, BT_ROLE_ROLLOUT, "a", 0), b = s_join(r, BT_ROLE_ROLLOUT, "b", 0);
    int32_t t = s_join(r, BT_ROLE_TRAINER, "t", 0);
    CHECK(a == 0 && b == 1 && t == 2);
    CHECK(bt_registry_live(r, BT_ROLE_ROLLOUT) == 2 && bt_registry_live(r, BT_ROLE_EVAL) == 0);

    int payload[4];
    int64_t r0 = bt_registry_add_task(r, BT_ROLE_ROLLOUT, &payload[0]);
    int64_t r1 = bt_registry_add_task(r, BT_ROLE_ROLLOUT, &payload[1]);
    int64_t r2 = bt_registry_add_task(r, BT_ROLE_ROLLOUT, &payload[2]);
    int64_t e0 = bt_registry_add_task(r, BT_ROLE_EVAL, &payload[3]);
    CHECK(bt_registry_task_user(r, r1) == &payload[1]);

    /* oldest task first, to an idle worker of its role; eval waits for an eval worker */
    int64_t task;
    int32_t w;
    CHECK(bt_registry_next_assignment(r, &task, &w) && task == r0 && w == a);
    CHECK(bt_registry_next_assignment(r, &task, &w) && task == r1 && w == b);
    CHECK(!bt_registry_next_assignment(r, &task, &w));
    CHECK(bt_registry_pending(r) == 4);

    /* a completes r0; a duplicate of that result is refused */
    CHECK(bt_registry_complete(r, r0, a));
    CHECK(!bt_registry_complete(r, r0, a));
    CHECK(bt_registry_task_state(r, r0) == BT_TASK_DONE);
    CHECK(bt_registry_next_assignment(r, &task, &w) && task == r2 && w == a);

    /* b goes silent while holding r1: expiry loses it and re-queues r1 */
    bt_registry_touch(r, a, 1500);
    bt_registry_touch(r, t, 1500);
    CHECK(bt_registry_expire(r, 1600) == 1);
    CHECK(bt_registry_worker(r, b)->state == BT_WORKER_LOST);
    CHECK(bt_registry_task_state(r, r1) == BT_TASK_QUEUED);
    CHECK(bt_registry_live(r, BT_ROLE_ROLLOUT) == 1);
    /* b's late result for r1 is refused: r1 will be counted once, from its new holder */
    CHECK(!bt_registry_complete(r, r1, b));
    CHECK(bt_registry_find_peer(r, (const uint8_t *)"b", 1) == NULL);

    /* a fails r2: it is queued again, ahead of nothing older; a gets r1 (older) first */
    CHECK(bt_registry_fail(r, r2, a));
    CHECK(bt_registry_next_assignment(r, &task, &w) && task == r1 && w == a);
    CHECK(bt_registry_task_attempts(r, r1) == 2);

    /* b rejoins with the same peer id: same id, idle, takes r2 */
    CHECK(s_join(r, BT_ROLE_ROLLOUT, "b", 1700) == b);
    CHECK(bt_registry_next_assignment(r, &task, &w) && task == r2 && w == b);
    CHECK(bt_registry_complete(r, r1, a) && bt_registry_complete(r, r2, b));
    CHECK(bt_registry_pending(r) == 1); /* the eval task */

    /* a second HELLO from a busy worker re-queues what it held */
    int32_t e = s_join(r, BT_ROLE_EVAL, "e", 1800);
    CHECK(bt_registry_next_assignment(r, &task, &w) && task == e0 && w == e);
    CHECK(s_join(r, BT_ROLE_EVAL, "e", 1900) == e);
    CHECK(bt_registry_task_state(r, e0) == BT_TASK_QUEUED);
    CHECK(!bt_registry_complete(r, e0, e));

    /* data-parallel shares: a task only t1 may take waits for t1 even when t2 is idle and t1 is
       lost; cancelling it refuses t1's late report and frees t1 */
    CHECK(bt_registry_next_assignment(r, &task, &w) && task == e0 && w == e);
    CHECK(bt_registry_complete(r, e0, e));
    int32_t t1 = s_join(r, BT_ROLE_TRAINER, "t1", 2000),
            t2 = s_join(r, BT_ROLE_TRAINER, "t2", 2000);
    int64_t s1 = bt_registry_add_task_only(r, BT_ROLE_TRAINER, t1, NULL);
    int64_t s2 = bt_registry_add_task_only(r, BT_ROLE_TRAINER, t2, NULL);
    CHECK(bt_registry_next_assignment(r, &task, &w) && task == s1 && w == t1);
    CHECK(bt_registry_next_assignment(r, &task, &w) && task == s2 && w == t2);
    CHECK(bt_registry_complete(r, s2, t2));
    bt_registry_cancel(r, s1); /* t1 still computes it */
    CHECK(bt_registry_worker(r, t1)->state == BT_WORKER_BUSY);
    CHECK(bt_registry_pending(r) == 0); /* a cancelled task is not pending */
    CHECK(!bt_registry_complete(r, s1, t1));
    CHECK(bt_registry_worker(r, t1)->state == BT_WORKER_IDLE);
    int64_t s3 = bt_registry_add_task_only(r, BT_ROLE_TRAINER, t1, NULL);
    bt_registry_remove(r, t1);
    CHECK(!bt_registry_next_assignment(r, &task, &w)); /* t2 idle, but s3 is t1's alone */
    CHECK(bt_registry_task_state(r, s3) == BT_TASK_QUEUED);
    bt_registry_cancel(r, s3);
    CHECK(bt_registry_task_state(r, s3) == BT_TASK_CANCELLED);
    CHECK(s_join(r, BT_ROLE_TRAINER, "t1", 2100) == t1);
    CHECK(!bt_registry_next_assignment(r, &task, &w)); /* never handed out again */

    bt_role role;
    CHECK(bt_role_parse("trainer", &role) == BT_OK && role == BT_ROLE_TRAINER);
    CHECK(bt_role_parse("learner", &role) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "\"learner\"");
    bt_registry_destroy(&r);
    CHECK(r == NULL);
    return check_exit();
}
