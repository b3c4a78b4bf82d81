#!/usr/bin/python3
"""Plots transpose_bench's JSON: share of the device-to-device copy bandwidth per shape and variant.

usage: /usr/bin/python3 scripts/bench/plot_transpose.py RESULTS.json [OUT.png]
(default OUT: docs/benchmarks/img/transpose.png)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    src = sys.argv[1]
    dst = sys.argv[2] if len(sys.argv) > 2 else "docs/benchmarks/img/transpose.png"
    data = json.load(open(src))
    # Registry variants only; the tuning sweep's rows are in the table.
    rows = [dict(r) for r in data["results"]
            if r["variant"] != "cudaMemcpy D2D" and not r["variant"].startswith("sweep")]
    for r in rows:  # the lent-scratch row names its size and stage count per shape: one series
        if r["variant"].startswith("inplace_rect + lent scratch"):
            r["variant"] = "inplace_rect + lent scratch"
    cases = []
    for r in rows:
        key = f'{r["family"]}\n{r["rows"]}x{r["cols"]}\n{r["dtype"]}'
        if key not in cases:
            cases.append(key)
    variants = []
    for r in rows:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    width = 0.8 / len(variants)
    fig, ax = plt.subplots(figsize=(max(10, 0.9 * len(cases)), 6))
    for k, v in enumerate(variants):
        xs, ys = [], []
        for r in rows:
            if r["variant"] != v or not r["ran"]:
                continue
            key = f'{r["family"]}\n{r["rows"]}x{r["cols"]}\n{r["dtype"]}'
            xs.append(cases.index(key) + (k - (len(variants) - 1) / 2) * width)
            ys.append(100.0 * r["ratio_to_copy"])
        ax.bar(xs, ys, width, label=v)
    ax.axhline(100, color="black", linewidth=0.8)
    ax.axhline(95, color="gray", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, fontsize=7)
    ax.set_ylabel("% of cudaMemcpy D2D bandwidth (same run)")
    ax.set_title(f'Transpose on {data["device"]}: (bytes read + written) / time vs copy')
    ax.legend(fontsize=8, ncol=min(len(variants), 4), loc="upper center",
              bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
