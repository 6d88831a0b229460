#!/usr/bin/env python3
# ruff: noqa: SIM115  (short offline extraction scripts: open() and lambdas kept as written)
"""Print every NUL-terminated string in .rodata that is referenced by code
(rip-relative lea/mov targets found by objdump) or by relocations in data
sections (R_X86_64_RELATIVE addends).  This recovers string literals that
the linker tail-merged into longer strings (e.g. "INT8" stored inside "UINT8"),
which plain `strings` misses."""

import re
import subprocess
import sys

so = sys.argv[1]
data = open(so, "rb").read()
secs = {}
for line in subprocess.run(["readelf", "-SW", so], capture_output=True, text=True).stdout.splitlines():
    m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
    if m:
        secs[m.group(1)] = tuple(int(x, 16) for x in m.group(2, 3, 4))
ra, ro, rs = secs[".rodata"]


def get(addr):
    if not (ra <= addr < ra + rs):
        return None
    off = ro + (addr - ra)
    end = data.find(b"\0", off, ro + rs)
    if end < 0:
        return None
    s = data[off:end]
    try:
        t = s.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return t if (t and t.isprintable()) or ("\n" in t and t.replace("\n", "").replace("\t", "").isprintable()) else None


addrs = set()
p = subprocess.Popen(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", so], stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    if "(%rip)" in line:
        m = re.search(r"#\s*([0-9a-f]+)", line)
        if m:
            addrs.add(int(m.group(1), 16))
p.wait()
# data relocations (pointer tables of strings, e.g. PyMethodDef / static arrays)
for line in subprocess.run(["readelf", "-rW", so], capture_output=True, text=True).stdout.splitlines():
    m = re.match(r"\s*[0-9a-f]+\s+[0-9a-f]+\s+R_X86_64_RELATIVE\s+([0-9a-f]+)", line)
    if m:
        addrs.add(int(m.group(1), 16))
out = set()
for a in addrs:
    s = get(a)
    if s is not None:
        out.add(s)
for s in sorted(out):
    print(s.replace("\n", "\\n"))
