/*  sandbox.c — one untrusted Python program in a child process of its own (sandbox.h).
    The parent prepares every string and path before clone(); the child calls only system calls
    (async-signal-safe: the caller may be multithreaded) until execve, and reports a failed step
    as {step, errno} on a close-on-exec pipe, which execve closes.  The child shares the parent's
    memory until execve (CLONE_VM | CLONE_VFORK, as posix_spawn does; the calling thread waits):
    copying the page tables of a worker that holds a model cost 160 ms a run at 4 GiB.  So the
    child writes nothing but its own stack (and the calling thread's errno), runs with every signal
    blocked, and sets every handler to the default before it unblocks them. */
#define _GNU_SOURCE
#include "baton/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_STACK (64 * 1024) /* the child's stack until execve */
#define S_MIB ((size_t)1 << 20)
#define S_NS_FLAGS (CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)

/*  The child's steps, named in the parent's error message. */
typedef enum {
    S_STEP_FDS,
    S_STEP_SESSION,
    S_STEP_IDMAP,
    S_STEP_PRIVATE,
    S_STEP_ROOT,
    S_STEP_BIND,
    S_STEP_PIVOT,
    S_STEP_CWD,
    S_STEP_RLIMIT,
    S_STEP_UID,
    S_STEP_EXEC,
    S_STEP_COUNT
} s_step;
static const char *const s_step_names[S_STEP_COUNT] = {"file descriptors",
                                                       "setsid",
                                                       "user namespace id maps",
                                                       "private mounts",
                                                       "root tmpfs",
                                                       "bind mount",
                                                       "pivot_root",
                                                       "working directory",
                                                       "rlimits",
                                                       "setuid",
                                                       "execve"};

/*  The root's entries beside usr/: a link into usr (Debian's merged /usr) or a directory bound
    read-only, as the machine has them.  Absolute; the new root's relative name is path + 1. */
static const char *const s_top[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
#define S_TOP_COUNT (sizeof s_top / sizeof s_top[0])
static const char *const s_devs[] = {"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"};
#define S_DEV_COUNT (sizeof s_devs / sizeof s_devs[0])

typedef struct {
    const bt_sandbox_config *cfg;
    bool jail, userns, drop_uid;
    uint32_t uid;
    int refused;        /* the errno with which namespaces were refused */
    int out_fd, err_fd; /* write ends of the output and error pipes */
    char dir[PATH_MAX - 16], root[PATH_MAX], prog[PATH_MAX]; /* dir leaves room for names */
    char links[S_TOP_COUNT][PATH_MAX]; /* a link's target; "" when a directory; "-" when absent */
    unsigned long usr_flags;           /* what a read-only remount of /usr must keep */
    char tmp_opts[64], uid_map[64], gid_map[64];
    char home[PATH_MAX + 16], tmpdir[PATH_MAX + 16];
    char *argv[7], *envp[8];
} s_job;

static atomic_uint s_next_uid;
static atomic_bool s_plain_only; /* namespaces were refused once: do not ask again */

void bt_sandbox_config_init(bt_sandbox_config *cfg) {
    *cfg = (bt_sandbox_config){.python = NULL,
                               .timeout_s = 10.0,
                               .cpu_s = 10,
                               .memory_bytes = 512 * S_MIB,
                               .file_bytes = 16 * S_MIB,
                               .disk_limit = 64 * S_MIB,
                               .open_files = 64,
                               .processes = 8,
                               .output_limit = S_MIB};
}

const char *bt_sandbox_verdict_name(bt_sandbox_verdict v) {
    static const char *const names[] = {"pass", "exit", "signal", "timeout", "output"};
    return (unsigned)v < sizeof names / sizeof names[0] ? names[v] : "unknown";
}

/* ---- the child --------------------------------------------------------------------------- */
/*  Reports step and errno to the parent and exits. */
static _Noreturn void s_die(s_step step) {
    int report[2] = {(int)step, errno};
    ssize_t w = write(3, report, sizeof report);
    (void)w;
    _exit(127);
}

static int s_write_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static int s_write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = s_write_all(fd, text, strlen(text));
    close(fd);
    return rc;
}

