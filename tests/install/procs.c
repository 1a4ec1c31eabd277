/*  procs.c — test_install's find_package(baton) consumer: runs CONFIG.json in RUN_DIR with worker
    processes (bt_run_set_procs) from a program linked with libbaton.so, and prints the executable
    of each of its child processes once the workers have joined ("worker PID EXE"), then the
    package's baton_EXECUTABLE ("package EXE") and the last step ("step N/TOTAL").
    Usage: procs CONFIG.json RUN_DIR */
#define _DEFAULT_SOURCE
#include <baton/baton.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*  Prints every process whose parent is this one, with its executable (/proc/PID/stat, exe). */
static void s_print_children(void) {
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[300], stat[512], exe[4096];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = e->d_name[0] >= '1' && e->d_name[0] <= '9' ? fopen(path, "r") : NULL;
        if (!f)
            continue;
        size_t n = fread(stat, 1, sizeof stat - 1, f);
        fclose(f);
        stat[n] = '\0';
        char *end = strrchr(stat, ')'); /* "PID (COMM) STATE PPID ..." */
        char state;
        long ppid;
        if (!end || sscanf(end + 1, " %c %ld", &state, &ppid) != 2 || ppid != (long)getpid())
            continue;
        snprintf(path, sizeof path, "/proc/%s/exe", e->d_name);
        ssize_t len = readlink(path, exe, sizeof exe - 1);
        exe[len > 0 ? len : 0] = '\0';
        printf("worker %s %s\n", e->d_name, exe);
    }
    if (d)
        closedir(d);
}

int main(int argc, char **argv) {
    static char config_json[1 << 16];
    FILE *f = argc > 2 ? fopen(argv[1], "rb") : NULL;
    if (!f) {
        fprintf(stderr, "usage: procs CONFIG.json RUN_DIR\n");
        return 2;
    }
    config_json[fread(config_json, 1, sizeof config_json - 1, f)] = '\0';
    fclose(f);
    bt_run_t *run = bt_run_new(config_json, argv[1], NULL, 0);
    if (!run) {
        fprintf(stderr, "procs: %s\n", bt_last_error());
        return 2;
    }
    bt_run_set_dir(run, argv[2]);
    bt_run_set_procs(run);
    bt_status status = bt_run_start(run);
    if (status == BT_OK)
        s_print_children();
    for (bool done = false; status == BT_OK && !done;)
        status = bt_run_step(run, &done);
    bt_progress p = bt_run_progress(run);
    if (status == BT_OK)
        status = bt_run_finish(run);
    if (status != BT_OK)
        fprintf(stderr, "procs: %s\n", bt_last_error());
    printf("package %s\nstep %lld/%lld\n", BATON_EXE, (long long)p.step, (long long)p.total);
    bt_run_destroy(&run);
    return status == BT_OK ? 0 : 1;
}
