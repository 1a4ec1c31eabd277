/*  test_messages.c — batches, weights and evaluation sums survive the trip through a wire message
    exactly; a payload whose sizes disagree is refused; group selection and concatenation move
    whole rows. */
#include "baton/messages.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*  A batch of P prompts x G completions whose every value encodes its position. */
static void s_fill(bt_rollout_batch *b, int64_t P, int64_t G, int64_t base) {
    CHECK_OK(bt_rollout_batch_alloc(b, P, G, 4, 3));
    b->version = 7;
    b->temperature = 0.75;
    for (int64_t p = 0; p < P; p++)
        b->indices[p] = (uint64_t)(base + p);
    for (int64_t r = 0; r < b->n; r++) {
        b->prompt_lens[r] = 1 + r % 4;
        b->lengths[r] = r % 4;
        b->rewards[r] = (double)(base + r) / 3.0;
        b->correct[r] = r % 2;
        b->finished[r] = r % 3 == 0;
        for (int64_t t = 0; t < 4; t++)
            b->prompt_tokens[r * 4 + t] = (int32_t)(base * 100 + r * 10 + t);
        for (int64_t t = 0; t < 3; t++) {
            b->tokens[r * 3 + t] = (int32_t)(base * 100 + r * 10 + t + 5);
            b->logprobs[r * 3 + t] = -(float)(r + t) / 7.0f;
        }
    }
}

/*  Row r of a equals row s of b in every array. */
static bool s_same_row(const bt_rollout_batch *a, int64_t r, const bt_rollout_batch *b, int64_t s) {
    bool same = a->prompt_lens[r] == b->prompt_lens[s] && a->lengths[r] == b->lengths[s] &&
                a->rewards[r] == b->rewards[s] && a->correct[r] == b->correct[s] &&
                a->finished[r] == b->finished[s];
    for (int64_t t = 0; t < a->prompt_lens[r]; t++)
        same &= a->prompt_tokens[r * a->max_prompt_len + t] ==
                b->prompt_tokens[s * b->max_prompt_len + t];
    for (int64_t t = 0; t < a->lengths[r]; t++)
        same &= a->tokens[r * a->max_new_tokens + t] == b->tokens[s * b->max_new_tokens + t] &&
                a->logprobs[r * a->max_new_tokens + t] == b->logprobs[s * b->max_new_tokens + t];
    return same;
}

static void test_batch_round_trip(void) {
    bt_rollout_batch a, b;
    bt_rollout_batch_init(&a);
    bt_rollout_batch_init(&b);
    s_fill(&a, 3, 2, 1);
    bt_msg_t *m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_batch_to_msg(&a, m));
    CHECK_OK(bt_batch_from_msg(m, &b));
    CHECK(b.n == 6 && b.n_prompts == 3 && b.group_size == 2 && b.version == 7);
    CHECK(b.temperature == 0.75 && b.indices[2] == 3);
    for (int64_t r = 0; r < 6; r++)
        CHECK(s_same_row(&a, r, &b, r));
    bt_msg_destroy(&m);

    /* a length beyond the stride is refused, naming the tensor */
    a.lengths[4] = 9;
    m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_batch_to_msg(&a, m));
    CHECK(bt_batch_from_msg(m, &b) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "'lengths': row 4 holds 9");
    bt_msg_destroy(&m);
    /* rows that disagree with n_prompts x group_size are refused */
    a.lengths[4] = 1;
    m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_batch_to_msg(&a, m));
    CHECK_OK(bt_msg_set_int(m, "n_prompts", 2));
    CHECK(bt_batch_from_msg(m, &b) == BT_EFORMAT);
    bt_msg_destroy(&m);
    bt_rollout_batch_release(&a);
    bt_rollout_batch_release(&b);
}

static void test_select_and_concat(void) {
    bt_rollout_batch a, b, parts[2], joined, kept;
    bt_rollout_batch_init(&a);
    bt_rollout_batch_init(&b);
    bt_rollout_batch_init(&joined);
    bt_rollout_batch_init(&kept);
    s_fill(&a, 2, 3, 0);
    s_fill(&b, 1, 3, 50);
    b.version = 5;
    parts[0] = a;
    parts[1] = b;
    CHECK_OK(bt_batch_concat(parts, 2, &joined));
    CHECK(joined.n == 9 && joined.n_prompts == 3 && joined.version == 5);
    for (int64_t r = 0; r < 6; r++)
        CHECK(s_same_row(&a, r, &joined, r));
    for (int64_t r = 0; r < 3; r++)
        CHECK(s_same_row(&b, r, &joined, 6 + r));
    bool keep[3] = {false, true, true};
    CHECK_OK(bt_batch_keep_groups(&joined, keep, &kept));
    CHECK(kept.n_prompts == 2 && kept.n == 6 && kept.indices[0] == 1 && kept.indices[1] == 50);
    for (int64_t r = 0; r < 6; r++)
        CHECK(s_same_row(&joined, 3 + r, &kept, r));
    bt_rollout_batch_release(&a);
    bt_rollout_batch_release(&b);
    bt_rollout_batch_release(&joined);
    bt_rollout_batch_release(&kept);
}

