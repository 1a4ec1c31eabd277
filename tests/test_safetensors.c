/*  test_safetensors.c — the safetensors reader and writer: bit-exact round trips, files exchanged
    with an independent writer and reader (Python: numpy + struct + json), and hostile files. */
#define _XOPEN_SOURCE 700
#include "baton/safetensors.h"

#include "check.h"

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*  Debian's interpreter, which has numpy (python3 on PATH may be another one). */
#define PYTHON "/usr/bin/python3"

static char s_dir[64];

/*  s_dir/name into a static buffer (one at a time). */
static const char *s_path(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    return path;
}

static int s_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static uint64_t s_rng = 0x9E3779B97F4A7C15ull;
/*  xorshift64* (Vigna 2016). */
static uint64_t s_rand(void) {
    s_rng ^= s_rng >> 12;
    s_rng ^= s_rng << 25;
    s_rng ^= s_rng >> 27;
    return s_rng * 0x2545F4914F6CDD1Dull;
}

static void s_fill_random(void *buf, size_t n) {
    for (size_t i = 0; i < n; i++)
        ((uint8_t *)buf)[i] = (uint8_t)s_rand();
}

/*  The whole file into a malloc'd buffer; *size its length.  NULL when it cannot be read. */
static uint8_t *s_slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*size + 1);
    if (buf && fread(buf, 1, *size, f) != *size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static void s_spit(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

/*  A file by hand: the 8-byte little-endian header_len, the header text as given, data_len zero
    bytes of data. */
static void s_write_raw(const char *path, uint64_t header_len, const char *header,
                        size_t data_len) {
    size_t hlen = strlen(header), total = 8 + hlen + data_len;
    uint8_t *buf = calloc(1, total);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(header_len >> (8 * i));
    memcpy(buf + 8, header, hlen);
    s_spit(path, buf, total);
    free(buf);
}

static bool s_same_shape(const bt_st_entry *e, int ndim, const int64_t *shape) {
    return e->ndim == ndim && memcmp(e->shape, shape, (size_t)ndim * sizeof *shape) == 0;
}

/*  Opening path must fail with status want and a message naming the file and containing needle. */
#define EXPECT_BAD(path, want, needle)                                                             \
    do {                                                                                           \
        bt_safetensors_t *_st = NULL;                                                              \
        bt_status _rc = bt_safetensors_open((path), &_st);                                         \
        CHECK(_rc == (want));                                                                      \
        CHECK(_st == NULL);                                                                        \
        CHECK_STR_CONTAINS(bt_last_error(), (path));                                               \
        CHECK_STR_CONTAINS(bt_last_error(), (needle));                                             \
        bt_safetensors_destroy(&_st);                                                              \
    } while (0)

/* ---- round trip ------------------------------------------------------------------------------ */

static void test_round_trip_is_bit_exact(void) {
    /* Random bit patterns, then values a float format must carry exactly. */
    uint32_t f32[3 * 5];     /* (3, 5) F32 */
    uint16_t f16[2 * 3 * 4]; /* (2, 3, 4) F16 */
    uint16_t bf16[7];        /* (7) BF16 */
    s_fill_random(f32, sizeof f32);
    s_fill_random(f16, sizeof f16);
    s_fill_random(bf16, sizeof bf16);
    const uint32_t f32_special[] = {0x7FC00001u /* NaN, payload 1 */, 0xFF800001u /* -sNaN */,
                                    0x80000000u /* -0.0 */, 0x7F800000u /* +inf */,
                                    0x00000001u /* smallest subnormal */};
    memcpy(f32, f32_special, sizeof f32_special);
    f16[0] = 0x7E01, f16[1] = 0x8000, f16[2] = 0xFC01, f16[3] = 0x0001;
    bf16[0] = 0x7FC1, bf16[1] = 0x8000, bf16[2] = 0xFF81;
    uint32_t scalar = 0xBF800000u; /* () F32: -1.0 */
    int64_t i64[3] = {-1, INT64_MAX, 42};
    uint8_t flags[2] = {1, 0};
    const bt_st_tensor ts[] = {
        {"model.layers.0.w", BT_F32, 2, {3, 5}, f32},
        {"h", BT_F16, 3, {2, 3, 4}, f16},
        {"b", BT_BF16, 1, {7}, bf16},
        {"scalar", BT_F32, 0, {0}, &scalar},
        {"empty", BT_F16, 2, {0, 4}, NULL},
        {"ids", BT_I64, 1, {3}, i64},
        {"mask", BT_BOOL, 2, {1, 2}, flags},
    };
    const int n = (int)(sizeof ts / sizeof ts[0]);
    const char *meta[] = {"format", "pt", "note", "caf\xC3\xA9 \"quoted\"\n"};
    const char *path = s_path("round.safetensors");
    CHECK_OK(bt_safetensors_write(path, ts, n, meta, 2));

    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(path, &st));
    if (!st)
        return;
    CHECK(bt_safetensors_count(st) == n);
    for (int i = 0; i < n && i < bt_safetensors_count(st); i++) {
        const bt_st_entry *e = bt_safetensors_entry(st, i);
        CHECK(strcmp(e->name, ts[i].name) == 0); /* the order given */
        CHECK(e->dtype == ts[i].dtype);
        CHECK(s_same_shape(e, ts[i].ndim, ts[i].shape));
        CHECK(bt_safetensors_find(st, ts[i].name) == e);
        if (e->nbytes)
            CHECK(memcmp(e->data, ts[i].data, e->nbytes) == 0);
    }
    CHECK(bt_safetensors_entry(st, 0)->nbytes == sizeof f32);
    CHECK(bt_safetensors_entry(st, 3)->nbytes == 4);
    CHECK(bt_safetensors_entry(st, 4)->nbytes == 0);
    CHECK(bt_safetensors_find(st, "missing") == NULL);
    CHECK(strcmp(bt_safetensors_meta(st, "format"), "pt") == 0);
    CHECK(strcmp(bt_safetensors_meta(st, "note"), meta[3]) == 0);
    CHECK(bt_safetensors_meta(st, "absent") == NULL);
    bt_safetensors_destroy(&st);
    CHECK(st == NULL);
    bt_safetensors_destroy(&st); /* idempotent */
}

/*  The canonical layout: header padded to 8 bytes, offsets contiguous, nothing after the data. */
static void test_writer_layout_is_canonical(void) {
    uint8_t bytes[3] = {1, 2, 3};
    float f[2] = {1.0f, 2.0f};
    const bt_st_tensor ts[] = {{"odd", BT_U8, 1, {3}, bytes}, {"f", BT_F32, 1, {2}, f}};
    const char *path = s_path("layout.safetensors");
    CHECK_OK(bt_safetensors_write(path, ts, 2, NULL, 0));
    size_t size = 0;
    uint8_t *file = s_slurp(path, &size);
    CHECK(file != NULL);
    if (!file)
        return;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | file[i];
    CHECK(n % 8 == 0);
    CHECK(size == 8 + n + 3 + 8);
    CHECK(memcmp(file + 8 + n, bytes, 3) == 0);
    CHECK(memcmp(file + 8 + n + 3, f, 8) == 0);
    free(file);

    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(path, &st));
    if (st)
        CHECK((const uint8_t *)bt_safetensors_entry(st, 1)->data ==
              (const uint8_t *)bt_safetensors_entry(st, 0)->data + 3);
    bt_safetensors_destroy(&st);
}