/*  stdin /dev/null, stdout and stderr the output pipe, fd 3 the error pipe, nothing else. */
static void s_child_fds(const s_job *j) {
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(j->out_fd, 1) < 0 || dup2(j->out_fd, 2) < 0)
        s_die(S_STEP_FDS);
    if (j->err_fd != 3 && dup3(j->err_fd, 3, O_CLOEXEC) < 0)
        _exit(127); /* no pipe to report on */
    if (syscall(SYS_close_range, 4u, ~0u, 0u) < 0)
        for (int fd = 4; fd < 65536; fd++)
            close(fd);
}

/*  Binds src onto dst (relative to the new root) read-only, nosuid, keeping the flags a user
    namespace locks (extra). */
static int s_bind_ro(const char *src, const char *dst, unsigned long extra) {
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
        return -1;
    return mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | extra, NULL);
}

/*  Fills the new root (the cwd): usr and the top links, the devices, main.py, a tmpfs /tmp. */
static void s_child_fill_root(const s_job *j) {
    if (mkdir("usr", 0755) < 0 || s_bind_ro("/usr", "usr", j->usr_flags | MS_NODEV) < 0)
        s_die(S_STEP_BIND);
    for (size_t i = 0; i < S_TOP_COUNT; i++) {
        if (j->links[i][0] == '-')
            continue;
        const char *dst = s_top[i] + 1;
        bool ok = j->links[i][0] ? symlink(j->links[i], dst) == 0
                                 : mkdir(dst, 0755) == 0 &&
                                       s_bind_ro(s_top[i], dst, j->usr_flags | MS_NODEV) == 0;
        if (!ok)
            s_die(S_STEP_BIND);
    }
    if (mkdir("dev", 0755) < 0)
        s_die(S_STEP_BIND);
    for (size_t i = 0; i < S_DEV_COUNT; i++) {
        int fd = open(s_devs[i] + 1, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
        if (fd < 0 || close(fd) < 0 || mount(s_devs[i], s_devs[i] + 1, NULL, MS_BIND, NULL) < 0)
            s_die(S_STEP_BIND);
    }
    int fd = open("main.py", O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 || close(fd) < 0 || s_bind_ro(j->prog, "main.py", 0) < 0)
        s_die(S_STEP_BIND);
    if (mkdir("tmp", 01777) < 0 ||
        mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, j->tmp_opts) < 0)
        s_die(S_STEP_BIND);
}

/*  The namespaces' view: id maps, a private tmpfs root filled, pivoted into, the old root gone. */
static void s_child_jail(const s_job *j) {
    if (j->userns && (s_write_file("/proc/self/setgroups", "deny") < 0 ||
                      s_write_file("/proc/self/uid_map", j->uid_map) < 0 ||
                      s_write_file("/proc/self/gid_map", j->gid_map) < 0))
        s_die(S_STEP_IDMAP);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        s_die(S_STEP_PRIVATE);
    if (mount("tmpfs", j->root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=64,mode=0755") <
            0 ||
        chdir(j->root) < 0)
        s_die(S_STEP_ROOT);
    s_child_fill_root(j);
    if (syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0 ||
        mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        s_die(S_STEP_PIVOT);
}

static void s_child_limits(const bt_sandbox_config *c) {
    struct {
        int resource;
        rlim_t soft, hard;
    } lim[] = {{RLIMIT_CPU, (rlim_t)c->cpu_s, (rlim_t)c->cpu_s + 1},
               {RLIMIT_AS, c->memory_bytes, c->memory_bytes},
               {RLIMIT_FSIZE, c->file_bytes, c->file_bytes},
               {RLIMIT_NOFILE, (rlim_t)c->open_files, (rlim_t)c->open_files},
               {RLIMIT_NPROC, (rlim_t)c->processes, (rlim_t)c->processes},
               {RLIMIT_CORE, 0, 0},
               {RLIMIT_MEMLOCK, 0, 0}};
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        struct rlimit r = {lim[i].soft, lim[i].hard};
        if (setrlimit(lim[i].resource, &r) < 0)
            s_die(S_STEP_RLIMIT);
    }
}

/*  Every signal's handler the default (the parent's handlers must not run on shared memory),
    then none blocked. */
static void s_child_signals(void) {
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } dfl = {SIG_DFL, 0, NULL, 0}; /* the kernel's struct sigaction */
    for (int sig = 1; sig < 65; sig++)
        syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask); /* KILL, STOP: refused */
    uint64_t none = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none);
}