/*  Row r of a equals row s of b in the episode fields: loss_mask and turn within the length,
    n_turns, every turn reward. */
static bool s_same_episode(const bt_rollout_batch *a, int64_t r, const bt_rollout_batch *b,
                           int64_t s) {
    bool same = a->n_turns[r] == b->n_turns[s];
    for (int64_t t = 0; t < a->lengths[r]; t++)
        same &=
            a->loss_mask[r * a->max_new_tokens + t] == b->loss_mask[s * b->max_new_tokens + t] &&
            a->turn[r * a->max_new_tokens + t] == b->turn[s * b->max_new_tokens + t];
    for (int64_t t = 0; t < BT_MAX_TURNS; t++)
        same &= a->turn_rewards[r * BT_MAX_TURNS + t] == b->turn_rewards[s * BT_MAX_TURNS + t];
    return same;
}

/*  Multi-turn episodes: the loss mask, turns and turn rewards survive the trip, and through
    concat and keep_groups; a single-turn batch's message is the old format (its 9 tensors and no
    more), and a message in the old format, written here tensor by tensor, reads as all ones, one
    turn, no turn rewards; episode fields that contradict each other are refused by name. */
static void test_episode_round_trip(void) {
    bt_rollout_batch a, b, parts[2], joined, kept;
    bt_rollout_batch_init(&a);
    bt_rollout_batch_init(&b);
    bt_rollout_batch_init(&joined);
    bt_rollout_batch_init(&kept);
    s_fill(&a, 2, 2, 1); /* lengths 0, 1, 2, 3 */
    bt_msg_t *m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_batch_to_msg(&a, m));
    CHECK(bt_msg_tensor_count(m) == 9); /* single-turn: what it was before episodes */
    bt_msg_destroy(&m);
    for (int64_t i = 0; i < a.n * a.max_new_tokens; i++)
        CHECK(a.loss_mask[i] == 1 && a.turn[i] == 0);
    for (int64_t r = 0; r < a.n; r++)
        CHECK(a.n_turns[r] == 1);
    CHECK(!a.has_turn_rewards);

    /* row 3: model token, observation, model token of turn 1 */
    a.loss_mask[3 * 3 + 1] = 0;
    a.turn[3 * 3 + 1] = 0;
    a.turn[3 * 3 + 2] = 1;
    a.n_turns[3] = 2;
    a.turn_rewards[3 * BT_MAX_TURNS + 0] = 0.25;
    a.turn_rewards[3 * BT_MAX_TURNS + 1] = -1.5;
    a.turn_rewards[1 * BT_MAX_TURNS + 0] = 2.0;
    a.has_turn_rewards = true;
    m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_batch_to_msg(&a, m));
    CHECK(bt_msg_tensor_count(m) == 13);
    CHECK_OK(bt_batch_from_msg(m, &b));
    CHECK(b.has_turn_rewards && b.loss_mask[3 * 3 + 1] == 0 && b.turn[3 * 3 + 2] == 1);
    for (int64_t r = 0; r < a.n; r++)
        CHECK(s_same_row(&a, r, &b, r) && s_same_episode(&a, r, &b, r));
    bt_msg_destroy(&m);

    /* concat and keep_groups move the episode fields with their rows */
    s_fill(&b, 1, 2, 9);
    b.has_turn_rewards = true;
    b.turn_rewards[1 * BT_MAX_TURNS] = 7.0;
    parts[0] = a;
    parts[1] = b;
    CHECK_OK(bt_batch_concat(parts, 2, &joined));
    CHECK(joined.has_turn_rewards);
    for (int64_t r = 0; r < 4; r++)
        CHECK(s_same_episode(&a, r, &joined, r));
    CHECK(s_same_episode(&b, 1, &joined, 5));
    bool keep[3] = {false, true, true};
    CHECK_OK(bt_batch_keep_groups(&joined, keep, &kept));
    CHECK(kept.has_turn_rewards);
    for (int64_t r = 0; r < 4; r++)
        CHECK(s_same_episode(&joined, 2 + r, &kept, r));
    /* turn rewards for some parts only (a mixture of sources): a row without them gets its
       reward as its last turn's, nothing in the others */
    parts[1].has_turn_rewards = false;
    b.rewards[0] = -2.5;
    b.rewards[1] = 4.0;
    CHECK_OK(bt_batch_concat(parts, 2, &joined));
    CHECK(joined.has_turn_rewards);
    for (int64_t r = 0; r < 2; r++) {
        const double *tr = joined.turn_rewards + (4 + r) * BT_MAX_TURNS;
        for (int64_t t = 0; t < BT_MAX_TURNS; t++)
            CHECK(tr[t] == (t == b.n_turns[r] - 1 ? b.rewards[r] : 0.0));
    }
    for (int64_t r = 0; r < 4; r++)
        CHECK(s_same_episode(&a, r, &joined, r));

    /* the old format, tensor by tensor: 2 completions of 3 tokens */
    m = bt_msg_new(BT_MSG_RESULT);
    const int64_t one[1] = {1}, two[1] = {2}, pt[2] = {2, 2}, tk[2] = {2, 3};
    const uint64_t ix[1] = {4};
    const int32_t prompt[4] = {256, 1, 256, 2}, tokens[6] = {5, 6, 7, 8, 9, 10};
    const int64_t plen[2] = {2, 2}, len[2] = {3, 2};
    const float lp[6] = {-1, -2, -3, -4, -5, -6};
    const double rw[2] = {1, 0};
    const uint8_t flags[2] = {1, 0};
    CHECK_OK(bt_msg_set_int(m, "version", 3));
    CHECK_OK(bt_msg_set_int(m, "group_size", 2));
    CHECK_OK(bt_msg_set_int(m, "n_prompts", 1));
    CHECK_OK(bt_msg_set_double(m, "temperature", 1.0));
    CHECK_OK(bt_msg_add_tensor(m, "indices", BT_I64, 1, one, ix));
    CHECK_OK(bt_msg_add_tensor(m, "prompt_tokens", BT_I32, 2, pt, prompt));
    CHECK_OK(bt_msg_add_tensor(m, "prompt_lens", BT_I64, 1, two, plen));
    CHECK_OK(bt_msg_add_tensor(m, "tokens", BT_I32, 2, tk, tokens));
    CHECK_OK(bt_msg_add_tensor(m, "logprobs", BT_F32, 2, tk, lp));
    CHECK_OK(bt_msg_add_tensor(m, "lengths", BT_I64, 1, two, len));
    CHECK_OK(bt_msg_add_tensor(m, "rewards", BT_F64, 1, two, rw));
    CHECK_OK(bt_msg_add_tensor(m, "correct", BT_U8, 1, two, flags));
    CHECK_OK(bt_msg_add_tensor(m, "finished", BT_U8, 1, two, flags));
    CHECK_OK(bt_batch_from_msg(m, &b));
    CHECK(b.n == 2 && b.tokens[4] == 9 && !b.has_turn_rewards);
    for (int64_t i = 0; i < 6; i++)
        CHECK(b.loss_mask[i] == 1 && b.turn[i] == 0);
    CHECK(b.n_turns[0] == 1 && b.n_turns[1] == 1);
    for (int64_t i = 0; i < 2 * BT_MAX_TURNS; i++)
        CHECK(b.turn_rewards[i] == 0.0);

    /* a token of turn 2 in an episode of 2 turns; n_turns 0; a NaN turn reward */
    const uint8_t turn[6] = {0, 1, 2, 0, 0, 0};
    const int64_t n_turns[2] = {2, 1};
    CHECK_OK(bt_msg_add_tensor(m, "turn", BT_U8, 2, tk, turn));
    CHECK_OK(bt_msg_add_tensor(m, "n_turns", BT_I64, 1, two, n_turns));
    CHECK(bt_batch_from_msg(m, &b) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "'turn': row 0, token 2: turn 2 of an episode of 2");
    bt_msg_destroy(&m);
    m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_batch_to_msg(&a, m));
    bt_msg_t *m2 = bt_msg_new(BT_MSG_RESULT); /* a's, with n_turns 0 in row 1 */
    for (int i = 0; i < bt_msg_tensor_count(m); i++)
        if (strcmp(bt_msg_tensor_at(m, i).name, "n_turns") != 0)
            CHECK_OK(bt_msg_add_tensor_shared(m2, m, i));
    for (int i = 0; i < bt_msg_field_count(m); i++) /* every field an integer but temperature */
        if (strcmp(bt_msg_field_key(m, i), "temperature") != 0) {
            int64_t v;
            CHECK_OK(bt_msg_get_int(m, bt_msg_field_key(m, i), 0, 1 << 20, &v));
            CHECK_OK(bt_msg_set_int(m2, bt_msg_field_key(m, i), v));
        }
    CHECK_OK(bt_msg_set_double(m2, "temperature", 0.75));
    int64_t four[1] = {4}, bad_turns[4] = {1, 0, 1, 2};
    CHECK_OK(bt_msg_add_tensor(m2, "n_turns", BT_I64, 1, four, bad_turns));
    CHECK(bt_batch_from_msg(m2, &b) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "'n_turns': row 1 holds 0");
    bt_msg_destroy(&m2);
    bt_msg_destroy(&m);
    a.turn_rewards[2 * BT_MAX_TURNS] = NAN;
    m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_batch_to_msg(&a, m));
    CHECK(bt_batch_from_msg(m, &b) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "'turn_rewards': row 2 holds nan");
    bt_msg_destroy(&m);
    bt_rollout_batch_release(&a);
    bt_rollout_batch_release(&b);
    bt_rollout_batch_release(&joined);
    bt_rollout_batch_release(&kept);
}

