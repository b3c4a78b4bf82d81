#!/usr/bin/python3
"""One line per profiled launch from `ncu --csv --metrics ...` output (transpose tuning pass).

usage: python3 scripts/bench/transpose_ncu_summary.py NCU.csv [OUT.md]
"""
import csv
import sys

SHORT = {
    "gpu__time_duration.sum": "us",
    "dram__bytes_read.sum": "DRAM rd MB",
    "dram__bytes_write.sum": "DRAM wr MB",
    "lts__t_sectors_srcunit_tex_op_read.sum": "L2 rd sect M",
    "lts__t_sectors_srcunit_tex_op_write.sum": "L2 wr sect M",
    "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum": "L2 rd miss M",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy %",
    "launch__registers_per_thread": "regs",
    "launch__occupancy_limit_registers": "blocks/SM (regs)",
    "launch__occupancy_limit_shared_mem": "blocks/SM (smem)",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM % peak",
}


def scale(metric, unit, value):
    v = float(value.replace(",", ""))
    if metric == "gpu__time_duration.sum":
        return {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
                "msecond": 1e3}.get(unit, 1e-3) * v
    if metric.startswith("dram__bytes"):
        f = {"byte": 1e-6, "Kbyte": 1e-3, "KB": 1e-3, "Mbyte": 1.0, "MB": 1.0, "Gbyte": 1e3,
             "GB": 1e3}.get(unit, 1e-6)
        return v * f
    if metric.startswith("lts__t_sectors"):
        return v / 1e6
    return v


def main() -> int:
    rows = [r for r in csv.reader(open(sys.argv[1])) if r]
    head = next(k for k, r in enumerate(rows) if "Metric Name" in r)
    cols = rows[head]
    idx = {c: cols.index(c) for c in ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Unit",
                                       "Metric Value")}
    launches = {}
    for r in rows[head + 1:]:
        if len(r) < len(cols):
            continue
        lid = r[idx["ID"]]
        name = r[idx["Kernel Name"]]
        short = name.split("(")[0].replace("void ", "")
        if "<" in name:
            short = name.split("(")[0].replace("void ", "")
            short = short.replace("matserve::kernels::", "").replace("transpose_detail::", "")
            short = short.replace("(anonymous namespace)::", "")
        d = launches.setdefault(lid, {"kernel": short[:90], "grid": r[idx["Grid Size"]]})
        m = r[idx["Metric Name"]]
        if m in SHORT:
            d[SHORT[m]] = scale(m, r[idx["Metric Unit"]], r[idx["Metric Value"]])
    keys = list(SHORT.values())
    out = ["| launch | kernel | grid | " + " | ".join(keys) + " |",
           "|---:|---|---|" + "---:|" * len(keys)]
    for lid in sorted(launches, key=int):
        d = launches[lid]
        vals = []
        for k in keys:
            v = d.get(k)
            vals.append("-" if v is None else (f"{v:.0f}" if k in ("regs",) or "blocks" in k else f"{v:.2f}"))
        out.append(f"| {lid} | `{d['kernel']}` | {d['grid']} | " + " | ".join(vals) + " |")
    text = "\n".join(out)
    print(text)
    if len(sys.argv) > 2:
        open(sys.argv[2], "w").write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