static void test_writer_refuses_bad_tensors(void) {
    float f[4] = {0};
    const char *path = s_path("bad_write.safetensors");
    const bt_st_tensor twice[] = {{"w", BT_F32, 1, {4}, f}, {"w", BT_F32, 1, {4}, f}};
    CHECK(bt_safetensors_write(path, twice, 2, NULL, 0) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "'w' given twice");
    const bt_st_tensor negative = {"w", BT_F32, 2, {2, -2}, f};
    CHECK(bt_safetensors_write(path, &negative, 1, NULL, 0) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "dim 1 is -2");
    const bt_st_tensor reserved = {"__metadata__", BT_F32, 1, {4}, f};
    CHECK(bt_safetensors_write(path, &reserved, 1, NULL, 0) == BT_EINVAL);
    const bt_st_tensor no_data = {"w", BT_F32, 1, {4}, NULL};
    CHECK(bt_safetensors_write(path, &no_data, 1, NULL, 0) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "data is NULL");
    const bt_st_tensor ok = {"w", BT_F32, 1, {4}, f};
    CHECK(bt_safetensors_write("/nonexistent-dir/x.safetensors", &ok, 1, NULL, 0) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), "/nonexistent-dir/x.safetensors");
}

/* ---- an independent writer and reader: Python with numpy, struct and json -------------------- */

