/*  dataset.c — a JSONL file and a saved index of its records: one pass over the mapped file,
    split between threads at line boundaries, that finds and checks every record; a header that
    says what the index was built from; a write to a temporary file renamed into place; records
    read with pread. */
#define _DEFAULT_SOURCE /* madvise, realpath */
#include "baton/dataset.h"

#include "baton/fileio.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_VERSION 1 /* of the index file format below */
#define S_LINE_MAX_DEFAULT (1u << 20)
#define S_RACY_NS 100000000LL  /* 0.1 s: well past a file-system timestamp tick */
#define S_HEADER_WORDS 11      /* sizeof(s_header) / 8 */
#define S_THREADS_MAX 8        /* threads of the first pass */
#define S_CHUNK_MIN (1u << 20) /* bytes per thread, at least */

/*  The index file: this header, then count uint64 offsets, in the byte order of the machine that
    wrote it (another machine reads a bad magic or hash, and rebuilds). */
typedef struct {
    char magic[8]; /* "BTIDX\0\0\0" */
    uint32_t version;
    uint32_t rules;    /* the caller's check rules */
    uint32_t line_max; /* the line limit it was checked under */
    uint32_t zero;
    uint64_t file_size; /* the file it indexes, as fstat saw it */
    int64_t mtime_sec;
    int64_t mtime_nsec;
    uint64_t inode;
    uint64_t device;
    uint64_t count;        /* records */
    uint64_t offsets_hash; /* XXH3-64 of the offsets */
    uint64_t header_hash;  /* XXH3-64 of the bytes above */
} s_header;

_Static_assert(sizeof(s_header) == 8 * S_HEADER_WORDS, "the offsets follow the header, aligned");

static const char s_magic[8] = {'B', 'T', 'I', 'D', 'X', 0, 0, 0};

struct bt_dataset {
    char *path;
    int fd;      /* the file, open for pread */
    size_t size; /* its size when opened */
    uint32_t line_max;
    const uint64_t *offsets; /* (count) byte offset of each record in the file */
    uint64_t count;
    void *index_map; /* the mapped index file (index_map_len bytes), or NULL */
    size_t index_map_len;
    uint64_t *index_mem; /* the index built by this open (header words, then offsets), or NULL */
    char *index_path;    /* "" when the index is in memory only */
    bool built;
};

/* ---- the header ---------------------------------------------------------------------------- */
/*  The header an index of this file, as fstat describes it now, must have (hashes and count
    left zero). */
static s_header s_expected(const bt_dataset_config *cfg, uint32_t line_max, const struct stat *st) {
    s_header h;
    memset(&h, 0, sizeof h); /* padding-free, but hashed: every byte defined */
    memcpy(h.magic, s_magic, sizeof h.magic);
    h.version = S_VERSION;
    h.rules = cfg->rules;
    h.line_max = line_max;
    h.file_size = (uint64_t)st->st_size;
    h.mtime_sec = (int64_t)st->st_mtim.tv_sec;
    h.mtime_nsec = (int64_t)st->st_mtim.tv_nsec;
    h.inode = (uint64_t)st->st_ino;
    h.device = (uint64_t)st->st_dev;
    return h;
}

static uint64_t s_header_hash(const s_header *h) {
    return bt_hash64(h, offsetof(s_header, header_hash));
}

/*  Whether a saved header describes the file that want describes (ignoring count and hashes). */
static bool s_header_matches(const s_header *got, const s_header *want) {
    return !memcmp(got->magic, want->magic, sizeof got->magic) && got->version == want->version &&
           got->rules == want->rules && got->line_max == want->line_max &&
           got->file_size == want->file_size && got->mtime_sec == want->mtime_sec &&
           got->mtime_nsec == want->mtime_nsec && got->inode == want->inode &&
           got->device == want->device && got->header_hash == s_header_hash(got);
}

/* ---- where the index goes ------------------------------------------------------------------- */
static char *s_concat(const char *a, const char *b, const char *c) {
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *s = malloc(la + lb + lc + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb);
        memcpy(s + la + lb, c, lc + 1);
    }
    return s;
}

