/*  tokenizer.h — text to token ids and back.  One kind so far: byte-level, where ids 0..255 are the
    bytes themselves, then BOS 256, EOS 257, PAD 258 (vocab size 259).
    Threading: a tokenizer never changes after new/load; any number of threads may use it at once.
    Lifetime: caller owns it until bt_tokenizer_destroy().

    On disk (save/load) a byte-level tokenizer is DIR/tokenizer_config.json:
      {"tokenizer_class": "baton_bytes", "bos_token_id": 256, "eos_token_id": 257,
       "pad_token_id": 258, "vocab_size": 259} */
#ifndef BATON_TOKENIZER_H
#define BATON_TOKENIZER_H

#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  Values may appear in files and messages: append only. */
typedef enum bt_tokenizer_kind { BT_TOKENIZER_BYTES = 0 } bt_tokenizer_kind;

typedef struct bt_tokenizer bt_tokenizer_t;

/*  The byte-level tokenizer.  Caller owns the result (NULL when out of memory); destroy with
    bt_tokenizer_destroy(). */
bt_tokenizer_t *bt_tokenizer_new_bytes(void);
void bt_tokenizer_destroy(bt_tokenizer_t **self_p);

/*  Reads DIR/tokenizer_config.json.  On success caller owns *out; on failure *out is NULL and the
    status is BT_EIO (cannot read) or BT_EFORMAT, with a message naming the file and the bad key. */
bt_status bt_tokenizer_load(const char *dir, bt_tokenizer_t **out);
/*  Writes DIR/tokenizer_config.json (DIR must exist), fsynced. */
bt_status bt_tokenizer_save(const bt_tokenizer_t *self, const char *dir);

bt_tokenizer_kind bt_tokenizer_kind_of(const bt_tokenizer_t *self);
int32_t bt_tokenizer_bos(const bt_tokenizer_t *self);
int32_t bt_tokenizer_eos(const bt_tokenizer_t *self);
int32_t bt_tokenizer_pad(const bt_tokenizer_t *self);
int32_t bt_tokenizer_vocab_size(const bt_tokenizer_t *self);

/*  Token ids of the len bytes of text (any bytes, NUL included), preceded by BOS when add_bos, into
    out[0 .. *n_out).  No EOS is added.  When cap is too small returns BT_ERANGE and sets *n_out to
    the number of ids needed. */
bt_status bt_tokenizer_encode(const bt_tokenizer_t *self, const char *text, size_t len,
                              bool add_bos, int32_t *out, size_t cap, size_t *n_out);
/*  The text of ids[0 .. n) into out[0 .. *len), followed by a NUL (so cap >= *len + 1).  BOS and
    PAD are skipped; decoding stops at the first EOS.  Returns BT_ERANGE for an id outside the
    vocabulary (before the first EOS) and when cap is too small, with *len the bytes needed. */
bt_status bt_tokenizer_decode(const bt_tokenizer_t *self, const int32_t *ids, size_t n, char *out,
                              size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