static bool s_run_python(const char *script_name, const char *script, const char *arg) {
    char script_path[256], cmd[600];
    snprintf(script_path, sizeof script_path, "%s", s_path(script_name));
    s_spit(script_path, script, strlen(script));
    snprintf(cmd, sizeof cmd, "%s '%s' '%s'", PYTHON, script_path, arg);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "%s exited with status %d\n", cmd, rc);
    return rc == 0;
}

/*  Tensors in data order a, b, c, d; the header lists them in reverse after the metadata. */
static const char s_py_writer[] =
    "import json, struct, sys\n"
    "import numpy as np\n"
    "a = (np.arange(6, dtype='<f4') * 0.5 - 1.0).reshape(2, 3)\n"
    "b = np.arange(4, dtype='<f2') - np.float16(1.5)\n"
    "c = ((np.arange(4, dtype='<f4') * 0.25).view('<u4') >> 16).astype('<u2').reshape(2, 2)\n"
    "d = np.array([-1, 0, 2**40], dtype='<i8')\n"
    "entries, blobs, offset = [], [], 0\n"
    "for name, dtype, arr in [('a', 'F32', a), ('b', 'F16', b), ('c', 'BF16', c), ('d', 'I64', "
    "d)]:\n"
    "    raw = arr.tobytes()\n"
    "    entries.append((name, {'dtype': dtype, 'shape': list(arr.shape),\n"
    "                           'data_offsets': [offset, offset + len(raw)]}))\n"
    "    blobs.append(raw)\n"
    "    offset += len(raw)\n"
    "header = {'__metadata__': {'source': 'numpy'}}\n"
    "header.update(reversed(entries))\n"
    "text = json.dumps(header).encode()\n"
    "text += b' ' * (-(8 + len(text)) % 8)\n"
    "with open(sys.argv[1], 'wb') as f:\n"
    "    f.write(struct.pack('<Q', len(text)) + text + b''.join(blobs))\n";