/*  The per-user cache folder: $XDG_CACHE_HOME/baton, else $HOME/.cache/baton; NULL when neither
    is set to an absolute path (or out of memory).  Caller frees. */
static char *s_cache_dir(void) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/')
        return s_concat(xdg, "/baton", "");
    if (home && home[0] == '/')
        return s_concat(home, "/.cache/baton", "");
    return NULL;
}

/*  The index's name in the cache folder: the file's base name and the XXH3-64 of its absolute
    path, "train.jsonl.0123456789abcdef.btidx".  NULL when it cannot be made.  Caller frees. */
static char *s_cache_path(const char *path) {
    char *dir = s_cache_dir(), *abs = realpath(path, NULL), *out = NULL;
    if (dir && abs) {
        const char *base = strrchr(abs, '/') ? strrchr(abs, '/') + 1 : abs;
        char name[128];
        snprintf(name, sizeof name, "/%.64s.%016" PRIx64 ".btidx", base,
                 bt_hash64(abs, strlen(abs)));
        out = s_concat(dir, name, "");
    }
    free(dir);
    free(abs);
    return out;
}

/*  mkdir -p of the folder that holds path (mode 0700: a per-user cache). */
static bool s_make_parents(const char *path) {
    char *dir = s_concat(path, "", "");
    bool ok = dir != NULL;
    for (char *p = dir ? dir + 1 : NULL; ok && (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        ok = mkdir(dir, 0700) == 0 || errno == EEXIST;
        *p = '/';
    }
    free(dir);
    return ok;
}

/* ---- reading a saved index ------------------------------------------------------------------ */
/*  Maps the index at ipath when it is valid for the file that want describes: true, with the
    offsets set.  False, touching nothing, for a missing, stale, short or corrupt index. */
static bool s_index_load(bt_dataset_t *self, const char *ipath, const s_header *want) {
    int fd = open(ipath, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    s_header h;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size >= sizeof h &&
              pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && s_header_matches(&h, want) &&
              h.count <= ((uint64_t)st.st_size - sizeof h) / 8 &&
              (uint64_t)st.st_size == sizeof h + 8 * h.count;
    void *map = MAP_FAILED;
    if (ok) {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        ok = map != MAP_FAILED;
    }
    close(fd);
    if (!ok)
        return false;
    const uint64_t *offsets = (const uint64_t *)((const char *)map + sizeof h);
    ok = bt_hash64(offsets, 8 * h.count) == h.offsets_hash &&
         (h.count == 0 || offsets[h.count - 1] < h.file_size);
    if (!ok) {
        munmap(map, (size_t)st.st_size);
        return false;
    }
    self->index_map = map;
    self->index_map_len = (size_t)st.st_size;
    self->offsets = offsets;
    self->count = h.count;
    return true;
}

/* ---- building the index --------------------------------------------------------------------- */
/*  Whether line[0, len) holds only white space. */
static bool s_is_blank(const char *line, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)line[i]))
            return false;
    return true;
}

/*  One thread's part of the file: the whole lines data[begin, end). */
typedef struct {
    const bt_dataset_config *cfg;
    const char *data; /* the mapped file */
    size_t begin, end;
    uint32_t line_max;
    uint64_t *words; /* (skip + n, cap) skip free words, then the offsets of its records */
    size_t skip, n, cap;
    uint64_t lines;      /* lines read; after a failure, the chunk's number of the failing line */
    const char *problem; /* why that line is not a record, or NULL */
    bool too_long, no_memory;
    bool threaded; /* runs on a thread of its own */
    pthread_t thread;
} s_chunk;

/*  The one pass over a chunk: every line within line_max, every record checked, its offset kept;
    stops at the first failure. */