static int s_child(void *arg) {
    const s_job *j = arg;
    s_child_signals();
    s_child_fds(j);
    if (setsid() < 0)
        s_die(S_STEP_SESSION);
    if (j->jail)
        s_child_jail(j);
    if (chdir(j->jail ? "/tmp" : j->dir) < 0)
        s_die(S_STEP_CWD);
    s_child_limits(j->cfg);
    /* raw system calls: glibc's setresuid() would wait for the caller's other threads, which
       the child does not have */
    uint32_t u = j->uid;
    if (j->drop_uid && (syscall(SYS_setgroups, 0, NULL) < 0 ||
                        syscall(SYS_setresgid, u, u, u) < 0 || syscall(SYS_setresuid, u, u, u) < 0))
        s_die(S_STEP_UID);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
        s_die(S_STEP_UID);
    execve(j->argv[0], j->argv, j->envp);
    s_die(S_STEP_EXEC);
}

/* ---- the parent -------------------------------------------------------------------------- */
static bt_status s_check_config(const bt_sandbox_config *c) {
    if (!(c->timeout_s > 0))
        return bt_fail(BT_EINVAL, "sandbox: timeout_s: expected > 0, got %g", c->timeout_s);
    if (c->cpu_s < 1)
        return bt_fail(BT_EINVAL, "sandbox: cpu_s: expected >= 1, got %d", c->cpu_s);
    if (c->memory_bytes < 64 * S_MIB)
        return bt_fail(BT_EINVAL, "sandbox: memory_bytes: expected >= 64 MiB, got %zu",
                       c->memory_bytes);
    if (c->open_files < 16)
        return bt_fail(BT_EINVAL, "sandbox: open_files: expected >= 16, got %d", c->open_files);
    if (c->processes < 1)
        return bt_fail(BT_EINVAL, "sandbox: processes: expected >= 1, got %d", c->processes);
    if (c->python && strncmp(c->python, "/usr/", 5) != 0)
        return bt_fail(BT_EINVAL, "sandbox: python: expected an absolute path under /usr, got %s",
                       c->python);
    return BT_OK;
}

static bt_status s_io(const char *step, const char *path) {
    return bt_fail(BT_EIO, "sandbox: %s %s: %s", step, path, strerror(errno));
}

/*  What the jail copies of the machine's root: its links into /usr and /usr's locked flags. */
static void s_job_machine(s_job *j) {
    for (size_t i = 0; i < S_TOP_COUNT; i++) {
        struct stat st;
        ssize_t n = -1;
        if (lstat(s_top[i], &st) < 0)
            strcpy(j->links[i], "-");
        else if (S_ISLNK(st.st_mode) &&
                 (n = readlink(s_top[i], j->links[i], sizeof j->links[i] - 1)) > 0)
            j->links[i][n] = '\0';
        else
            strcpy(j->links[i], S_ISDIR(st.st_mode) ? "" : "-");
    }
    struct statvfs vfs;
    j->usr_flags = 0;
    if (statvfs("/usr", &vfs) == 0) {
        j->usr_flags |= (vfs.f_flag & ST_NOEXEC) ? MS_NOEXEC : 0;
        j->usr_flags |= (vfs.f_flag & ST_NOATIME) ? MS_NOATIME : 0;
        j->usr_flags |= (vfs.f_flag & ST_NODIRATIME) ? MS_NODIRATIME : 0;
        j->usr_flags |= (vfs.f_flag & ST_RELATIME) ? MS_RELATIME : 0;
    }
}