static void test_reads_file_from_python(void) {
    const char *path = s_path("numpy.safetensors");
    char file[256];
    snprintf(file, sizeof file, "%s", path);
    if (!s_run_python("writer.py", s_py_writer, file)) {
        CHECK(!"the Python writer failed (needs " PYTHON " with numpy)");
        return;
    }
    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(file, &st));
    if (!st)
        return;
    CHECK(bt_safetensors_count(st) == 4);
    CHECK(strcmp(bt_safetensors_meta(st, "source"), "numpy") == 0);
    const char *names[4] = {"a", "b", "c", "d"}; /* entries come in data order */
    for (int i = 0; i < 4 && i < bt_safetensors_count(st); i++)
        CHECK(strcmp(bt_safetensors_entry(st, i)->name, names[i]) == 0);

    const bt_st_entry *a = bt_safetensors_find(st, "a");
    CHECK(a && a->dtype == BT_F32 && s_same_shape(a, 2, (int64_t[]){2, 3}) && a->nbytes == 24);
    for (int i = 0; a && i < 6; i++) {
        float v;
        memcpy(&v, (const uint8_t *)a->data + 4 * i, 4);
        CHECK(v == (float)i * 0.5f - 1.0f);
    }
    /* -1.5, -0.5, 0.5, 1.5 in IEEE half */
    const uint16_t b_bits[4] = {0xBE00, 0xB800, 0x3800, 0x3E00};
    const bt_st_entry *b = bt_safetensors_find(st, "b");
    CHECK(b && b->dtype == BT_F16 && s_same_shape(b, 1, (int64_t[]){4}));
    CHECK(b && b->nbytes == 8 && memcmp(b->data, b_bits, 8) == 0);
    /* 0, 0.25, 0.5, 0.75 in bfloat16 */
    const uint16_t c_bits[4] = {0x0000, 0x3E80, 0x3F00, 0x3F40};
    const bt_st_entry *c = bt_safetensors_find(st, "c");
    CHECK(c && c->dtype == BT_BF16 && s_same_shape(c, 2, (int64_t[]){2, 2}));
    CHECK(c && c->nbytes == 8 && memcmp(c->data, c_bits, 8) == 0);
    const int64_t d_vals[3] = {-1, 0, (int64_t)1 << 40};
    const bt_st_entry *d = bt_safetensors_find(st, "d");
    CHECK(d && d->dtype == BT_I64 && s_same_shape(d, 1, (int64_t[]){3}));
    CHECK(d && d->nbytes == 24 && memcmp(d->data, d_vals, 24) == 0);
    bt_safetensors_destroy(&st);
}

/*  Asserts the layout and values of the file test_python_reads_our_file writes; exits non-zero on
    any mismatch. */
static const char s_py_reader[] =
    "import json, struct, sys\n"
    "import numpy as np\n"
    "data = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', data[:8])[0]\n"
    "assert (8 + n) % 8 == 0, 'data region not 8-byte aligned'\n"
    "header = json.loads(data[8:8 + n])\n"
    "body = data[8 + n:]\n"
    "assert header.pop('__metadata__') == {'step': '7', 'run': 'a b'}, 'metadata'\n"
    "expect = [('w', 'F32', [2, 3], np.arange(6, dtype='<f4') / 4 - 1),\n"
    "          ('h', 'F16', [4], np.arange(4, dtype='<f2') - 2),\n"
    "          ('bf', 'BF16', [3], np.array([0x3F80, 0xC000, 0x0000], dtype='<u2'))]\n"
    "assert sorted(header) == sorted(e[0] for e in expect), sorted(header)\n"
    "offset = 0\n"
    "for name, dtype, shape, want in expect:\n"
    "    e = header[name]\n"
    "    span = [offset, offset + want.nbytes]\n"
    "    assert e == {'dtype': dtype, 'shape': shape, 'data_offsets': span}, (name, e)\n"
    "    got = np.frombuffer(body[offset:offset + want.nbytes], dtype=want.dtype)\n"
    "    assert np.array_equal(got, want), (name, got, want)\n"
    "    offset += want.nbytes\n"
    "assert offset == len(body), 'trailing bytes'\n";

static void test_python_reads_our_file(void) {
    float w[6]; /* (2, 3): arange(6) / 4 - 1 */
    for (int i = 0; i < 6; i++)
        w[i] = (float)i / 4 - 1;
    const uint16_t h[4] = {0xC000, 0xBC00, 0x0000, 0x3C00}; /* -2, -1, 0, 1 in IEEE half */
    const uint16_t bf[3] = {0x3F80, 0xC000, 0x0000};        /* 1, -2, 0 in bfloat16 */
    const bt_st_tensor ts[] = {
        {"w", BT_F32, 2, {2, 3}, w}, {"h", BT_F16, 1, {4}, h}, {"bf", BT_BF16, 1, {3}, bf}};
    const char *meta[] = {"step", "7", "run", "a b"};
    char file[256];
    snprintf(file, sizeof file, "%s", s_path("ours.safetensors"));
    CHECK_OK(bt_safetensors_write(file, ts, 3, meta, 2));
    CHECK(s_run_python("reader.py", s_py_reader, file));
}

