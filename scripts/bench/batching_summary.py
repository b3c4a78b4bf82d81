#!/usr/bin/env python3
"""Tables and ratios of scripts/run-batching-bench.sh: reads OUT/{batched,singles,dynamic-off,
dynamic-on}.json (matserve-bench --json), writes OUT/batching.json (all runs, one file) and
OUT/batching.md, and removes the per-run files.

usage: batching_summary.py OUT [--device NAME] [--server-args ARGS] [--backend B]
"""
import argparse
import datetime
import json
import os
import subprocess

PARTS = ("batched", "singles", "dynamic-off", "dynamic-on")


def load(out):
    runs = {}
    for name in PARTS:
        path = os.path.join(out, name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                runs[name] = json.load(f)
    return runs


def rows(doc):
    return doc.get("runs", []) if doc else []


def products_per_s(run):
    return run["ok_per_s"] * run.get("batch", 1)


def fmt(v, digits=0):
    return f"{v:,.{digits}f}"


def git_sha():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="")
    ap.add_argument("--server-args", default="")
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args()
    runs = load(args.out)
    md = [f"# Batching through the server ({args.device})", "",
          f"Date {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, commit {git_sha()}, backend "
          f"{args.backend}. Resident operands (uploaded once), results kept on the device and "
          "released in the background; matserve-bench, nearest-rank percentiles.", ""]

    batched, singles = rows(runs.get("batched")), rows(runs.get("singles"))
    if batched and singles:
        b, s = batched[0], singles[0]
        ratio = products_per_s(b) / products_per_s(s) if products_per_s(s) else float("nan")
        md += ["## One MultiplyBatched call against single calls", "",
               "| run | shape | concurrency | products per call | calls/s | products/s | "
               "client p50 us | client p99 us | errors |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, r in (("MultiplyBatched", b), ("Multiply", s)):
            md.append(f"| {name} | {r['shape']} {r['precision']} | {r['concurrency']} | "
                      f"{r.get('batch', 1)} | {fmt(r['ok_per_s'])} | {fmt(products_per_s(r))} | "
                      f"{fmt(r['client_us']['p50'])} | {fmt(r['client_us']['p99'])} | "
                      f"{r['errors']} |")
        md += ["", f"Products per second, batched / single calls: **{ratio:.1f}x**.", ""]

    off, on = rows(runs.get("dynamic-off")), rows(runs.get("dynamic-on"))
    if off and on:
        md += ["## Dynamic batching of concurrent Multiply requests", "",
               f"Server with batching: `{args.server_args}`; without: the defaults (off).", "",
               "| concurrency | batching | req/s | client p50 us | client p99 us | "
               "mean merged requests | errors |",
               "|---:|---|---:|---:|---:|---:|---:|"]
        by_conc = {}
        for label, table in (("off", off), ("on", on)):
            for r in table:
                by_conc.setdefault(r["concurrency"], {})[label] = r
                merged = r.get("merged_requests_mean")
                md.append(f"| {r['concurrency']} | {label} | {fmt(r['ok_per_s'])} | "
                          f"{fmt(r['client_us']['p50'])} | {fmt(r['client_us']['p99'])} | "
                          f"{'' if merged is None else f'{merged:.1f}'} | {r['errors']} |")
        md += ["", "| concurrency | req/s on / off | p50 on / off | p99 on / off |",
               "|---:|---:|---:|---:|"]
        for conc in sorted(by_conc):
            pair = by_conc[conc]
            if "on" not in pair or "off" not in pair:
                continue
            a, b = pair["on"], pair["off"]
            md.append(f"| {conc} | {a['ok_per_s'] / b['ok_per_s']:.2f} | "
                      f"{a['client_us']['p50'] / b['client_us']['p50']:.2f} | "
                      f"{a['client_us']['p99'] / b['client_us']['p99']:.2f} |")
        md.append("")

    with open(os.path.join(args.out, "batching.json"), "w") as f:
        json.dump({"device": args.device, "server_args": args.server_args, "runs": runs}, f,
                  indent=1)
    with open(os.path.join(args.out, "batching.md"), "w") as f:
        f.write("\n".join(md))
    for name in PARTS:
        path = os.path.join(args.out, name + ".json")
        if os.path.exists(path):
            os.remove(path)


if __name__ == "__main__":
    main()
