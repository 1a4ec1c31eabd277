/*  security.h — ZeroMQ CURVE for the controller's and the workers' sockets: the key files of
    `baton keygen`, the options of a serving (controller) and a connecting (worker) socket, and the
    ZAP handler that lets in only the listed worker keys and logs each refusal.
    Threading: a bt_zap_t answers on a thread of its own; everything else runs on the caller's.
    Lifetime: a bt_zap_t serves one ZeroMQ context: create it before the serving socket binds,
    destroy it after that socket is closed and before zmq_ctx_term.

    Key files are text: blank lines and lines starting with '#' are skipped; every other line is
    one key, 40 characters of Z85 (32 bytes).  NAME.key holds one secret key (mode 0600: a key file
    that others may read is refused); NAME.pub holds the public key.  An allow list is a file of
    public keys (one a line: a NAME.pub, or several concatenated) or a directory, whose *.pub files
    are read; each key is known by its file's name without ".pub". */
#ifndef BATON_SECURITY_H
#define BATON_SECURITY_H

#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BT_KEY_LEN 40 /* a Z85 key: 32 bytes as 40 characters */
/*  The ZAP domain of the controller's socket. */
#define BT_ZAP_DOMAIN "baton"

/*  A socket's CURVE keys, Z85 with a NUL.  A value struct. */
typedef struct bt_curve_keys {
    char public_key[BT_KEY_LEN + 1];
    char secret_key[BT_KEY_LEN + 1];
    char server_key[BT_KEY_LEN + 1]; /* a connecting socket: the controller's public key */
} bt_curve_keys;

/*  BT_EUNSUPPORTED when this libzmq was built without CURVE (libsodium). */
bt_status bt_curve_available(void);
/*  Writes a fresh key pair to dir/NAME.key (secret, mode 0600) and dir/NAME.pub, creating dir
    (mode 0700 when new).  Never overwrites: BT_EIO naming the file when one exists.  public_key
    (BT_KEY_LEN + 1 bytes, may be NULL) receives the public key. */
bt_status bt_keygen(const char *dir, const char *name, char *public_key);
/*  Reads a NAME.key file into keys->secret_key and derives keys->public_key; server_key is left
    alone.  Errors name the path: unreadable, not exactly one valid key, readable by others. */
bt_status bt_key_read_secret(const char *path, bt_curve_keys *keys);
/*  Reads the first key of a public key file into public_key (BT_KEY_LEN + 1 bytes). */
bt_status bt_key_read_public(const char *path, char *public_key);
/*  True when text is 40 Z85 characters that decode to 32 bytes. */
bool bt_key_is_valid(const char *text);

/*  A connecting socket (a worker's DEALER), before zmq_connect: CURVE client with keys. */
bt_status bt_curve_client(void *sock, const bt_curve_keys *keys);

/*  Called on the ZAP thread when a connection is refused: key is the client's public key in Z85
    ("" when it offered none), address its IP address, reason one line. */
typedef void(bt_zap_refused_fn)(const char *key, const char *address, const char *reason,
                                void *user);

typedef struct bt_zap bt_zap_t;

/*  Reads the server's secret key file and the allow list, and starts the ZAP handler of zmq_ctx
    (a REP socket at inproc://zeromq.zap.01): a CURVE connection to a socket of domain
    BT_ZAP_DOMAIN whose client key is listed is accepted ("200"), anything else refused ("400").
    Every refusal is counted; the first refusal of each key is logged (WARN) and passed to
    on_refused (may be NULL), so a client that keeps reconnecting cannot flood the log.  Caller
    owns the result; destroy with bt_zap_destroy().  NULL on failure, the reason in
    bt_last_error(). */
bt_zap_t *bt_zap_new(void *zmq_ctx, const char *secret_key_file, const char *allow,
                     bt_zap_refused_fn *on_refused, void *user);
void bt_zap_destroy(bt_zap_t **self_p);
/*  Connections refused so far.  Any thread. */
int64_t bt_zap_refused(const bt_zap_t *self);

/*  A serving socket of zmq_ctx (the controller's ROUTER), before zmq_bind: when a bt_zap_t serves
    zmq_ctx, makes sock a CURVE server with its secret key in domain BT_ZAP_DOMAIN; otherwise
    leaves it plain.  Any thread. */
bt_status bt_curve_serve(void *zmq_ctx, void *sock);

#ifdef __cplusplus
}
#endif
#endif
