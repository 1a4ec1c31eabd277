/*  sandbox.h — runs an untrusted Python program (a model's completion with its tests) and says
    whether it passed.  Threading: any thread may call bt_sandbox_run at any time; runs are
    independent (the pool is the caller's threads).  Lifetime: nothing outlives a call.

    One run: a fresh temporary directory (mkdtemp under $TMPDIR, else /tmp) holds the program;
    python3 (-I -S -B) runs it with the environment cleared (PATH=/usr/bin:/bin, HOME=TMPDIR=/tmp,
    LANG=C.UTF-8, PYTHONHASHSEED=0, PYTHONDONTWRITEBYTECODE=1), stdin /dev/null, no other file
    descriptor of the caller, its own session and process group, no new privileges, and rlimits
    on CPU time, address space, file size, open files and processes (no core files).  The caller
    drains stdout+stderr (one pipe) into a head buffer; output beyond output_limit kills the run.
    A wall-clock timeout SIGKILLs it.  Afterwards the directory is removed, whatever it holds.

    Isolation, best first (bt_sandbox_isolation; the result says which one ran):
    - NAMESPACES (root, or an unprivileged user namespace when the kernel allows one): new PID,
      mount, network, IPC and UTS namespaces.  The program sees a root of its own, a tmpfs of
      disk_limit bytes holding read-only, nosuid binds of /usr (and the /bin, /lib... links
      into it), /dev/{null,zero,random,urandom} and the program, and a writable /tmp; the old root
      is unmounted (pivot_root), so no other file of the machine (the run directory, /work,
      /home, /etc, /proc) can be read or written.  The network namespace has only a loopback
      that is down: no socket reaches anything.  The program is PID 1 of its namespace, so when
      it ends or is killed the kernel kills every process it started (daemons included).  As
      root it runs as an unused uid of its own (BT_SANDBOX_UID_BASE + a counter), so
      RLIMIT_NPROC bounds a fork bomb and it can signal no other process.
    - PLAIN (the kernel refuses namespaces to this user): the rlimits, the process group, the
      cleared environment and the temporary directory as cwd and HOME.  It can then read and
      write what the calling user can, and reach the network; a process that leaves its process
      group (setsid) outlives the timeout's kill.  Use it only for trusted completions; a WARN
      log line says so once per process.
    Not prevented in either: use of CPU and memory up to the limits (per process, see the
    defaults), reading /usr, and making namespaces of its own inside its own (where the kernel lets
    any user do so; they reach nothing the jail does not).  No seccomp filter: the kernel's system
    calls are reachable from the program (namespaces narrow what they see). */
#ifndef BATON_SANDBOX_H
#define BATON_SANDBOX_H

#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  As root, run i runs as uid and gid BT_SANDBOX_UID_BASE + (i mod BT_SANDBOX_UID_SPAN): ids no
    account of a Debian machine uses (accounts and the usual /etc/subuid ranges stay below 2^31),
    below (uid_t)-1. */
#define BT_SANDBOX_UID_BASE 3000000000u
#define BT_SANDBOX_UID_SPAN 65536u
#define BT_SANDBOX_HEAD 4096 /* bytes of output kept in a result, NUL excluded */

typedef struct bt_sandbox_config {
    const char *python;  /* interpreter, an absolute path under /usr; NULL: "/usr/bin/python3" */
    double timeout_s;    /* wall clock, > 0 */
    int cpu_s;           /* RLIMIT_CPU soft limit (SIGXCPU; SIGKILL a second later), >= 1 */
    size_t memory_bytes; /* RLIMIT_AS, >= 64 MiB (python3 needs about 20 MiB to start) */
    size_t file_bytes;   /* RLIMIT_FSIZE: largest file the program may write */
    size_t disk_limit;   /* NAMESPACES: size of the tmpfs holding /tmp */
    int open_files;      /* RLIMIT_NOFILE, >= 16 */
    int processes;       /* RLIMIT_NPROC (processes and threads of the uid), >= 1 */
    size_t output_limit; /* stdout + stderr beyond this many bytes kill the run */
} bt_sandbox_config;

/*  Defaults: python NULL, timeout_s 10, cpu_s 10, memory_bytes 512 MiB, file_bytes 16 MiB,
    disk_limit 64 MiB, open_files 64, processes 8, output_limit 1 MiB.  The limits are per
    process (there is no cgroup): a run's processes together may hold up to processes x
    memory_bytes (4 GiB by default) plus disk_limit of tmpfs. */
void bt_sandbox_config_init(bt_sandbox_config *cfg);

/*  Values appear in logs and results: append only. */
typedef enum bt_sandbox_verdict {
    BT_SANDBOX_PASS = 0,    /* exit status 0 within every limit */
    BT_SANDBOX_EXIT = 1,    /* a non-zero exit status (a failed assert, an exception) */
    BT_SANDBOX_SIGNAL = 2,  /* killed by a signal: SIGXCPU or SIGKILL of RLIMIT_CPU, a crash */
    BT_SANDBOX_TIMEOUT = 3, /* still running at timeout_s; killed */
    BT_SANDBOX_OUTPUT = 4   /* wrote more than output_limit bytes; killed */
} bt_sandbox_verdict;

typedef enum bt_sandbox_isolation {
    BT_SANDBOX_PLAIN = 0,     /* rlimits, process group, cleared environment only */
    BT_SANDBOX_NAMESPACES = 1 /* its own root, network, PID namespace (see above) */
} bt_sandbox_isolation;

typedef struct bt_sandbox_result {
    bt_sandbox_verdict verdict;
    bt_sandbox_isolation isolation;
    int exit_status;     /* EXIT: the status; else 0 */
    int signal;          /* SIGNAL: the signal; else 0 */
    double wall_s;       /* from start to the program's end */
    int pid;             /* the program's process id as the caller sees it (its process group) */
    uint32_t uid;        /* the uid it ran as */
    size_t output_bytes; /* stdout + stderr written, counted up to the kill */
    char head[BT_SANDBOX_HEAD + 1]; /* the first of them, NUL-terminated */
} bt_sandbox_result;

/*  "pass", "exit", "signal", "timeout", "output"; "unknown" out of range.  Static string. */
const char *bt_sandbox_verdict_name(bt_sandbox_verdict v);

/*  Runs program[0, len) (Python source, need not be NUL-terminated) as described above and fills
    *result.  Blocks until the program ends or is killed, at most about timeout_s; leaves no
    process and no file behind.  Returns BT_OK when the program ran, whatever its verdict;
    BT_EINVAL for a config out of range (named); BT_EIO "sandbox: <step>: <errno text>" when the
    sandbox could not be made (temporary directory, pipe, fork, a mount, the interpreter missing).
    When namespaces are refused (EPERM, EINVAL, ENOSPC) the run falls back to PLAIN and every
    later run of the process starts there. */
bt_status bt_sandbox_run(const bt_sandbox_config *cfg, const char *program, size_t len,
                         bt_sandbox_result *result);

#ifdef __cplusplus
}
#endif
#endif
