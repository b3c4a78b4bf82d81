#!/usr/bin/env python3
"""Merges autotune rows from a newer gemm_bench run (--autotune-out) into an autotune table.

A table may hold several rows per (device, precision, shape_class, variant), one per measured shape
(`auto` averages them). Every (device, precision, shape_class) the newer file covers is taken from
it whole: the table's rows of that class go, including variants the newer run did not time, so
that `auto` compares only variants measured in one run (with that run's cuBLAS). Classes the newer
run did not measure keep the table's rows.

usage: scripts/dev/merge_autotune.py TABLE.tsv NEWER.tsv [-o OUT.tsv]   (default: rewrite TABLE)
"""
import argparse
import sys


def read(path):
    header, rows = [], {}  # key -> [GFLOP/s per measured shape]
    for line in open(path):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            header.append(line)
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            sys.exit(f"merge-autotune: {path}: expected 5 tab-separated fields: {line!r}")
        rows.setdefault(tuple(fields[:4]), []).append(fields[4])
    return header, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table")
    ap.add_argument("newer")
    ap.add_argument("-o", "--out")
    args = ap.parse_args()
    header, rows = read(args.table)
    _, newer = read(args.newer)
    classes = {k[:3] for k in newer}
    dropped = sum(len(v) for k, v in rows.items() if k[:3] in classes)
    rows = {k: v for k, v in rows.items() if k[:3] not in classes}
    rows.update(newer)
    out = open(args.out or args.table, "w")
    for line in header or ["# device\tprecision\tshape_class\tvariant\tgflops"]:
        out.write(line + "\n")
    order = {k: i for i, k in enumerate(rows)}
    for key in sorted(rows, key=lambda k: (k[0], k[1], k[2], order[k])):
        for gflops in rows[key]:
            out.write("\t".join(key) + "\t" + gflops + "\n")
    print(f"merge-autotune: {len(classes)} shape classes from {args.newer} replace {dropped} rows; "
          f"{sum(map(len, rows.values()))} rows in all", file=sys.stderr)


if __name__ == "__main__":
    main()
