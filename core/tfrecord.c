/*  tfrecord.c — TFRecord framing with masked CRC-32C, and hand-encoded TensorBoard events.
    Formats: TFRecord as tensorflow/core/lib/io/record_writer.cc writes it; CRC-32C as RFC 3720
    (iSCSI) appendix B.4; protobuf wire format (varints, length-delimited fields) as
    protobuf.dev/programming-guides/encoding. */
#include "baton/tfrecord.h"

#include <string.h>

/*  S_CRC32C[b]: the CRC of the byte b alone, reflected polynomial 0x82F63B78, eight shifts. */
/* clang-format off */
static const uint32_t S_CRC32C[256] = {
    0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c,
    0x26a1e7e8, 0xd4ca64eb, 0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
    0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24, 0x105ec76f, 0xe235446c,
    0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
    0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc,
    0xbc267848, 0x4e4dfb4b, 0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
    0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35, 0xaa64d611, 0x580f5512,
    0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
    0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad,
    0x1642ae59, 0xe4292d5a, 0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
    0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595, 0x417b1dbc, 0xb3109ebf,
    0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
    0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f,
    0xed03a29b, 0x1f682198, 0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
    0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38, 0xdbfc821c, 0x2997011f,
    0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
    0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e,
    0x4767748a, 0xb50cf789, 0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
    0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46, 0x7198540d, 0x83f3d70e,
    0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
    0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de,
    0xdde0eb2a, 0x2f8b6829, 0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
    0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93, 0x082f63b7, 0xfa44e0b4,
    0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
    0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b,
    0xb4091bff, 0x466298fc, 0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
    0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033, 0xa24bb5a6, 0x502036a5,
    0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
    0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975,
    0x0e330a81, 0xfc588982, 0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
    0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622, 0x38cc2a06, 0xcaa7a905,
    0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
    0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8,
    0xe52cc12c, 0x1747422f, 0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
    0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0, 0xd3d3e1ab, 0x21b862a8,
    0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
    0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78,
    0x7fab5e8c, 0x8dc0dd8f, 0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
    0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1, 0x69e9f0d5, 0x9b8273d6,
    0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
    0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69,
    0xd5cf889d, 0x27a40b9e, 0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
    0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};
/* clang-format on */

uint32_t bt_crc32c(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = S_CRC32C[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t bt_crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void s_le(unsigned char *out, uint64_t x, int bytes) {
    for (int i = 0; i < bytes; i++)
        out[i] = (unsigned char)(x >> (8 * i));
}

bt_status bt_tfrecord_write(FILE *f, const void *data, size_t n) {
    unsigned char head[12], tail[4];
    s_le(head, (uint64_t)n, 8);
    s_le(head + 8, bt_crc32c_mask(bt_crc32c(0, head, 8)), 4);
    s_le(tail, bt_crc32c_mask(bt_crc32c(0, data, n)), 4);
    if (fwrite(head, 1, sizeof head, f) != sizeof head || (n && fwrite(data, 1, n, f) != n) ||
        fwrite(tail, 1, sizeof tail, f) != sizeof tail)
        return BT_EIO;
    return BT_OK;
}

/* ---- protobuf wire format ------------------------------------------------------------------ */

enum { S_VARINT = 0, S_FIXED64 = 1, S_LEN = 2, S_FIXED32 = 5 };

static void s_varint(bt_buf *b, uint64_t x) {
    unsigned char v[10];
    int n = 0;
    do {
        v[n] = (unsigned char)(x & 0x7f);
        x >>= 7;
        if (x)
            v[n] |= 0x80;
        n++;
    } while (x);
    bt_buf_put(b, v, (size_t)n);
}

static void s_key(bt_buf *b, int field, int wire) {
    s_varint(b, ((uint64_t)field << 3) | (uint64_t)wire);
}

/*  int64 fields: a negative value is its two's complement, ten bytes. */
static void s_int(bt_buf *b, int field, int64_t x) {
    s_key(b, field, S_VARINT);
    s_varint(b, (uint64_t)x);
}

/*  A fixed-width field (double: wire type 1, 8 bytes; float: 5, 4 bytes), little-endian. */
static void s_fixed(bt_buf *b, int field, int wire, uint64_t bits, int bytes) {
    unsigned char v[8];
    s_le(v, bits, bytes);
    s_key(b, field, wire);
    bt_buf_put(b, v, (size_t)bytes);
}

static void s_double(bt_buf *b, int field, double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    s_fixed(b, field, S_FIXED64, u, 8);
}

static void s_float(bt_buf *b, int field, float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    s_fixed(b, field, S_FIXED32, u, 4);
}

/*  A length-delimited field: bytes, a string or an embedded message already encoded. */
static void s_bytes(bt_buf *b, int field, const void *data, size_t n) {
    s_key(b, field, S_LEN);
    s_varint(b, (uint64_t)n);
    bt_buf_put(b, data, n);
}

/*  The message in inner as field of b; inner is released.  A failed inner fails b. */
static void s_message(bt_buf *b, int field, bt_buf *inner) {
    if (inner->failed)
        b->failed = true;
    else
        s_bytes(b, field, inner->data ? inner->data : "", inner->len);
    bt_buf_release(inner);
}

/*  SummaryMetadata {plugin_data = 1 {plugin_name = 1}} as field 9 of a Summary.Value. */
static void s_plugin(bt_buf *value, const char *plugin) {
    bt_buf data = {0}, meta = {0};
    s_bytes(&data, 1, plugin, strlen(plugin));
    s_message(&meta, 1, &data);
    s_message(value, 9, &meta);
}

/*  Event {wall_time, step, summary = 5 {value = 1 value}}; value is released. */
static void s_summary_event(bt_buf *out, double wall_time, int64_t step, bt_buf *value) {
    bt_buf summary = {0};
    s_double(out, 1, wall_time);
    s_int(out, 2, step);
    s_message(&summary, 1, value);
    s_message(out, 5, &summary);
}

void bt_tfevent_file_version(bt_buf *out, double wall_time) {
    static const char version[] = "brain.Event:2";
    s_double(out, 1, wall_time);
    s_bytes(out, 3, version, sizeof version - 1);
}

void bt_tfevent_session_start(bt_buf *out, double wall_time, int64_t step) {
    bt_buf log = {0};
    s_int(&log, 1, 1); /* SessionLog.status = START */
    s_double(out, 1, wall_time);
    s_int(out, 2, step);
    s_message(out, 7, &log);
}

void bt_tfevent_scalar(bt_buf *out, double wall_time, int64_t step, const char *tag, float value) {
    bt_buf v = {0};
    s_bytes(&v, 1, tag, strlen(tag));
    s_float(&v, 2, value);
    s_plugin(&v, "scalars");
    s_summary_event(out, wall_time, step, &v);
}

void bt_tfevent_text(bt_buf *out, double wall_time, int64_t step, const char *tag, const char *text,
                     size_t len) {
    bt_buf v = {0}, tensor = {0}, shape = {0};
    s_bytes(&v, 1, tag, strlen(tag));
    s_plugin(&v, "text");
    s_int(&tensor, 1, 7);          /* dtype = DT_STRING */
    s_message(&tensor, 2, &shape); /* tensor_shape: no dims, a scalar */
    s_bytes(&tensor, 8, text, len);
    s_message(&v, 8, &tensor);
    s_summary_event(out, wall_time, step, &v);
}
