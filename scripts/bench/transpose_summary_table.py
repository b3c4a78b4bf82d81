#!/usr/bin/python3
"""Markdown summary of transpose_bench JSON: % of the same run's copy per shape and variant.

usage: python3 scripts/bench/transpose_summary_table.py RESULTS.json [BEFORE.json]
With BEFORE (an earlier run on the same device kind), each cell reads "now (before)".
"""
import json
import sys

COLS = [("copy GB/s", None), ("tiled", "transpose_tiled"), ("vectorized", "transpose_vectorized"),
        ("inplace_square", "transpose_inplace_square"),
        ("inplace_rect (32 MiB workspace)", "transpose_inplace_rect"),
        ("+ lent scratch", "inplace_rect + lent scratch"), ("cublas_geam", "cublas_geam")]


def load(path):
    table, copy, notes = {}, {}, {}
    for r in json.load(open(path))["results"]:
        key = (r["family"], r["rows"], r["cols"], r["dtype"])
        v = r["variant"]
        if v.startswith("inplace_rect + lent scratch"):
            v = "inplace_rect + lent scratch"
        if v == "cudaMemcpy D2D":
            copy[key] = r["gbps"]
        if r["ran"]:
            table[(key, v)] = 100.0 * r["ratio_to_copy"]
            if v == "transpose_inplace_rect" and r.get("note"):
                notes[key] = r["note"].split(" (")[0]
    return table, copy, notes


def main() -> int:
    now, copy, notes = load(sys.argv[1])
    before = load(sys.argv[2])[0] if len(sys.argv) > 2 else {}
    keys = list(dict.fromkeys(k for (k, _) in now))
    print("| shape | " + " | ".join(c for c, _ in COLS) + " |")
    print("|---|" + "---:|" * len(COLS))
    for key in keys:
        family, rows, cols, dtype = key
        cells = []
        for title, v in COLS:
            if v is None:
                cells.append(f"{copy.get(key, 0):.0f}")
                continue
            x = now.get((key, v))
            if x is None:
                cells.append("n/a")
                continue
            c = f"{x:.1f}%"
            if v == "transpose_inplace_rect" and key in notes and rows != cols:
                c += f" ({notes[key]})"
            b = before.get((key, v))
            if b is not None:
                c += f" ({b:.1f}%)"
            cells.append(c)
        name = f"{family} {rows}x{cols} {dtype}"
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
