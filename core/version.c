/*  version.c — the release and git revision, set by CMakeLists.txt on this file alone (a commit
    recompiles only it). */
#include "baton/version.h"

#ifndef BATON_VERSION /* a compile outside CMake's build (the layers check) */
#define BATON_VERSION "unknown"
#endif
#ifndef BATON_GIT_REVISION
#define BATON_GIT_REVISION "unknown"
#endif

const char *bt_version(void) {
    return BATON_VERSION;
}

const char *bt_git_revision(void) {
    return BATON_GIT_REVISION;
}
