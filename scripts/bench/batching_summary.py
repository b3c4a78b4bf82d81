#!/usr/bin/env python3
"""Tables and ratios of scripts/bench/run-batching-bench.sh: reads OUT/{batched,singles,dynamic-off,
dynamic-on,ping}.json and OUT/{ping,dynamic-off,dynamic-on}-procs-pK.json (matserve-bench
--json; one file per client process), writes OUT/batching.json (all runs, one file) and
OUT/batching.md, and removes the per-run files.

usage: batching_summary.py OUT [--device NAME] [--server-args ARGS] [--backend B]
"""
import argparse
import datetime
import glob
import json
import os
import subprocess

PARTS = ("batched", "singles", "dynamic-off", "dynamic-on", "ping")
PROC_PARTS = ("ping-procs", "dynamic-off-procs", "dynamic-on-procs")


def per_process_files(out, name):
    return sorted(glob.glob(os.path.join(out, f"{name}-p[0-9]*.json")))


def load(out):
    runs = {}
    for name in PARTS:
        path = os.path.join(out, name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                runs[name] = json.load(f)
    for name in PROC_PARTS:  # {"processes": [one document per client process]}
        docs = []
        for path in per_process_files(out, name):
            with open(path) as f:
                docs.append(json.load(f))
        if docs:
            runs[name] = {"processes": docs}
    return runs


def combined(doc):
    """One row for runs made by several client processes at once: summed rates, the worst
    process's p50/p99 (nearest-rank percentiles cannot be merged exactly), the mean merge."""
    rs = [r for d in (doc or {}).get("processes", []) for r in d.get("runs", [])]
    if not rs:
        return None
    ok = sum(r["ok"] for r in rs)
    merged = [r.get("merged_requests_mean") for r in rs]
    return {
        "processes": len(rs),
        "concurrency": sum(r["concurrency"] for r in rs),
        "ok_per_s": sum(r["ok_per_s"] for r in rs),
        "p50": max(r["client_us"]["p50"] for r in rs),
        "p99": max(r["client_us"]["p99"] for r in rs),
        "busy": sum(r.get("device_busy_lower_bound") or 0 for r in rs),
        "merged": (None if None in merged else
                   sum(m * r["ok"] for m, r in zip(merged, rs)) / ok if ok else None),
        "errors": sum(r["errors"] for r in rs),
    }


def single(r):
    return {"processes": 1, "concurrency": r["concurrency"], "ok_per_s": r["ok_per_s"],
            "p50": r["client_us"]["p50"], "p99": r["client_us"]["p99"],
            "busy": r.get("device_busy_lower_bound") or 0,
            "merged": r.get("merged_requests_mean"), "errors": r["errors"]}


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

    bound = []  # (what, batching, row)
    for r in rows(runs.get("ping")):
        bound.append(("ping (no matrix work)", "-", single(r)))
    if combined(runs.get("ping-procs")):
        bound.append(("ping (no matrix work)", "-", combined(runs["ping-procs"])))
    for label in ("off", "on"):
        for r in rows(runs.get(f"dynamic-{label}")):
            if r["concurrency"] == 64:
                bound.append((f"resident {r['shape']} {r['precision']}", label, single(r)))
        if combined(runs.get(f"dynamic-{label}-procs")):
            first = runs[f"dynamic-{label}-procs"]["processes"][0]["runs"][0]
            bound.append((f"resident {first['shape']} {first['precision']}", label,
                          combined(runs[f"dynamic-{label}-procs"])))
    if bound:
        md += ["## What bounds the rate", "",
               "The same server and node; several client processes share the 64 requests in "
               "flight. Kernel / wall = the sum of the replies' kernel times (a merged launch "
               "counted once) over the wall time: at most how busy the GPU was (launches on "
               "different streams can overlap); p50 and p99 of several processes are the worst "
               "process's.", "",
               "| requests | batching | client processes | concurrency | req/s | "
               "client p50 us | client p99 us | kernel / wall | mean merged | errors |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for what, label, c in bound:
            merged = "" if c["merged"] is None or what.startswith("ping") else f"{c['merged']:.2f}"
            busy = "" if what.startswith("ping") else f"{c['busy']:.0%}"
            md.append(f"| {what} | {label} | {c['processes']} | {c['concurrency']} | "
                      f"{fmt(c['ok_per_s'])} | {fmt(c['p50'])} | {fmt(c['p99'])} | {busy} | "
                      f"{merged} | {c['errors']} |")
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
    for name in PROC_PARTS:
        for path in per_process_files(args.out, name):
            os.remove(path)


if __name__ == "__main__":
    main()
