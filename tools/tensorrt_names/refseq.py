#!/usr/bin/env python3
# ruff: noqa: SIM115  (short offline extraction scripts: open() and lambdas kept as written)
"""Referenced .rodata strings in code (instruction) order: shows which enum /
class each registered name belongs to."""

import re
import subprocess
import sys

so = sys.argv[1]
data = open(so, "rb").read()
for line in subprocess.run(["readelf", "-SW", so], capture_output=True, text=True).stdout.splitlines():
    m = re.match(r"\s*\[\s*\d+\]\s+\.rodata\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
    if m:
        ra, ro, rs = (int(x, 16) for x in m.groups())
seen = set()
p = subprocess.Popen(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", so], stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    if line.endswith(">:\n"):
        print("@@", line.strip()[:100])
        continue
    if "(%rip)" in line:
        m = re.search(r"#\s*([0-9a-f]+)", line)
        if m:
            a = int(m.group(1), 16)
            if ra <= a < ra + rs:
                off = ro + a - ra
                end = data.find(b"\0", off)
                s = data[off:end].decode("utf-8", "replace")
                if len(s) >= 2 and s.replace("\n", "").isprintable():
                    seen.add(s)
                    print(s.replace("\n", "\\n"))
p.wait()
# then every other printable .rodata string (docstrings reached only through
# relocations or pointer tables), so word searches see all text
print("@@ <other .rodata strings, not referenced by rip-relative code>")
for raw in data[ro : ro + rs].split(b"\0"):
    try:
        t = raw.decode("utf-8")
    except UnicodeDecodeError:
        continue
    if len(t) >= 3 and t not in seen and t.replace("\n", "").replace("\t", "").isprintable():
        seen.add(t)
        print(t.replace("\n", "\\n"))