/*  The strings the child needs: argv, environment, id maps, tmpfs options. */
static void s_job_strings(s_job *j) {
    const char *python = j->cfg->python ? j->cfg->python : "/usr/bin/python3";
    snprintf(j->home, sizeof j->home, "HOME=%s", j->jail ? "/tmp" : j->dir);
    snprintf(j->tmpdir, sizeof j->tmpdir, "TMPDIR=%s", j->jail ? "/tmp" : j->dir);
    char *const argv[] = {(char *)python, "-I", "-S", "-B", j->jail ? "/main.py" : j->prog, NULL};
    char *const envp[] = {
        "PATH=/usr/bin:/bin",        j->home, j->tmpdir, "LANG=C.UTF-8", "PYTHONHASHSEED=0",
        "PYTHONDONTWRITEBYTECODE=1", NULL};
    memcpy(j->argv, argv, sizeof argv);
    memcpy(j->envp, envp, sizeof envp);
    snprintf(j->tmp_opts, sizeof j->tmp_opts, "size=%zu,nr_inodes=4096,mode=1777",
             j->cfg->disk_limit);
    snprintf(j->uid_map, sizeof j->uid_map, "%u %u 1\n", (unsigned)getuid(), (unsigned)getuid());
    snprintf(j->gid_map, sizeof j->gid_map, "%u %u 1\n", (unsigned)getgid(), (unsigned)getgid());
}

/*  The run's directory: dir/main.py holds the program, dir/root is the jail's mount point. */
static bt_status s_job_files(s_job *j, const char *program, size_t len) {
    const char *base = getenv("TMPDIR");
    base = base && base[0] ? base : "/tmp";
    if (snprintf(j->dir, sizeof j->dir, "%s/baton-sandbox-XXXXXX", base) >= (int)sizeof j->dir) {
        j->dir[0] = '\0';
        return bt_fail(BT_EINVAL, "sandbox: TMPDIR: expected a path under %zu bytes, got %s",
                       sizeof j->dir - 22, base);
    }
    if (!mkdtemp(j->dir)) {
        bt_status st = s_io("mkdtemp", j->dir);
        j->dir[0] = '\0';
        return st;
    }
    snprintf(j->prog, sizeof j->prog, "%s/main.py", j->dir);
    snprintf(j->root, sizeof j->root, "%s/root", j->dir);
    int fd = open(j->prog, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0)
        return s_io("create", j->prog);
    int rc = s_write_all(fd, program, len);
    if (close(fd) < 0 || rc < 0)
        return s_io("write", j->prog);
    if (mkdir(j->root, 0755) < 0)
        return s_io("mkdir", j->root);
    if (j->drop_uid && !j->jail && chown(j->dir, j->uid, j->uid) < 0)
        return s_io("chown", j->dir);
    return BT_OK;
}

/*  Removes path and everything under it, making directories writable first (the program may
    have taken that right away from its own files). */
static void s_remove_tree(const char *path) {
    chmod(path, 0700);
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[PATH_MAX];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", path, e->d_name) >= (int)sizeof p)
            continue;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            s_remove_tree(p);
        else
            unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(path);
}

/*  Whether a failure to make namespaces means this user may not have them (then: PLAIN). */
static bool s_is_refusal(int err) {
    return err == EPERM || err == EACCES || err == EINVAL || err == ENOSPC || err == EUSERS ||
           err == EROFS;
}

