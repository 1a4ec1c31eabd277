/*  tokenizer.h — text to token ids and back.  Two kinds: byte-level, where ids 0..255 are the
    bytes themselves, then BOS 256, EOS 257, PAD 258 (vocab size 259); and Hugging Face byte-level
    BPE read from a model folder's tokenizer.json (Llama 3, Qwen2/3, GPT-2 and their kin).
    Threading: a tokenizer never changes after new/load; any number of threads may use it at once.
    Lifetime: caller owns it until bt_tokenizer_destroy().

    On disk (save/load) a byte-level tokenizer is DIR/tokenizer_config.json:
      {"tokenizer_class": "baton_bytes", "bos_token_id": 256, "eos_token_id": 257,
       "pad_token_id": 258, "vocab_size": 259}
    A BPE tokenizer is DIR/tokenizer.json with DIR/tokenizer_config.json (bos_token, eos_token,
    pad_token, add_bos_token), written back byte for byte by save.  Encoding, as Hugging Face's
    tokenizers does it: added tokens are split out of the raw text first (longest first;
    lstrip/rstrip/single_word honoured, whitespace in the ASCII sense); each stretch between them
    is normalised (NFC, or nothing), split by the pre-tokenizer's patterns (Split "Isolated" and
    ByteLevel steps; see regex.h for the pattern syntax), and each piece's bytes merged lowest rank
    first (leftmost among equals; a piece that is itself a token is taken whole when the model says
    ignore_merges).  Any byte sequence encodes, invalid UTF-8 included, and no text gives more ids
    than it has bytes (+1 for the BOS). */
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
typedef enum bt_tokenizer_kind { BT_TOKENIZER_BYTES = 0, BT_TOKENIZER_BPE = 1 } bt_tokenizer_kind;

typedef struct bt_tokenizer bt_tokenizer_t;

/*  The byte-level tokenizer.  Caller owns the result (NULL when out of memory); destroy with
    bt_tokenizer_destroy(). */
bt_tokenizer_t *bt_tokenizer_new_bytes(void);
void bt_tokenizer_destroy(bt_tokenizer_t **self_p);

/*  Reads DIR/tokenizer.json with DIR/tokenizer_config.json when there is a tokenizer.json, else
    DIR/tokenizer_config.json of a byte-level tokenizer.  On success caller owns *out; on failure
    *out is NULL and the status is BT_EIO (cannot read), BT_EFORMAT or BT_EUNSUPPORTED (a
    normalizer, pre-tokenizer or model kind baton does not implement), with a message naming the
    file and the bad key. */
bt_status bt_tokenizer_load(const char *dir, bt_tokenizer_t **out);
/*  The tokenizer of a model folder (bt_tokenizer_load), or the byte-level one when dir is "" (a
    model drawn from the config).  Same errors as bt_tokenizer_load. */
bt_status bt_tokenizer_for_model(const char *dir, bt_tokenizer_t **out);
/*  Writes the tokenizer's files into DIR (which must exist), fsynced. */
bt_status bt_tokenizer_save(const bt_tokenizer_t *self, const char *dir);

bt_tokenizer_kind bt_tokenizer_kind_of(const bt_tokenizer_t *self);
/*  The BOS id, or -1 when the tokenizer adds none (Qwen). */
int32_t bt_tokenizer_bos(const bt_tokenizer_t *self);
int32_t bt_tokenizer_eos(const bt_tokenizer_t *self);
int32_t bt_tokenizer_pad(const bt_tokenizer_t *self);
/*  1 + the largest id (added tokens included). */
int32_t bt_tokenizer_vocab_size(const bt_tokenizer_t *self);
/*  The bytes of token id (an added token's content; "<bos>", "<eos>", "<pad>" for the byte-level
    specials), *len bytes, not NUL-terminated; NULL (and *len 0) for an id with no token.
    Borrowed: valid while the tokenizer lives. */
const char *bt_tokenizer_token(const bt_tokenizer_t *self, int32_t id, size_t *len);
/*  The tokens that end a completion, EOS first, into out[0 .. cap): a BPE tokenizer adds the ids
    of the model folder's generation_config.json `eos_token_id` (instruct models list their end of
    turn and end of text there).  Returns how many (at most 8). */
int bt_tokenizer_stops(const bt_tokenizer_t *self, int32_t *out, int cap);
/*  The longest token in bytes: decoding n ids needs at most n times this, + 1 for the NUL. */
size_t bt_tokenizer_max_token_bytes(const bt_tokenizer_t *self);

/*  Token ids of the len bytes of text (any bytes, NUL included), preceded by BOS when add_bos (and
    the tokenizer has one), into
    out[0 .. *n_out).  No EOS is added.  When cap is too small returns BT_ERANGE and sets *n_out to
    the number of ids needed. */
bt_status bt_tokenizer_encode(const bt_tokenizer_t *self, const char *text, size_t len,
                              bool add_bos, int32_t *out, size_t cap, size_t *n_out);
/*  The text of ids[0 .. n) into out[0 .. *len), followed by a NUL (so cap >= *len + 1).  BOS and
    PAD are skipped; decoding stops at the first EOS.  Returns BT_ERANGE for an id outside the
    vocabulary (before the first EOS) and when cap is too small, with *len the bytes needed.
    Decoding stops at any of bt_tokenizer_stops, EOS included. */
bt_status bt_tokenizer_decode(const bt_tokenizer_t *self, const int32_t *ids, size_t n, char *out,
                              size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