/* ---- hostile files --------------------------------------------------------------------------- */

/*  Cuts a valid file at several points; every cut must be refused. */
static void test_truncated_files_are_refused(void) {
    float f[6] = {1, 2, 3, 4, 5, 6};
    const bt_st_tensor t = {"lm_head.weight", BT_F32, 2, {2, 3}, f};
    const char *whole = s_path("whole.safetensors");
    CHECK_OK(bt_safetensors_write(whole, &t, 1, NULL, 0));
    size_t size = 0;
    uint8_t *file = s_slurp(whole, &size);
    CHECK(file != NULL);
    if (!file)
        return;
    size_t n = size - 8 - sizeof f;
    const size_t cuts[] = {0, 5, 8, 8 + n / 2, 8 + n - 1, 8 + n, size - 1};
    const char *needles[] = {"too short",
                             "too short",
                             "larger than the 0 bytes",
                             "is larger than",
                             "is larger than",
                             "outside the data region",
                             "outside the data region"};
    char path[256];
    snprintf(path, sizeof path, "%s", s_path("cut.safetensors"));
    for (int i = 0; i < (int)(sizeof cuts / sizeof cuts[0]); i++) {
        s_spit(path, file, cuts[i]);
        EXPECT_BAD(path, BT_EFORMAT, needles[i]);
    }
    free(file);
}

static void test_lying_headers_are_refused(void) {
    char path[256];
    snprintf(path, sizeof path, "%s", s_path("bad.safetensors"));
    const char *valid = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    s_write_raw(path, strlen(valid), valid, 24);
    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(path, &st)); /* the base the cases below break */
    bt_safetensors_destroy(&st);

    s_write_raw(path, (uint64_t)1 << 40, valid, 24);
    EXPECT_BAD(path, BT_EFORMAT, "header length 1099511627776 is larger than");
    s_write_raw(path, 16, "this is not json", 0);
    EXPECT_BAD(path, BT_EFORMAT, "header is not valid JSON");
    s_write_raw(path, 8, "{}  ]   ", 0);
    EXPECT_BAD(path, BT_EFORMAT, "header is not valid JSON");
    s_write_raw(path, 8, "[1, 2]  ", 0);
    EXPECT_BAD(path, BT_EFORMAT, "header is not a JSON object");
    s_write_raw(path, 4, "{}\xff ", 0);
    EXPECT_BAD(path, BT_EFORMAT, "not UTF-8");

    /* Each case: header text, data bytes, expected message. */
    static const struct {
        const char *header;
        size_t data;
        const char *needle;
    } cases[] = {
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[1000],\"data_offsets\":[0,1000]}}", 24,
         "'x': data_offsets [0, 1000] outside the data region of 24 bytes"},
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[9,8]}}", 24, "outside"},
        {"{\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[5,7],\"data_offsets\":[0,100]}}", 200,
         "tensor 'lm_head.weight': data_offsets [0, 100] but shape [5, 7] F32 needs 140 bytes"},
        {"{\"x\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
         "unknown dtype 'F33'"},
        {"{\"x\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "dtype is not a string"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[8,24]}}",
         24, "tensors 'a' and 'b' overlap"},
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
         "\"x\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]}}",
         24, "tensor 'x' appears twice"},
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 8, "shape dim 0"},
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[2,1.5],\"data_offsets\":[0,3]}}", 8, "shape dim 1"},
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 8,
         "at most 8 dims"},
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,1]}}", 8,
         "shape [4294967296, 4294967296] is too large"},
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[1]}}", 8, "missing 'data_offsets'"},
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"foo\":1}}", 8,
         "unknown key 'foo'"},
        {"{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 8,
         "data_offsets must be [begin, end]"},
        {"{\"x\":[1,2]}", 8, "'x': expected an object"},
        {"{\"__metadata__\":{\"step\":7}}", 0, "__metadata__ key 'step': value is not a string"},
        {"{\"__metadata__\":[]}", 0, "__metadata__ is not an object"},
        {"{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8, "tensor name of 0"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        s_write_raw(path, strlen(cases[i].header), cases[i].header, cases[i].data);
        EXPECT_BAD(path, BT_EFORMAT, cases[i].needle);
    }
}

