/*  tfrecord.h — TensorFlow's record framing (TFRecord, with its masked CRC-32C) and the few
    protobuf messages of a TensorBoard event file (Event, Summary, TensorProto), encoded by hand:
    no TensorFlow, no protobuf library.
    Threading: no shared state; the CRC table is constant.  Lifetime: stateless functions. */
#ifndef BATON_TFRECORD_H
#define BATON_TFRECORD_H

#include "baton/buf.h"
#include "baton/status.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of data[0, n), continuing from crc (0 to
    start): bt_crc32c(0, "123456789", 9) is 0xE3069283. */
uint32_t bt_crc32c(uint32_t crc, const void *data, size_t n);
/*  TFRecord's masked form of a CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t bt_crc32c_mask(uint32_t crc);

/*  Appends one record to f: uint64 little-endian length, masked CRC-32C of those 8 bytes, the
    data, masked CRC-32C of the data.  Does not flush.  BT_EIO when a write fails (errno is left
    for the caller's message). */
bt_status bt_tfrecord_write(FILE *f, const void *data, size_t n);

/*  Encoders of tensorboard.Event (event.proto) into out (appended; check out->failed once).
    Field numbers as TensorBoard's compat protos: Event {wall_time double = 1, step int64 = 2,
    file_version string = 3, summary Summary = 5, session_log SessionLog = 7}. */
/*  The first record of an event file: file_version "brain.Event:2". */
void bt_tfevent_file_version(bt_buf *out, double wall_time);
/*  SessionLog {status START = 1} at step: TensorBoard's loaders that honour it drop the records
    of earlier files with step >= this one (a restarted writer). */
void bt_tfevent_session_start(bt_buf *out, double wall_time, int64_t step);
/*  One scalar: Summary.Value {tag = 1, simple_value float = 2, metadata = 9 {plugin_data = 1
    {plugin_name = 1 "scalars"}}}. */
void bt_tfevent_scalar(bt_buf *out, double wall_time, int64_t step, const char *tag, float value);
/*  One text (the text plugin): Summary.Value {tag, metadata {plugin_data {plugin_name "text"}},
    tensor = 8 TensorProto {dtype = 1 DT_STRING (7), tensor_shape = 2 {} (a scalar), string_val = 8
    text[0, len)}}. */
void bt_tfevent_text(bt_buf *out, double wall_time, int64_t step, const char *tag, const char *text,
                     size_t len);

#ifdef __cplusplus
}
#endif
#endif
