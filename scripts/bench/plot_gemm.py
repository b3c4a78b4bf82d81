#!/usr/bin/env python3
"""Plots of a gemm_bench JSON file, in the seeds' style (bars for time, a line for GFLOP/s):
per precision, the ladder at one square size, GFLOP/s against square size, the rectangular
families as shares of cuBLAS, and a roofline against the run's measured ceilings.
usage: /usr/bin/python3 scripts/bench/plot_gemm.py gemm.json OUT_DIR [--prefix gemm-simt]
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def ok_rows(rows, **match):
    return [r for r in rows if r["status"] == "ok" and all(r[k] == v for k, v in match.items())]


def ladder(rows, prec, size, path):
    rs = [r for r in ok_rows(rows, precision=prec, family="square", m=size)
          if r["variant"] != "auto"]
    if not rs:
        return
    names = [r["variant"] for r in rs]
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(rs)), 5))
    ax.bar(range(len(rs)), [r["median_ms"] for r in rs], color="tab:blue", alpha=0.75)
    ax.set_yscale("log")
    ax.set_ylabel("time (ms, log)", color="tab:blue")
    ax.set_xticks(range(len(rs)))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    ax2 = ax.twinx()
    ax2.plot(range(len(rs)), [r["gflops"] for r in rs], "o-", color="tab:red")
    ax2.set_ylabel("GFLOP/s", color="tab:red")
    ax2.set_ylim(bottom=0)
    ax.set_title(f"{prec} GEMM ladder, {size}x{size}x{size}: time (bars), GFLOP/s (line)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sizes(rows, prec, path):
    rs = [r for r in ok_rows(rows, precision=prec, family="square") if r["variant"] != "auto"]
    if not rs:
        return
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for v in dict.fromkeys(r["variant"] for r in rs):
        pts = sorted((r["m"], r["gflops"]) for r in rs if r["variant"] == v)
        style = "k--" if v == "cublas" else "o-"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=v, markersize=3)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("n (square n x n x n)")
    ax.set_ylabel("GFLOP/s (log)")
    ax.set_title(f"{prec} GEMM: GFLOP/s against size")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rect(rows, prec, path):
    rs = [r for r in ok_rows(rows, precision=prec) if r["family"] != "square"]
    if not rs:
        return
    shapes = list(dict.fromkeys(r["shape"] for r in rs))
    best, auto = [], []
    for s in shapes:
        simt = [r for r in rs if r["shape"] == s and r["variant"] not in ("cublas", "auto")]
        best.append(max((r["ratio_to_cublas"] for r in simt), default=0) * 100)
        a = [r for r in rs if r["shape"] == s and r["variant"] == "auto"]
        auto.append(a[0]["ratio_to_cublas"] * 100 if a else 0)
    fig, ax = plt.subplots(figsize=(max(8, 0.7 * len(shapes)), 5))
    x = range(len(shapes))
    ax.bar([i - 0.2 for i in x], best, 0.4, label="best custom kernel", color="tab:blue")
    ax.bar([i + 0.2 for i in x], auto, 0.4, label="auto (re-timed)", color="tab:green")
    ax.axhline(100, color="k", linestyle="--", linewidth=1, label="cuBLAS")
    ax.set_xticks(list(x))
    ax.set_xticklabels(shapes, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("% of cuBLAS (same run)")
    ax.set_title(f"{prec} GEMM, rectangular families (m x n x k)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def roofline(data, prec, size, path):
    rows = data["results"]
    rs = [r for r in ok_rows(rows, precision=prec, family="square", m=size)
          if r["variant"] != "auto"]
    if not rs:
        return
    es = 8 if prec == "fp64" else 4
    bw = data["copy_gbps"]  # GB/s, measured in the same run
    peak = max(r["gflops"] for r in ok_rows(rows, precision=prec, variant="cublas"))
    fig, ax = plt.subplots(figsize=(9, 6))
    xs = [2 ** (i / 4) for i in range(-8, 48)]
    ax.plot(xs, [min(bw * x, peak) for x in xs], "k-", label=f"measured: copy {bw:.0f} GB/s, "
            f"cuBLAS best {peak / 1000:.1f} TFLOP/s")
    # Each variant at its compulsory intensity (A, B read once, C written once) and its rate.
    ai = 2.0 * size ** 3 / (es * 3.0 * size * size)
    for i, r in enumerate(rs):
        ax.plot([ai], [r["gflops"]], "o", markersize=6)
        ax.annotate(r["variant"], (ai, r["gflops"]), textcoords="offset points",
                    xytext=(6 + 40 * (i % 3), 0), fontsize=7)
    # Every shape of the run: cuBLAS and the top custom kernel at each shape's own intensity.
    for v, mark, color in (("cublas", "x", "k"), ("simt_pipelined", "+", "tab:red")):
        pts = [r for r in ok_rows(rows, precision=prec, variant=v)]
        ax.plot([2.0 * r["m"] * r["n"] * r["k"] / (es * (r["m"] * r["k"] + r["k"] * r["n"] +
                                                        r["m"] * r["n"])) for r in pts],
                [r["gflops"] for r in pts], mark, color=color, markersize=7,
                label=f"{v}, every shape of the run")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per compulsory byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"{prec} roofline: the ladder at {size}^3 (circles, one intensity), cuBLAS and "
                 "simt_pipelined at every shape", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("out")
    ap.add_argument("--prefix", default="gemm-simt")
    ap.add_argument("--size", type=int, default=4096)
    a = ap.parse_args()
    with open(a.json) as f:
        data = json.load(f)
    os.makedirs(a.out, exist_ok=True)
    for prec in dict.fromkeys(r["precision"] for r in data["results"]):
        base = os.path.join(a.out, f"{a.prefix}")
        ladder(data["results"], prec, a.size, f"{base}-ladder-{prec}.png")
        sizes(data["results"], prec, f"{base}-sizes-{prec}.png")
        rect(data["results"], prec, f"{base}-rect-{prec}.png")
        roofline(data, prec, a.size, f"{base}-roofline-{prec}.png")


if __name__ == "__main__":
    main()
