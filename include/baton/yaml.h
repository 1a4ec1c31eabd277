/*  yaml.h — a YAML config turned into the JSON text the config parser reads, with the line of each
    key: libyaml's event parser, scalars typed by the YAML 1.2 core schema (docs/config.md, "YAML").
    Threading: one thread per object; any thread.  Lifetime: a bt_yaml_t lives until
    bt_yaml_destroy; what it returns is borrowed from it. */
#ifndef BATON_YAML_H
#define BATON_YAML_H

#include "baton/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_yaml bt_yaml_t;

/*  Parses one YAML document of len bytes.  Mappings become JSON objects, sequences arrays; a plain
    scalar is null (null, Null, NULL, ~ or nothing), true/false (also True, TRUE, ...), an integer
    (decimal, 0x hex, 0o octal), a float (1.5, .5, 1e3, ...) or else a string; a quoted or block
    scalar is always a string.  Refused, naming source:line and the key path: anchors and aliases,
    tags other than the core schema's !!str / !!map / !!seq, a second document, a key that is not
    a scalar, a duplicate key, .inf and .nan (JSON holds neither), a NUL character, and nesting
    deeper than 64.  Errors: BT_EFORMAT for YAML syntax ("arith.yaml:3:5: mapping values are not
    allowed in this context") and what YAML does not map to JSON, BT_EINVAL for a duplicate key or
    a non-finite number ("arith.yaml:12: grpo.lr: duplicate key").  Caller owns *out. */
bt_status bt_yaml_parse(const char *text, size_t len, const char *source, bt_yaml_t **out);
void bt_yaml_destroy(bt_yaml_t **self_p);

/*  The document as compact JSON text.  Borrowed: valid while self lives. */
const char *bt_yaml_json(const bt_yaml_t *self);

/*  The 1-based line of the node at path: a mapping member's key ("grpo.lr", "variants[1].set",
    members' names joined by '.', sequence items by "[i]"), a sequence item's first token; "" is
    the document.  0 when the document has no such node.  A key whose name holds a '.' reads as
    its parts ("variants[0].set.grpo.lr"). */
int bt_yaml_line(const bt_yaml_t *self, const char *path);

#ifdef __cplusplus
}
#endif
#endif
