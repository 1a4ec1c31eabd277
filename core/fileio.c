/*  fileio.c — whole-file reads and durable writes. */
#define _POSIX_C_SOURCE 200809L
#include "baton/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

bt_status bt_file_read(const char *path, size_t max, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return bt_fail(BT_EIO, "%s: cannot open: %s", path, strerror(errno));
    bt_status rc = BT_OK;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = bt_fail(BT_EIO, "%s: not a regular file", path);
        goto out_close;
    }
    /* SIZE_MAX - 1 at most, so that size + 1 below cannot wrap */
    if ((uintmax_t)st.st_size > (uintmax_t)max || (uintmax_t)st.st_size >= SIZE_MAX) {
        rc = bt_fail(BT_EFORMAT, "%s: larger than %zu bytes", path, max);
        goto out_close;
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        rc = bt_fail(BT_ENOMEM, "%s: cannot allocate %zu bytes", path, size + 1);
        goto out_close;
    }
    if (fread(buf, 1, size, f) != size) {
        rc = bt_fail(BT_EIO, "%s: read failed: %s", path,
                     ferror(f) ? strerror(errno) : "file shrank while reading");
        free(buf);
        goto out_close;
    }
    buf[size] = '\0';
    *out = buf;
    if (len)
        *len = size;
out_close:
    fclose(f);
    return rc;
}

char *bt_text_next_line(char **at, size_t *line_no) {
    while (*at && **at) {
        char *line = *at, *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        *at = next;
        (*line_no)++;
        if (line[strspn(line, " \t\r")] != '\0')
            return line;
    }
    return NULL;
}

FILE *bt_file_create(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f)
        bt_fail(BT_EIO, "%s: cannot create: %s", path, strerror(errno));
    return f;
}

bt_status bt_file_finish(FILE *f, const char *path, bool ok) {
    BT_ASSERT(f != NULL);
    int err = errno; /* when ok is false on entry, the caller's failed write set it */
    if (ok && (fflush(f) != 0 || fsync(fileno(f)) != 0)) {
        ok = false;
        err = errno;
    }
    if (fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok)
        return BT_OK;
    remove(path);
    return bt_fail(BT_EIO, "%s: write failed: %s", path, strerror(err ? err : EIO));
}

bt_status bt_file_write(const char *path, const void *data, size_t len) {
    FILE *f = bt_file_create(path);
    if (!f)
        return BT_EIO;
    return bt_file_finish(f, path, len == 0 || fwrite(data, 1, len, f) == len);
}

bt_status bt_file_replace(const char *path, const char *tmp, const void *data, size_t len) {
    BT_TRY(bt_file_write(tmp, data, len));
    if (rename(tmp, path) != 0) {
        bt_status st = bt_fail(BT_EIO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        remove(tmp);
        return st;
    }
    return BT_OK;
}

uint64_t bt_hash64(const void *data, size_t len) {
    return XXH3_64bits(data, len);
}

bt_status bt_file_hash(const char *path, uint64_t *hash, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return bt_fail(BT_EIO, "%s: cannot open: %s", path, strerror(errno));
    XXH3_state_t *st = XXH3_createState();
    bt_status status = st && XXH3_64bits_reset(st) == XXH_OK ? BT_OK : BT_ENOMEM;
    char buf[1 << 16];
    uint64_t total = 0;
    for (size_t n; status == BT_OK && (n = fread(buf, 1, sizeof buf, f)) > 0; total += n)
        if (XXH3_64bits_update(st, buf, n) != XXH_OK)
            status = BT_ENOMEM;
    if (status == BT_OK && ferror(f))
        status = bt_fail(BT_EIO, "%s: cannot read: %s", path, strerror(errno));
    if (status == BT_OK) {
        *hash = XXH3_64bits_digest(st);
        *size = total;
    }
    XXH3_freeState(st);
    fclose(f);
    return status;
}

bt_status bt_dir_sync(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return bt_fail(BT_EIO, "%s: cannot open: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? BT_OK : bt_fail(BT_EIO, "%s: cannot fsync: %s", path, strerror(errno));
}

bt_status bt_rmtree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? BT_OK
                               : bt_fail(BT_EIO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0)
            return bt_fail(BT_EIO, "%s: cannot remove: %s", path, strerror(errno));
        return BT_OK;
    }
    DIR *d = opendir(path);
    if (!d)
        return bt_fail(BT_EIO, "%s: cannot open: %s", path, strerror(errno));
    bt_status rc = BT_OK;
    char child[PATH_MAX];
    for (struct dirent *e; rc == BT_OK && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        int n = snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        rc = n < 0 || n >= (int)sizeof child
                 ? bt_fail(BT_ERANGE, "%s/%s: path too long", path, e->d_name)
                 : bt_rmtree(child);
    }
    closedir(d);
    if (rc == BT_OK && rmdir(path) != 0)
        rc = bt_fail(BT_EIO, "%s: cannot remove: %s", path, strerror(errno));
    return rc;
}

bt_status bt_proc_memory(size_t *rss, size_t *peak) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return bt_fail(BT_EIO, "/proc/self/status: cannot open");
    char line[256];
    long long now = -1, top = -1;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "VmRSS:", 6))
            now = atoll(line + 6);
        else if (!strncmp(line, "VmHWM:", 6))
            top = atoll(line + 6);
    }
    fclose(f);
    if (now < 0 || top < 0)
        return bt_fail(BT_EIO, "/proc/self/status: no VmRSS or VmHWM");
    if (rss)
        *rss = (size_t)now << 10; /* KiB */
    if (peak)
        *peak = (size_t)top << 10;
    return BT_OK;
}
