#!/usr/bin/env python3
# ruff: noqa: SIM115  (short offline extraction scripts: open() and lambdas kept as written)
"""build_names.py UNZIPPED_WHEEL_DIR OUT_PREFIX
Writes OUT_PREFIX.txt.gz (sorted unique identifiers) and OUT_PREFIX.seq.txt.gz
(referenced .rodata strings in code order, docstrings included; '@@ <func>' lines
mark function boundaries)."""

import ast
import glob
import gzip
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root, out = sys.argv[1], sys.argv[2]
so = glob.glob(os.path.join(root, "tensorrt_bindings", "tensorrt*.so"))[0]
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{1,60}")
MANGLED = re.compile(r"^(N\d|St\d|P?F[A-Za-z_]*\d|P?F[a-z]+E$)")
refs = subprocess.run(
    [sys.executable, os.path.join(here, "refstrings.py"), so], capture_output=True, text=True, check=True
).stdout.splitlines()
ids = {s for s in refs if IDENT.fullmatch(s)}
# plain `strings` over .rodata only (adds a few names that code builds from
# 16-byte vector loads instead of a pointer), minus C++ typeinfo names
subprocess.run(["objcopy", "-O", "binary", "--only-section=.rodata", so, "/tmp/_ro.bin"], check=True)
ro = subprocess.run(["strings", "-n", "3", "/tmp/_ro.bin"], capture_output=True, text=True).stdout.split("\n")
ids |= {s for s in ro if IDENT.fullmatch(s) and not MANGLED.match(s)}
# names defined by the package's pure-Python files (e.g. DataType.itemsize, nptype, tensorrt.plugin API)
for py in glob.glob(os.path.join(root, "tensorrt_bindings", "**", "*.py"), recursive=True):
    for n in ast.walk(ast.parse(open(py).read())):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            ids.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                if isinstance(t, ast.Attribute):
                    ids.add(t.attr)
                elif isinstance(t, ast.Name) and t.id.isupper() is False and t.id[:1] != "_":
                    ids.add(t.id)
        elif isinstance(n, ast.alias):
            ids.add((n.asname or n.name).split(".")[-1])
ids = sorted(i for i in ids if IDENT.fullmatch(i))
with gzip.open(out + ".txt.gz", "wt") as f:
    f.write("\n".join(ids) + "\n")
seq = subprocess.run(
    [sys.executable, os.path.join(here, "refseq.py"), so], capture_output=True, text=True, check=True
).stdout
with gzip.open(out + ".seq.txt.gz", "wt") as f:
    f.write(seq)
print(out, len(ids))