static void *s_chunk_scan(void *arg) {
    s_chunk *c = arg;
    char *scratch = malloc((size_t)c->line_max + 1);
    c->cap = c->skip + 4096;
    c->words = malloc(c->cap * sizeof *c->words);
    c->no_memory = !scratch || !c->words;
    const char *end = c->data + c->end;
    for (const char *line = c->data + c->begin; !c->no_memory && line < end;) {
        c->lines++;
        size_t left = (size_t)(end - line), len;
        const char *nl =
            memchr(line, '\n', left < (size_t)c->line_max + 1 ? left : c->line_max + 1);
        len = nl ? (size_t)(nl - line) : left;
        if ((c->too_long = len > c->line_max))
            break;
        if (!s_is_blank(line, len)) {
            if (c->cfg->check && (c->problem = c->cfg->check(line, len, scratch, c->cfg->user)))
                break;
            if (c->skip + c->n == c->cap) {
                uint64_t *w = realloc(c->words, 2 * c->cap * sizeof *w);
                c->no_memory = !w;
                if (!w)
                    break;
                c->words = w;
                c->cap *= 2;
            }
            c->words[c->skip + c->n++] = (uint64_t)(line - c->data);
        }
        line = nl ? nl + 1 : end;
    }
    free(scratch);
    return NULL;
}

/*  How many threads share the first pass: cfg->threads, else one per online CPU, at most
    S_THREADS_MAX, and no more than one per S_CHUNK_MIN bytes. */
static size_t s_chunk_count(const bt_dataset_config *cfg, size_t size) {
    long cpus = cfg->threads > 0 ? cfg->threads : sysconf(_SC_NPROCESSORS_ONLN);
    size_t n = cpus < 1 ? 1 : cpus > S_THREADS_MAX ? S_THREADS_MAX : (size_t)cpus;
    size_t by_size = 1 + size / S_CHUNK_MIN;
    return n < by_size ? n : by_size;
}

/*  The index of data[0, size) (the mapped file), built by n threads on whole-line chunks of it.
    The first failure in file order is reported, with its line number in the file.  On success,
    index_mem holds the header (hashes filled in) and the offsets. */
static bt_status s_index_scan(bt_dataset_t *self, const bt_dataset_config *cfg, const char *data,
                              const s_header *want) {
    size_t n = s_chunk_count(cfg, self->size);
    s_chunk chunks[S_THREADS_MAX];
    for (size_t k = 0; k < n; k++) {
        size_t begin = k == 0 ? 0 : chunks[k - 1].end, at = (k + 1) * self->size / n;
        const char *nl = k + 1 < n && at < self->size && at >= begin
                             ? memchr(data + at, '\n', self->size - at)
                             : NULL;
        size_t end = k + 1 == n ? self->size : nl ? (size_t)(nl - data) + 1 : begin;
        chunks[k] = (s_chunk){.cfg = cfg,
                              .data = data,
                              .begin = begin,
                              .end = end < begin ? begin : end,
                              .line_max = self->line_max,
                              .skip = k == 0 ? S_HEADER_WORDS : 0};
    }
    for (size_t k = 1; k < n; k++)
        chunks[k].threaded = pthread_create(&chunks[k].thread, NULL, s_chunk_scan, &chunks[k]) == 0;
    s_chunk_scan(&chunks[0]);
    for (size_t k = 1; k < n; k++) {
        if (chunks[k].threaded)
            pthread_join(chunks[k].thread, NULL);
        else
            s_chunk_scan(&chunks[k]);
    }
    bt_status st = BT_OK;
    uint64_t lines = 0, count = 0;
    for (size_t k = 0; k < n && st == BT_OK; k++) {
        const s_chunk *c = &chunks[k];
        if (c->no_memory)
            st = bt_fail(BT_ENOMEM, "%s: out of memory for the index", self->path);
        else if (c->too_long)
            st = bt_fail(BT_EFORMAT, "%s:%" PRIu64 ": line longer than %u bytes", self->path,
                         lines + c->lines, self->line_max);
        else if (c->problem)
            st =
                bt_fail(BT_EFORMAT, "%s:%" PRIu64 ": %s", self->path, lines + c->lines, c->problem);
        lines += c->lines;
        count += c->n;
    }
    /* chunk 0's words become the index: grown to hold the others' offsets after its own */
    uint64_t *index = NULL;
    if (st == BT_OK) {
        index = realloc(chunks[0].words, (S_HEADER_WORDS + count) * sizeof *index);
        st = index ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory for the index", self->path);
    }
    if (index) {
        chunks[0].words = NULL;
        size_t at = S_HEADER_WORDS + chunks[0].n;
        for (size_t k = 1; k < n; k++) {
            memcpy(index + at, chunks[k].words, chunks[k].n * sizeof *index);
            at += chunks[k].n;
        }
    }
    for (size_t k = 0; k < n; k++)
        free(chunks[k].words);
    if (st != BT_OK)
        return st;
    self->index_mem = index;
    self->count = count;
    self->offsets = index + S_HEADER_WORDS;
    s_header h = *want;
    h.count = count;
    h.offsets_hash = bt_hash64(self->offsets, 8 * count);
    h.header_hash = s_header_hash(&h);
    memcpy(index, &h, sizeof h);
    return BT_OK;
}

