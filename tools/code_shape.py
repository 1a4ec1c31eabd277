#!/usr/bin/env python3
"""code_shape.py — the shape of a folder's C code as JSON lines: each file's lines, and the
longest functions (a function: a line at column 0 that opens a body, to its closing "}" at
column 0).  Usage: tools/code_shape.py [FOLDER ...] (default orchestrator)."""
import json, re, sys

def functions(path):
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(static )?[a-z_][a-z_0-9 \*]*?\b([a-z_][a-z_0-9]*)\(", lines[i])
        if m and not lines[i].rstrip().endswith(";"):
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j
                while k < len(lines) and lines[k] != "}":
                    k += 1
                out.append((m.group(2), k - i + 1))
                i = k
        i += 1
    return len(lines) - 1, out

import glob
folders = sys.argv[1:] or ["orchestrator"]
allf = []
for folder in folders:
    for path in sorted(glob.glob(folder + "/*.c")):
        n, fns = functions(path)
        longest = max(fns, key=lambda f: f[1]) if fns else ("", 0)
        allf += [(path, f, l) for f, l in fns]
        print(json.dumps({"file": path, "lines": n, "functions": len(fns),
                          "longest": longest[0], "longest_lines": longest[1]}))
top = sorted(allf, key=lambda x: -x[2])[:10]
print(json.dumps({"longest_functions": [{"file": p, "function": f, "lines": l} for p, f, l in top]}))