static void test_unreadable_paths_are_io_errors(void) {
    EXPECT_BAD(s_path("does-not-exist.safetensors"), BT_EIO, "cannot open");
    EXPECT_BAD(s_dir, BT_EIO, "not a regular file");
}

/*  Random byte changes and truncations of a valid file: each must open cleanly (and then every
    entry must lie inside the file) or fail with a message; nothing may crash. */
static void test_mutated_files_never_crash(void) {
    float f[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[3] = {1, 2, 3};
    const bt_st_tensor ts[] = {{"a.weight", BT_F32, 2, {2, 3}, f}, {"b", BT_BF16, 1, {3}, h}};
    const char *meta[] = {"format", "pt"};
    char whole[256], path[256];
    snprintf(whole, sizeof whole, "%s", s_path("seed.safetensors"));
    snprintf(path, sizeof path, "%s", s_path("mutant.safetensors"));
    CHECK_OK(bt_safetensors_write(whole, ts, 2, meta, 1));
    size_t size = 0;
    uint8_t *seed = s_slurp(whole, &size);
    CHECK(seed != NULL);
    if (!seed)
        return;
    uint8_t *buf = malloc(size);
    const char tokens[] = "{}[]\":,0123456789-. eE\\u";
    int opened = 0, refused = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, seed, size);
        size_t len = size;
        int n_edits = 1 + (int)(s_rand() % 4);
        for (int k = 0; k < n_edits; k++) {
            size_t at = (size_t)(s_rand() % size);
            buf[at] = (s_rand() & 1) ? (uint8_t)s_rand() : (uint8_t)tokens[s_rand() % 25];
        }
        if (s_rand() % 4 == 0)
            len = (size_t)(s_rand() % (size + 1));
        s_spit(path, buf, len);
        bt_safetensors_t *st = NULL;
        if (bt_safetensors_open(path, &st) != BT_OK) {
            CHECK(st == NULL && bt_last_error()[0] != '\0');
            refused++;
            continue;
        }
        opened++;
        for (int i = 0; i < bt_safetensors_count(st); i++) {
            const bt_st_entry *e = bt_safetensors_entry(st, i);
            CHECK(bt_safetensors_find(st, e->name) == e);
            uint8_t sum = 0; /* touches every byte, for sanitizers */
            for (size_t j = 0; j < e->nbytes; j++)
                sum ^= ((const uint8_t *)e->data)[j];
            (void)sum;
            CHECK(e->nbytes <= len);
        }
        bt_safetensors_destroy(&st);
    }
    printf("mutations: %d opened, %d refused\n", opened, refused);
    CHECK(opened > 0 && refused > 0);
    free(buf);
    free(seed);
}

int main(void) {
    snprintf(s_dir, sizeof s_dir, "/tmp/bt_safetensors_XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip_is_bit_exact();
    test_writer_layout_is_canonical();
    test_writer_refuses_bad_tensors();
    test_reads_file_from_python();
    test_python_reads_our_file();
    test_truncated_files_are_refused();
    test_lying_headers_are_refused();
    test_unreadable_paths_are_io_errors();
    test_mutated_files_never_crash();
    nftw(s_dir, s_remove_one, 8, FTW_DEPTH | FTW_PHYS);
    return check_exit();
}
