/*  version.h — which baton this is: the release and the git revision the build was configured at.
    Threading: any thread.  Lifetime: static strings. */
#ifndef BATON_VERSION_H
#define BATON_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

/*  The release, e.g. "0.1.0" (CMakeLists.txt's project VERSION); "unknown" outside CMake. */
const char *bt_version(void);
/*  The short git revision of the tree the build was configured at; "unknown" outside a git
    checkout or CMake. */
const char *bt_git_revision(void);

#ifdef __cplusplus
}
#endif
#endif