/*  Starts the child; *pid_out is its pid.  BT_EUNSUPPORTED when namespaces were refused. */
static bt_status s_spawn(s_job *j, int *out_rd, int *pid_out) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0)
        return s_io("pipe", "output");
    if (pipe2(err, O_CLOEXEC) < 0) {
        close(out[0]);
        close(out[1]);
        return s_io("pipe", "errors");
    }
    j->out_fd = out[1];
    j->err_fd = err[1];
    char *stack = malloc(S_STACK);
    int flags = CLONE_VM | CLONE_VFORK | SIGCHLD |
                (j->jail ? S_NS_FLAGS | (j->userns ? CLONE_NEWUSER : 0) : 0);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* until the child has reset its handlers */
    int pid = stack ? clone(s_child, stack + S_STACK, flags, j) : -1;
    int clone_errno = stack ? errno : ENOMEM;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    free(stack); /* the child has called execve or exited: CLONE_VFORK */
    close(out[1]);
    close(err[1]);
    int report[2] = {0, 0};
    ssize_t n = 0;
    if (pid > 0)
        while ((n = read(err[0], report, sizeof report)) < 0 && errno == EINTR)
            ;
    close(err[0]);
    if (pid > 0 && n == (ssize_t)sizeof report) {
        waitpid(pid, NULL, 0);
        pid = -1;
        clone_errno = report[1];
    }
    if (pid < 0) {
        close(out[0]);
        errno = clone_errno;
        bool ns_step = report[0] >= S_STEP_IDMAP && report[0] <= S_STEP_PIVOT;
        if (j->jail && (n == 0 || ns_step) && s_is_refusal(clone_errno)) {
            j->refused = clone_errno;
            return BT_EUNSUPPORTED;
        }
        return s_io(n == 0 ? "clone" : s_step_names[report[0]], j->argv[0]);
    }
    *out_rd = out[0];
    *pid_out = pid;
    return BT_OK;
}

/*  Keeps the head of the output, counts all of it; false once it exceeds the limit. */
static bool s_take(bt_sandbox_result *r, const char *buf, size_t n, size_t limit) {
    size_t keep = r->output_bytes < BT_SANDBOX_HEAD ? BT_SANDBOX_HEAD - r->output_bytes : 0;
    keep = keep < n ? keep : n;
    if (keep > 0) {
        memcpy(r->head + r->output_bytes, buf, keep);
        r->head[r->output_bytes + keep] = '\0';
    }
    r->output_bytes += n;
    return r->output_bytes <= limit;
}

