#!/usr/bin/env python3
"""tensorboard_decode.py DATA_DIR EVENT_FILE... — decodes TensorBoard event files with Google's
protobuf runtime (python3-protobuf), against message classes built from the .proto files in
DATA_DIR (tests/data/tensorboard/), and prints what they hold as one JSON object on stdout:

  {"files": [{"path": P, "records": N, "file_version": S, "session_starts": [step, ...],
              "scalars": [[tag, step, value, plugin], ...], "texts": [[tag, step, text], ...],
              "wall_times": [min, max]}]}

The TFRecord framing (uint64 LE length, masked CRC-32C of it, data, masked CRC-32C of the data) is
read and both CRCs checked here, with a bitwise CRC-32C of this file's own.  Debian's
python3-protobuf ships no protoc, so the .proto text is parsed here (the subset those files use:
package, import, message, nested message, enum, oneof, repeated) into FileDescriptorProtos for a
DescriptorPool: the field numbers and types the decoder uses are the vendored files' own.
Exits 77 (printing SKIP) when google.protobuf cannot be imported, 1 on a bad record."""
import json
import os
import re
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:
    print("SKIP: python3-protobuf (google.protobuf) is not installed")
    sys.exit(77)

F = descriptor_pb2.FieldDescriptorProto
SCALARS = {"double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int64": F.TYPE_INT64,
           "uint64": F.TYPE_UINT64, "int32": F.TYPE_INT32, "uint32": F.TYPE_UINT32,
           "bool": F.TYPE_BOOL, "string": F.TYPE_STRING, "bytes": F.TYPE_BYTES}


