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
    CHECK(bt_registry_next_assignment(r, 0, &task, &w) && task == r0 && w == a);
    CHECK(bt_registry_next_assignment(r, 0, &task, &w) && task == r1 && w == b);
    CHECK(!bt_registry_next_assignment(r, 0, &task, &w));
    CHECK(bt_registry_pending(r) == 4);

    /* a completes r0; a duplicate of that result is refused */
    CHECK(bt_registry_complete(r, r0, a));
    CHECK(!bt_registry_complete(r, r0, a));
    CHECK(bt_registry_task_state(r, r0) == BT_TASK_DONE);
    CHECK(bt_registry_next_assignment(r, 0, &task, &w) && task == r2 && w == a);

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
    CHECK(bt_registry_next_assignment(r, 0, &task, &w) && task == r1 && w == a);
    CHECK(bt_registry_task_attempts(r, r1) == 2);

    /* b rejoins with the same peer id: same id, idle, takes r2 */
    CHECK(s_join(r, BT_ROLE_ROLLOUT, "b", 1700) == b);
    CHECK(bt_registry_next_assignment(r, 0, &task, &w) && task == r2 && w == b);
    CHECK(bt_registry_complete(r, r1, a) && bt_registry_complete(r, r2, b));
    CHECK(bt_registry_pending(r) == 1); /* the eval task */

    /* a second HELLO from a busy worker re-queues what it held */
    int32_t e = s_join(r, BT_ROLE_EVAL, "e", 1800);
    CHECK(bt_registry_next_assignment(r, 0, &task, &w) && task == e0 && w == e);
    CHECK(s_join(r, BT_ROLE_EVAL, "e", 1900) == e);
    CHECK(bt_registry_task_state(r, e0) == BT_TASK_QUEUED);
    CHECK(!bt_registry_complete(r, e0, e));

    /* data-parallel shares: a task only t1 may take waits for t1 even when t2 is idle and t1 is
       lost; cancelling it refuses t1's late report and frees t1 */
    CHECK(bt_registry_next_assignment(r, 0, &task, &w) && task == e0 && w == e);
    CHECK(bt_registry_complete(r, e0, e));
    int32_t t1 = s_join(r, BT_ROLE_TRAINER, "t1", 2000),
            t2 = s_join(r, BT_ROLE_TRAINER, "t2", 2000);
    int64_t s1 = bt_registry_add_task_only(r, BT_ROLE_TRAINER, t1, NULL);
    int64_t s2 = bt_registry_add_task_only(r, BT_ROLE_TRAINER, t2, NULL);
    CHECK(bt_registry_next_assignment(r, 0, &task, &w) && task == s1 && w == t1);
    CHECK(bt_registry_next_assignment(r, 0, &task, &w) && task == s2 && w == t2);
    CHECK(bt_registry_complete(r, s2, t2));
    bt_registry_cancel(r, s1); /* t1 still computes it */
    CHECK(bt_registry_worker(r, t1)->state == BT_WORKER_BUSY);
    CHECK(bt_registry_pending(r) == 0); /* a cancelled task is not pending */
    CHECK(!bt_registry_complete(r, s1, t1));
    CHECK(bt_registry_worker(r, t1)->state == BT_WORKER_IDLE);
    int64_t s3 = bt_registry_add_task_only(r, BT_ROLE_TRAINER, t1, NULL);
    bt_registry_remove(r, t1);
    CHECK(!bt_registry_next_assignment(r, 0, &task, &w)); /* t2 idle, but s3 is t1's alone */
    CHECK(bt_registry_task_state(r, s3) == BT_TASK_QUEUED);
    bt_registry_cancel(r, s3);
    CHECK(bt_registry_task_state(r, s3) == BT_TASK_CANCELLED);
    CHECK(s_join(r, BT_ROLE_TRAINER, "t1", 2100) == t1);
    CHECK(!bt_registry_next_assignment(r, 0, &task, &w)); /* never handed out again */

    /* a worker that holds its task past the deadline is quarantined: the task goes back to the
       queue for another worker, the quarantined one gets nothing more and its late result is
       refused; it no longer counts as live for its role */
    int32_t q1 = s_join(r, BT_ROLE_EVAL, "q1", 3000), q2 = s_join(r, BT_ROLE_EVAL, "q2", 3000);
    bt_registry_remove(r, e);
    int64_t j1 = bt_registry_add_task(r, BT_ROLE_EVAL, NULL);
    CHECK(bt_registry_next_assignment(r, 3100, &task, &w) && task == j1 && w == q1);
    CHECK(bt_registry_task_assigned_ms(r, j1) == 3100 && bt_registry_task_worker(r, j1) == q1);
    bt_registry_quarantine(r, q1);
    CHECK(bt_registry_task_state(r, j1) == BT_TASK_QUEUED);
    CHECK(bt_registry_live(r, BT_ROLE_EVAL) == 1);
    CHECK(bt_registry_next_assignment(r, 3200, &task, &w) && task == j1 && w == q2);
    CHECK(!bt_registry_complete(r, j1, q1));
    int64_t j2 = bt_registry_add_task(r, BT_ROLE_EVAL, NULL);
    CHECK(!bt_registry_next_assignment(r, 3300, &task, &w)); /* q2 busy, q1 quarantined */
    CHECK(bt_registry_complete(r, j1, q2));
    CHECK(bt_registry_next_assignment(r, 3400, &task, &w) && task == j2 && w == q2);

    /* a controller that did not run for a while: touch_all keeps its workers from expiring */
    bt_registry_touch_all(r, 9000);
    CHECK(bt_registry_expire(r, 9500) == 0);

    /* a second live worker of the same name is refused, naming it; once the first is lost the
       name is free again */
    CHECK(bt_registry_join(r, BT_ROLE_EVAL, "q2", (const uint8_t *)"other", 5, 9600) == -1);
    CHECK_STR_CONTAINS(bt_last_error(), "\"q2\" is already in the run");
    bt_registry_cancel_pending(r);
    CHECK(bt_registry_task_state(r, j2) == BT_TASK_CANCELLED && bt_registry_pending(r) == 0);
    CHECK(!bt_registry_complete(r, j2, q2)); /* frees q2 */
    bt_registry_remove(r, q2);
    CHECK(bt_registry_join(r, BT_ROLE_EVAL, "q2", (const uint8_t *)"other", 5, 9700) >= 0);

    /* a flaky worker that reconnects with a new peer id each time, 5000 times: lost entries are
       reclaimed, so a newcomer can still join afterwards */
    bt_registry_t *f = bt_registry_new(1000);
    for (int i = 0; i < 5000; i++) {
        char peer[16];
        snprintf(peer, sizeof peer, "p%d", i);
        int32_t id = s_join(f, BT_ROLE_ROLLOUT, peer, i);
        CHECK(id >= 0);
        bt_registry_remove(f, id);
    }
    int32_t late = bt_registry_join(f, BT_ROLE_TRAINER, "late", (const uint8_t *)"L", 1, 6000);
    CHECK(late >= 0 && bt_registry_worker(f, late)->incarnation > 0);
    CHECK(bt_registry_worker_count(f) <= 4096);
    bt_registry_destroy(&f);

    bt_role role;
    CHECK(bt_role_parse("trainer", &role) == BT_OK && role == BT_ROLE_TRAINER);
    CHECK(bt_role_parse("learner", &role) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "\"learner\"");
    bt_registry_destroy(&r);
    CHECK(r == NULL);
    return check_exit();
}
