#!/usr/bin/env python3
# ruff: noqa: SIM115, E731  (short offline extraction scripts: open() and lambdas kept as written)
"""check_names.py NAME... : table of Y (exact string literal / defined name),
doc (only appears as a word inside longer strings, e.g. docstrings), - (absent)."""

import glob
import gzip
import os
import re
import sys

d = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
key = lambda v: [int(x) for x in re.findall(r"\d+", v)]
vers = sorted((os.path.basename(p)[:-7] for p in glob.glob(d + "/*.txt.gz") if ".seq." not in p), key=key)
ids = {v: set(gzip.open(f"{d}/{v}.txt.gz", "rt").read().split()) for v in vers}
seq = {v: gzip.open(f"{d}/{v}.seq.txt.gz", "rt").read() for v in vers}
w = max(map(len, sys.argv[1:] + ["name"]))
print("| " + "name".ljust(w) + " | " + " | ".join(vers) + " |")
print("|" + "-" * (w + 2) + "|" + "|".join("-" * (len(v) + 2) for v in vers) + "|")
for n in sys.argv[1:]:
    cells = []
    for v in vers:
        if n in ids[v]:
            c = "Y"
        elif re.search(r"(?<![A-Za-z0-9_])" + re.escape(n) + r"(?![A-Za-z0-9_])", seq[v]):
            c = "doc"
        else:
            c = "-"
        cells.append(c.ljust(len(v)))
    print("| " + n.ljust(w) + " | " + " | ".join(cells) + " |")