/*  Maps the file for the one pass of s_index_scan, and unmaps it: afterwards records are read
    with pread, so none of the file's pages stay in this process. */
static bt_status s_index_build(bt_dataset_t *self, const bt_dataset_config *cfg,
                               const s_header *want) {
    if (self->size == 0)
        return s_index_scan(self, cfg, "", want);
    void *data = mmap(NULL, self->size, PROT_READ, MAP_PRIVATE, self->fd, 0);
    if (data == MAP_FAILED)
        return bt_fail(BT_EIO, "%s: cannot map: %s", self->path, strerror(errno));
    madvise(data, self->size, MADV_SEQUENTIAL);
    bt_status st = s_index_scan(self, cfg, data, want);
    munmap(data, self->size);
    return st;
}

/*  Writes the built index to a temporary file beside ipath and renames it to ipath.  No fsync: a
    torn index after a crash fails its size or hash check and is rebuilt. */
static bool s_index_save(const bt_dataset_t *self, const char *ipath) {
    char *tmp = s_concat(ipath, ".XXXXXX", "");
    int fd = tmp ? mkstemp(tmp) : -1;
    if (fd < 0) {
        free(tmp);
        return false;
    }
    const char *p = (const char *)self->index_mem;
    size_t left = (S_HEADER_WORDS + (size_t)self->count) * 8;
    bool ok = fchmod(fd, 0644) == 0;
    while (ok && left > 0) {
        ssize_t n = write(fd, p, left);
        ok = n > 0 || (n < 0 && errno == EINTR);
        if (n > 0) {
            p += n;
            left -= (size_t)n;
        }
    }
    ok = close(fd) == 0 && ok && rename(tmp, ipath) == 0;
    if (!ok)
        unlink(tmp);
    free(tmp);
    return ok;
}

/*  Saves the index beside the file, else in the cache folder; sets index_path. */
static void s_index_place(bt_dataset_t *self, const char *beside, const char *cached,
                          const struct stat *st, const struct timespec *t0) {
    int64_t age_ns = ((int64_t)t0->tv_sec - (int64_t)st->st_mtim.tv_sec) * 1000000000LL +
                     ((int64_t)t0->tv_nsec - (int64_t)st->st_mtim.tv_nsec);
    if (age_ns < S_RACY_NS) {
        bt_log(BT_LOG_INFO,
               "%s: index kept in memory, not saved: the file changed less than 0.1 s before "
               "it was read",
               self->path);
        return;
    }
    const char *placed = NULL;
    if (beside && s_index_save(self, beside))
        placed = beside;
    else if (cached && s_make_parents(cached) && s_index_save(self, cached))
        placed = cached;
    if (!placed) {
        bt_log(BT_LOG_INFO,
               "%s: index kept in memory: cannot write %s or the cache folder %s; the next open "
               "reads the whole file again",
               self->path, beside ? beside : "beside it", cached ? cached : "(no cache folder)");
        return;
    }
    char *copy = s_concat(placed, "", "");
    if (copy) {
        free(self->index_path);
        self->index_path = copy;
    }
}