def tokens(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.findall(r'"[^"]*"|[A-Za-z_][A-Za-z0-9_.]*|-?\d+|[{}=;\[\]<>,()]', text)


class Parser:
    """One .proto file into a FileDescriptorProto; type names are resolved after all files."""

    def __init__(self, name, text):
        self.t, self.i = tokens(text), 0
        self.fd = descriptor_pb2.FileDescriptorProto(name=name, syntax="proto3")
        self.refs = []  # (field, scope, type name) to resolve

    def take(self, want=None):
        tok = self.t[self.i]
        self.i += 1
        if want is not None and tok != want:
            raise SyntaxError("%s: expected %r, got %r" % (self.fd.name, want, tok))
        return tok

    def skip_statement(self):
        while self.take() != ";":
            pass

    def parse(self):
        while self.i < len(self.t):
            tok = self.take()
            if tok == "package":
                self.fd.package = self.take()
                self.take(";")
            elif tok == "import":
                self.fd.dependency.append(self.take().strip('"'))
                self.take(";")
            elif tok in ("syntax", "option"):
                self.skip_statement()
            elif tok == "message":
                self.message(self.fd.message_type.add(), self.fd.package)
            elif tok == "enum":
                self.enum(self.fd.enum_type.add())
            else:
                raise SyntaxError("%s: unexpected %r" % (self.fd.name, tok))
        return self

    def enum(self, e):
        e.name = self.take()
        self.take("{")
        while (tok := self.take()) != "}":
            if tok == "option":
                self.skip_statement()
                continue
            self.take("=")
            e.value.add(name=tok, number=int(self.take()))
            self.take(";")

    def message(self, m, scope):
        m.name = self.take()
        full = scope + "." + m.name
        self.take("{")
        oneof = None
        while True:
            tok = self.take()
            if tok == "}":
                if oneof is None:
                    break
                oneof = None
                continue
            if tok == "message":
                self.message(m.nested_type.add(), full)
            elif tok == "enum":
                self.enum(m.enum_type.add())
            elif tok == "oneof":
                m.oneof_decl.add(name=self.take())
                oneof = len(m.oneof_decl) - 1
                self.take("{")
            elif tok in ("option", "reserved"):
                self.skip_statement()
            else:
                label = F.LABEL_OPTIONAL
                if tok == "repeated":
                    label, tok = F.LABEL_REPEATED, self.take()
                f = m.field.add(name=self.take(), label=label)
                self.take("=")
                f.number = int(self.take())
                if oneof is not None:
                    f.oneof_index = oneof
                if self.t[self.i] == "[":
                    while self.take() != "]":
                        pass
                self.take(";")
                if tok in SCALARS:
                    f.type = SCALARS[tok]
                else:
                    self.refs.append((f, full, tok))


def declared(fd):
    """Full names of the messages and enums of a file: {'.pkg.Name': is_enum}."""
    out = {}

    def walk(m, scope):
        name = scope + "." + m.name
        out[name] = False
        for n in m.nested_type:
            walk(n, name)
        for e in m.enum_type:
            out[name + "." + e.name] = True

    for m in fd.message_type:
        walk(m, "." + fd.package)
    for e in fd.enum_type:
        out["." + fd.package + "." + e.name] = True
    return out


def load(data_dir):
    parsers = {}
    for name in sorted(os.listdir(data_dir)):
        if name.endswith(".proto"):
            with open(os.path.join(data_dir, name)) as f:
                parsers[name] = Parser(name, f.read()).parse()
    names = {}
    for p in parsers.values():
        names.update(declared(p.fd))
    for p in parsers.values():  # protobuf's scoping: innermost scope outwards
        for f, scope, ref in p.refs:
            parts = ("." + scope).split(".")
            for k in range(len(parts), 0, -1):
                cand = ".".join(parts[:k] + [ref])
                if cand in names:
                    f.type_name = cand
                    f.type = F.TYPE_ENUM if names[cand] else F.TYPE_MESSAGE
                    break
            else:
                raise SyntaxError("%s: unknown type %s" % (p.fd.name, ref))
    pool, done = descriptor_pool.DescriptorPool(), set()

    def add(name):  # dependencies first
        if name in done:
            return
        for dep in parsers[name].fd.dependency:
            add(dep)
        pool.Add(parsers[name].fd)
        done.add(name)

    for name in parsers:
        add(name)
    desc = pool.FindMessageTypeByName("tensorboard.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def crc32c(data):
    """CRC-32C bit by bit (RFC 3720: reflected polynomial 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        blob = f.read()
    at = 0
    while at < len(blob):
        if at + 12 > len(blob):
            raise ValueError("%s: %d bytes: a cut header" % (path, at))
        head = blob[at:at + 8]
        (n,) = struct.unpack("<Q", head)
        (crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if crc != masked(crc32c(head)):
            raise ValueError("%s: record at byte %d: length CRC mismatch" % (path, at))
        data = blob[at + 12:at + 12 + n]
        if len(data) != n or at + 16 + n > len(blob):
            raise ValueError("%s: record at byte %d: cut" % (path, at))
        (crc,) = struct.unpack("<I", blob[at + 12 + n:at + 16 + n])
        if crc != masked(crc32c(data)):
            raise ValueError("%s: record at byte %d: data CRC mismatch" % (path, at))
        yield data
        at += 16 + n


def main():
    Event = load(sys.argv[1])
    out = []
    for path in sys.argv[2:]:
        info = {"path": path, "records": 0, "file_version": None, "session_starts": [],
                "scalars": [], "texts": [], "wall_times": None}
        times = []
        try:
            for data in records(path):
                ev = Event.FromString(data)
                info["records"] += 1
                times.append(ev.wall_time)
                what = ev.WhichOneof("what")
                if what == "file_version":
                    info["file_version"] = ev.file_version
                elif what == "session_log":
                    if ev.session_log.status == ev.session_log.START:
                        info["session_starts"].append(ev.step)
                elif what == "summary":
                    for v in ev.summary.value:
                        plugin = v.metadata.plugin_data.plugin_name
                        if v.WhichOneof("value") == "simple_value":
                            info["scalars"].append([v.tag, ev.step, v.simple_value, plugin])
                        elif v.WhichOneof("value") == "tensor":
                            t = v.tensor
                            if t.dtype != 7 or len(t.tensor_shape.dim) or len(t.string_val) != 1:
                                raise ValueError("%s: %s: not a scalar DT_STRING" % (path, v.tag))
                            info["texts"].append([v.tag, ev.step, t.string_val[0].decode(),
                                                  plugin])
        except ValueError as e:
            print(str(e), file=sys.stderr)
            sys.exit(1)
        info["wall_times"] = [min(times), max(times)] if times else None
        out.append(info)
    json.dump({"files": out}, sys.stdout)


if __name__ == "__main__":
    main()
