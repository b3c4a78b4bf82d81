#!/usr/bin/env python3
"""Autotune rows for `auto` from a service_vs_torch.py run: the variants as the service runs them.

Reads the JSON of scripts/bench/service_vs_torch.py (resident Multiply through the real server,
`timing.kernel_us` medians) and writes kernels/autotune TSV rows, "device precision shape_class
variant gflops", one per measured (shape, precision, variant) that ran; the rows of one class are
averaged by the server (kernels/autotune.h). Rows for `auto` are left out (it is a choice, not a
variant: its case is counted under the variant it ran). Only the precisions given (default fp16,
bf16, tf32: those gemm_bench's kernel-level rows do not cover) are written, so one table never
averages the two methods for one precision. MultiplyBatched rows (--batched with
--batched-variants) go to the batch's class, "batch_" and the product's class, at the GFLOP/s of
the whole batch.

usage: autotune_from_service.py SERVICE_VS_TORCH.json [--precisions fp16,bf16,tf32] > FILE.tsv
"""
import argparse
import json
import sys


def shape_class(m, n, k):
    """kernels/autotune.cc's gemm_shape_class: t <= 32, s <= 256, m <= 1536, l <= 6144, h."""
    def bucket(x):
        for limit, name in ((32, "t"), (256, "s"), (1536, "m"), (6144, "l")):
            if x <= limit:
                return name
        return "h"
    return f"m{bucket(m)}_n{bucket(n)}_k{bucket(k)}"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json")
    p.add_argument("--precisions", default="fp16,bf16,tf32")
    a = p.parse_args(argv)
    keep = {x.strip() for x in a.precisions.split(",") if x.strip()}
    doc = json.load(open(a.json))
    devices = doc["server"].get("devices") or []
    device = devices[0] if devices else doc["baseline"]["device"]
    if isinstance(device, dict):
        device = device.get("name", "")
    print(f"# device\tprecision\tshape_class\tvariant\tgflops")
    print(f"# through the service: resident Multiply, median timing.kernel_us "
          f"({doc['date']}, {doc['command']})")
    rows = set()
    for r in doc["gemm"]:
        if not r.get("ran") or r["precision"] not in keep or r["variant_requested"] == "auto":
            continue
        if r.get("check", "ok") != "ok" or not r.get("service_kernel_us"):
            continue
        gflops = 2.0 * r["m"] * r["n"] * r["k"] / r["service_kernel_us"] / 1e3
        rows.add((device, r["precision"], shape_class(r["m"], r["n"], r["k"]), r["variant"],
                  round(gflops, 1), f"{r['m']}x{r['k']}x{r['n']}"))
    for r in doc.get("batched", []):
        if not r.get("ran") or r["precision"] not in keep or r["variant_requested"] == "auto":
            continue
        if r.get("check", "ok") != "ok" or not r.get("service_kernel_us"):
            continue
        gflops = 2.0 * r["batch"] * r["m"] * r["n"] * r["k"] / r["service_kernel_us"] / 1e3
        rows.add((device, r["precision"], "batch_" + shape_class(r["m"], r["n"], r["k"]),
                  r["variant"], round(gflops, 1), f"{r['batch']}x{r['m']}x{r['k']}x{r['n']}"))
    for device, prec, cls, variant, gflops, shape in sorted(rows):
        print(f"{device}\t{prec}\t{cls}\t{variant}\t{gflops}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