/* ---- the dataset ---------------------------------------------------------------------------- */
/*  Opens the file and fills *st. */
static bt_status s_open_file(bt_dataset_t *self, struct stat *st) {
    self->fd = open(self->path, O_RDONLY | O_CLOEXEC);
    if (self->fd < 0)
        return bt_fail(BT_EIO, "%s: cannot open: %s", self->path, strerror(errno));
    if (fstat(self->fd, st) != 0)
        return bt_fail(BT_EIO, "%s: cannot stat: %s", self->path, strerror(errno));
    if (!S_ISREG(st->st_mode))
        return bt_fail(BT_EIO, "%s: not a regular file", self->path);
    self->size = (size_t)st->st_size;
    return BT_OK;
}

bt_status bt_dataset_open(const bt_dataset_config *cfg, bt_dataset_t **out) {
    *out = NULL;
    bt_dataset_t *self = calloc(1, sizeof *self);
    if (self) {
        self->fd = -1;
        self->line_max = cfg->line_max ? cfg->line_max : S_LINE_MAX_DEFAULT;
        self->path = s_concat(cfg->path, "", "");
        self->index_path = s_concat("", "", "");
    }
    if (!self || !self->path || !self->index_path) {
        bt_dataset_destroy(&self);
        return bt_fail(BT_ENOMEM, "%s: out of memory", cfg->path);
    }
    struct timespec t0;
    clock_gettime(CLOCK_REALTIME, &t0);
    struct stat st;
    bt_status status = s_open_file(self, &st);
    char *beside = s_concat(cfg->path, ".btidx", ""), *cached = s_cache_path(cfg->path);
    if (status == BT_OK) {
        s_header want = s_expected(cfg, self->line_max, &st);
        if (beside && s_index_load(self, beside, &want)) {
            free(self->index_path);
            self->index_path = beside;
            beside = NULL;
        } else if (cached && s_index_load(self, cached, &want)) {
            free(self->index_path);
            self->index_path = cached;
            cached = NULL;
        } else {
            status = s_index_build(self, cfg, &want);
            self->built = true;
            if (status == BT_OK)
                s_index_place(self, beside, cached, &st, &t0);
        }
    }
    free(beside);
    free(cached);
    if (status != BT_OK) {
        bt_dataset_destroy(&self);
        return status;
    }
    *out = self;
    return BT_OK;
}

void bt_dataset_destroy(bt_dataset_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_dataset_t *self = *self_p;
    if (self->fd >= 0)
        close(self->fd);
    if (self->index_map)
        munmap(self->index_map, self->index_map_len);
    free(self->index_mem);
    free(self->index_path);
    free(self->path);
    free(self);
    *self_p = NULL;
}

uint64_t bt_dataset_count(const bt_dataset_t *self) {
    return self->count;
}

const char *bt_dataset_path(const bt_dataset_t *self) {
    return self->path;
}

bt_status bt_dataset_record(const bt_dataset_t *self, uint64_t i, char **out, size_t *len) {
    BT_ASSERT(i < self->count);
    *out = NULL;
    *len = 0;
    uint64_t at = self->offsets[i];
    uint64_t next = i + 1 < self->count ? self->offsets[i + 1] : self->size;
    /* the record and its newline, and any blank lines before the next record: at most line_max
       bytes before the newline */
    size_t want = next > at ? (size_t)(next - at) : 0;
    want = want < (size_t)self->line_max + 1 ? want : (size_t)self->line_max + 1;
    char *buf = malloc(want + 1);
    if (!buf)
        return bt_fail(BT_ENOMEM, "%s: out of memory", self->path);
    size_t got = 0;
    while (got < want) {
        ssize_t n = pread(self->fd, buf + got, want - got, (off_t)(at + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    const char *nl = memchr(buf, '\n', got);
    if (got < want && !nl) { /* cut short: only a file truncated since it was indexed */
        free(buf);
        return bt_fail(BT_EIO,
                       "%s: record %" PRIu64 ": cannot read it (the file changed since "
                       "it was indexed?)",
                       self->path, i + 1);
    }
    *len = nl ? (size_t)(nl - buf) : got;
    buf[*len] = '\0';
    *out = buf;
    return BT_OK;
}

const char *bt_dataset_index_path(const bt_dataset_t *self) {
    return self->index_path;
}

bool bt_dataset_index_was_built(const bt_dataset_t *self) {
    return self->built;
}