static void test_weights_and_sums(void) {
    float w0[6] = {1, 2, 3, 4, 5, -6};
    uint16_t w1[2] = {0x3f00, 0xbe80}; /* bfloat16 0.5, -0.25 (a bf16 run's matrix weight) */
    char n0[] = "model.embed_tokens.weight", n1[] = "model.layers.0.mlp.up_proj.weight";
    char *names[2] = {n0, n1};
    int ndim[2] = {2, 1};
    int64_t shape[2][BT_MAX_DIMS] = {{3, 2}, {2}}, numel[2] = {6, 2};
    bt_dtype dtype[2] = {BT_F32, BT_BF16};
    void *data[2] = {malloc(sizeof w0), malloc(sizeof w1)}; /* the message takes them */
    memcpy(data[0], w0, sizeof w0);
    memcpy(data[1], w1, sizeof w1);
    bt_weights w = {.version = 12,
                    .n = 2,
                    .names = names,
                    .ndim = ndim,
                    .shape = shape,
                    .numel = numel,
                    .dtype = dtype,
                    .data = data};
    bt_msg_t *m = bt_msg_new(BT_MSG_WEIGHTS);
    CHECK_OK(bt_weights_to_msg(&w, m));
    CHECK(w.data[0] == NULL && w.data[1] == NULL); /* moved, not copied */
    bt_weights back;
    bt_weights_init(&back);
    CHECK_OK(bt_weights_from_msg(m, &back));
    CHECK(back.version == 12 && back.n == 2 && !strcmp(back.names[1], n1));
    CHECK(back.shape[0][0] == 3 && back.shape[0][1] == 2 && back.numel[0] == 6);
    CHECK(back.dtype[0] == BT_F32 && back.dtype[1] == BT_BF16 && back.numel[1] == 2);
    CHECK(bt_msg_tensor_at(m, 1).nbytes == sizeof w1); /* 2 bytes an element on the wire */
    CHECK(!memcmp(back.data[0], w0, sizeof w0) && !memcmp(back.data[1], w1, sizeof w1));
    bt_weights_release(&back);
    bt_msg_destroy(&m);

    bt_evaluator_sums s, t;
    bt_evaluator_sums_init(&s, 4);
    s.examples = 10;
    s.completions = 40;
    s.correct = 7;
    s.reward_sum = 7.125;
    s.length_sum = 81;
    s.truncated = 3;
    s.correct_hist[0] = 2;
    s.correct_hist[4] = 8;
    m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_sums_to_msg(&s, m));
    CHECK_OK(bt_sums_from_msg(m, &t));
    CHECK(!memcmp(&s, &t, sizeof s));
    /* more correct examples than examples is refused */
    CHECK_OK(bt_msg_set_int(m, "correct", 11));
    CHECK(bt_sums_from_msg(m, &t) == BT_EFORMAT);
    bt_msg_destroy(&m);
}

static void test_trainer_stats(void) {
    bt_trainer_stats a = {.loss = -0.125, .pg_loss = 0.5, .kl = 0.01, .clip_frac = 0.25,
                          .entropy = 1.5, .grad_norm = 3.0, .tokens = 96, .version = 41};
    bt_trainer_stats b;
    bt_msg_t *m = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_trainer_stats_to_msg(&a, m));
    CHECK_OK(bt_trainer_stats_from_msg(m, &b));
    CHECK(b.loss == a.loss && b.pg_loss == a.pg_loss && b.kl == a.kl && b.tokens == a.tokens);
    CHECK(b.clip_frac == a.clip_frac && b.entropy == a.entropy && b.grad_norm == a.grad_norm);
    CHECK(b.version == 41);
    CHECK_OK(bt_msg_set_double(m, "stats.clip_frac", 1.5)); /* a fraction above 1 is refused */
    CHECK(bt_trainer_stats_from_msg(m, &b) == BT_EFORMAT);
    bt_msg_destroy(&m);
}

int main(void) {
    test_batch_round_trip();
    test_select_and_concat();
    test_episode_round_trip();
    test_weights_and_sums();
    test_trainer_stats();
    return check_exit();
}
