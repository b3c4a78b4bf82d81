#!/usr/bin/env python3
"""Plots of a matserve-bench JSON file: client p50 and p99 latency and throughput (requests/s)
against concurrency, one line per (shape, mode) (and variant/precision when the file has several),
written as OUT_DIR/<prefix>.png and .svg.
usage: /usr/bin/python3 scripts/bench/plot_load.py load.json OUT_DIR [--prefix load] [--title TEXT]
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(runs):
    """{label: [run, ...] sorted by concurrency}; variant/precision join the label when they vary."""
    many_variants = len({r["variant"] for r in runs}) > 1
    many_precisions = len({r["precision"] for r in runs}) > 1
    out = {}
    for r in runs:
        label = f'{r["shape"]} {r["mode"]}'
        if many_variants:
            label += f' {r["variant"]}'
        if many_precisions:
            label += f' {r["precision"]}'
        out.setdefault(label, []).append(r)
    return {k: sorted(v, key=lambda r: r["concurrency"]) for k, v in sorted(out.items())}


def plot(doc, out_dir, prefix, title):
    runs = [r for r in doc["runs"] if r["ok"] > 0]
    if not runs:
        raise SystemExit("plot_load: no run with successful requests")
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    panels = [("client p50 latency (us, log)", lambda r: r["client_us"]["p50"], True),
              ("client p99 latency (us, log)", lambda r: r["client_us"]["p99"], True),
              ("throughput (successful requests/s, log)", lambda r: r["ok_per_s"], True)]
    for ax, (ylabel, value, log) in zip(axes, panels):
        for label, rs in series(runs).items():
            ax.plot([r["concurrency"] for r in rs], [value(r) for r in rs], "o-", label=label)
        ax.set_xscale("log", base=2)
        levels = sorted({r["concurrency"] for r in runs})
        ax.set_xticks(levels)
        ax.set_xticklabels([str(c) for c in levels])
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("concurrency (closed-loop workers)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[2].legend(fontsize=8)
    server = doc.get("server", {})
    devices = ", ".join(server.get("devices", []))
    fig.suptitle(title or f'matserve load test: backend {server.get("backend", "?")} {devices}')
    fig.tight_layout()
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        path = os.path.join(out_dir, f"{prefix}.{ext}")
        fig.savefig(path, dpi=110)
        paths.append(path)
    plt.close(fig)
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("out_dir")
    parser.add_argument("--prefix", default="load")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    with open(args.json) as f:
        doc = json.load(f)
    for path in plot(doc, args.out_dir, args.prefix, args.title):
        print(path)


if __name__ == "__main__":
    main()