/*  Whether the child has ended, leaving it unreaped (its pid still names its process group). */
static bool s_has_exited(int pid) {
    siginfo_t si = {0};
    return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

/*  Reads what is left in the pipe without waiting; false once the output passes its limit. */
static bool s_drain_rest(int out_rd, bt_sandbox_result *r, size_t limit) {
    char buf[65536];
    ssize_t n;
    if (fcntl(out_rd, F_SETFL, O_NONBLOCK) < 0)
        return true;
    while ((n = read(out_rd, buf, sizeof buf)) > 0)
        if (!s_take(r, buf, (size_t)n, limit))
            return false;
    return true;
}

static void s_verdict(bt_sandbox_result *r, int status, bool killed) {
    if (killed)
        return;
    if (WIFEXITED(status)) {
        r->exit_status = WEXITSTATUS(status);
        r->verdict = r->exit_status == 0 ? BT_SANDBOX_PASS : BT_SANDBOX_EXIT;
    } else {
        r->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        r->verdict = BT_SANDBOX_SIGNAL;
    }
}

/*  Drains the output until the child ends, the output passes its limit or time runs out; then
    kills the child's process group (in namespaces the child is PID 1, whose end kills all of
    its namespace) and reaps the child.  Sets the verdict. */
static void s_wait(const s_job *j, int out_rd, int pid, double deadline, bt_sandbox_result *r) {
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    struct pollfd fds[2] = {{.fd = out_rd, .events = POLLIN}, {.fd = pidfd, .events = POLLIN}};
    char buf[65536];
    bool killed = false, exited = false;
    while (!killed && !exited) {
        double left = deadline - bt_now();
        if (left <= 0) { /* checked first: a program that always has output pending ends too */
            r->verdict = BT_SANDBOX_TIMEOUT;
            killed = true;
            break;
        }
        int ms = (int)(left * 1000) + 1;
        if (pidfd < 0 && ms > 5)
            ms = 5; /* no pidfd (Linux < 5.3): look at the child every 5 ms */
        int ready = poll(fds, pidfd < 0 ? 1 : 2, ms);
        if (ready > 0 && fds[0].revents) {
            ssize_t n = read(out_rd, buf, sizeof buf);
            if (n > 0 && !s_take(r, buf, (size_t)n, j->cfg->output_limit)) {
                r->verdict = BT_SANDBOX_OUTPUT;
                killed = true;
            } else if (n == 0 || (n < 0 && errno != EINTR))
                fds[0].fd = -1; /* every writer is gone */
        }
        exited = !killed && (pidfd < 0 || (ready > 0 && fds[1].revents)) && s_has_exited(pid);
    }
    if (exited && !s_drain_rest(out_rd, r, j->cfg->output_limit)) {
        r->verdict = BT_SANDBOX_OUTPUT;
        killed = true;
    }
    kill(pid, SIGKILL);  /* namespaces: PID 1 */
    kill(-pid, SIGKILL); /* the process group, while the unreaped child keeps its id */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (pidfd >= 0)
        close(pidfd);
    s_verdict(r, status, killed);
}

/*  One attempt in the given isolation; BT_EUNSUPPORTED when namespaces were refused. */
static bt_status s_run_once(s_job *j, const char *program, size_t len, bt_sandbox_result *r) {
    bt_status st = s_job_files(j, program, len);
    int out_rd = -1, pid = -1;
    double start = bt_now();
    if (st == BT_OK) {
        s_job_strings(j);
        st = s_spawn(j, &out_rd, &pid);
    }
    if (st == BT_OK) {
        r->pid = pid;
        r->uid = j->uid;
        r->isolation = j->jail ? BT_SANDBOX_NAMESPACES : BT_SANDBOX_PLAIN;
        s_wait(j, out_rd, pid, start + j->cfg->timeout_s, r);
        r->wall_s = bt_now() - start;
        close(out_rd);
    }
    if (j->dir[0])
        s_remove_tree(j->dir);
    return st;
}

bt_status bt_sandbox_run(const bt_sandbox_config *cfg, const char *program, size_t len,
                         bt_sandbox_result *result) {
    memset(result, 0, sizeof *result);
    BT_TRY(s_check_config(cfg));
    s_job *j = calloc(1, sizeof *j);
    if (!j)
        return bt_fail(BT_ENOMEM, "sandbox: out of memory");
    j->cfg = cfg;
    j->drop_uid = geteuid() == 0;
    j->uid = j->drop_uid
                 ? BT_SANDBOX_UID_BASE + atomic_fetch_add(&s_next_uid, 1) % BT_SANDBOX_UID_SPAN
                 : (uint32_t)getuid();
    j->userns = !j->drop_uid;
    j->jail = !atomic_load(&s_plain_only);
    s_job_machine(j);
    if (access(j->cfg->python ? j->cfg->python : "/usr/bin/python3", X_OK) < 0) {
        free(j);
        return s_io("python", cfg->python ? cfg->python : "/usr/bin/python3");
    }
    bt_status st = s_run_once(j, program, len, result);
    if (st == BT_EUNSUPPORTED) {
        if (!atomic_exchange(&s_plain_only, true))
            bt_log(BT_LOG_WARN,
                   "sandbox: namespaces refused (%s); completions now run with "
                   "rlimits only, and can read and write what this user can and "
                   "reach the network",
                   strerror(j->refused));
        memset(j->dir, 0, sizeof j->dir);
        j->jail = false;
        memset(result, 0, sizeof *result);
        st = s_run_once(j, program, len, result);
    }
    free(j);
    return st;
}
