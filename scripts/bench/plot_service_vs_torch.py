#!/usr/bin/python3
"""Plots scripts/bench/service_vs_torch.py's JSON: the ratio baseline time / service kernel time per
case (> 1: the service is faster), one panel per precision with a bar per requested variant, and a
panel of transposes (share of the copy of the same bytes).

usage: /usr/bin/python3 scripts/bench/plot_service_vs_torch.py RESULTS.json [OUT_PREFIX]
writes OUT_PREFIX.png and OUT_PREFIX.svg (default OUT_PREFIX: RESULTS without .json)
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp64")


def bars(ax, rows, key_of, series_of, value_of, colors):
    """One group of bars per case, one bar per series that has a value somewhere; a series keeps
    its colour across panels (colors: series -> colour, filled as new series appear)."""
    cases, series = [], []
    for r in rows:
        if key_of(r) not in cases:
            cases.append(key_of(r))
        if value_of(r) and series_of(r) not in series:
            series.append(series_of(r))
    width = 0.8 / max(1, len(series))
    for s_i, s in enumerate(series):
        xs, ys = [], []
        for r in rows:
            if series_of(r) == s and value_of(r):
                xs.append(cases.index(key_of(r)) + (s_i - (len(series) - 1) / 2) * width)
                ys.append(value_of(r))
        colors.setdefault(s, f"C{len(colors) % 10}")
        ax.bar(xs, ys, width, label=s, color=colors[s])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, fontsize=7, rotation=30, ha="right")
    ax.set_xlim(-0.6, len(cases) - 0.4)


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    src = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else src.removesuffix(".json")
    doc = json.load(open(src))
    base = doc["baseline"]
    bname = "torch" if base["kind"] == "torch-cuda" else "NumPy (CPU)"
    panels = [p for p in PRECISIONS if any(r["precision"] == p for r in doc["gemm"])]
    has_t = any(r.get("ran") for r in doc["transpose"])
    n = len(panels) + (1 if has_t else 0)
    if n == 0:
        print("plot_service_vs_torch: nothing to plot", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(n, 1, figsize=(12, 2.9 * n + 0.8), squeeze=False)
    summ = doc.get("summary", {})
    colors = {}
    for ax, p in zip(axes[:, 0], panels):
        rows = [r for r in doc["gemm"] if r["precision"] == p]
        bars(ax, rows, lambda r: f'{r["m"]}x{r["k"]}x{r["n"]}', lambda r: r["variant_requested"],
             lambda r: r.get("ratio"), colors)
        gm = ", ".join(f'{v} {s["geomean_ratio"]:.2f}' for v, s in summ.get(p, {}).items()
                       if s["geomean_ratio"])
        ax.set_title(f"{p}: {bname} time / service kernel time  (geomean: {gm or '-'})",
                     fontsize=9)
        ax.set_ylabel("ratio (>1: service faster)", fontsize=8)
        top = max([r.get("ratio") or 0 for r in rows] + [1.2])
        ax.set_ylim(0, min(top * 1.1, 10) if math.isfinite(top) else 2)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    if has_t:
        ax = axes[-1, 0]
        rows = [r for r in doc["transpose"] if r.get("ran")]
        bars(ax, rows, lambda r: f'{r["rows"]}x{r["cols"]}', lambda r: f'{r["mode"]} '
             f'{r["variant_requested"]}', lambda r: r.get("ratio"), colors)
        ax.set_title(f"transpose fp32: {bname} copy of the same bytes / service kernel time",
                     fontsize=9)
        ax.set_ylabel("share of copy", fontsize=8)
        ax.set_ylim(0, 1.2)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    dev = ", ".join(d["name"] for d in doc.get("server", {}).get("devices", [])) or "?"
    fig.suptitle(f"matserve service vs {bname} ({dev}, {doc['date']})", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    for ext in ("png", "svg"):
        fig.savefig(f"{prefix}.{ext}", dpi=120)
        print(f"wrote {prefix}.{ext}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
