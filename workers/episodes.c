/*  episodes.c — multi-turn episodes over the engine's turns (episodes.h). */
#include "baton/episodes.h"

void bt_episode_config_init(bt_episode_config *cfg) {
    *cfg = (bt_episode_config){.max_turns = 1, .interleave = true};
}
