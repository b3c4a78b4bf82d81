#!/usr/bin/python3
"""Registers, stack frame and spills of every transpose kernel instantiation, from ptxas.

usage: scripts/bench/transpose_resource_usage.py [BUILD_DIR] [--md FILE]
Recompiles each kernels/transpose/*.cu with its own command from BUILD_DIR/compile_commands.json
plus -Xptxas=-v (objects go to a temporary folder; the build is untouched), prints one line per
kernel and exits 1 if any kernel spills. No GPU needed (the same numbers as
`cuobjdump --dump-resource-usage` on the objects).
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor


def parse(log: str):
    """Kernels of one ptxas -v log: (name, registers, stack, spill stores, spill loads)."""
    log = subprocess.run(["c++filt"], input=log, capture_output=True, text=True).stdout
    props, cur, entries = {}, None, []
    for line in log.splitlines():
        m = re.search(r"Function properties for (.*)$", line)
        if m:
            cur = m.group(1).strip()
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            props[cur] = tuple(int(x) for x in m.groups())
            continue
        m = re.search(r"Compiling entry function '(.*)' for", line)
        if m:
            entries.append([m.group(1), None])
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and entries and entries[-1][1] is None:
            entries[-1][1] = int(m.group(1))
    out = []
    for name, regs in entries:
        stack, st, ld = props.get(name, (0, 0, 0))
        short = re.sub(r"matserve::kernels::|transpose_detail::|\(anonymous namespace\)::", "", name)
        short = re.sub(r"::Bits", "", short)
        out.append((short, regs, stack, st, ld))
    return out


def main() -> int:
    args = sys.argv[1:]
    md = None
    if "--md" in args:
        k = args.index("--md")
        md = args[k + 1]
        del args[k:k + 2]
    build = args[0] if args else "build"
    cmds = json.load(open(os.path.join(build, "compile_commands.json")))
    units = sorted((e for e in cmds if "/kernels/transpose/" in e["file"] and e["file"].endswith(".cu")),
                   key=lambda e: e["file"])
    tmp = tempfile.mkdtemp(prefix="tr-res-")

    def compile_one(e):
        argv = shlex.split(e["command"])
        o = argv.index("-o")
        argv[o + 1] = os.path.join(tmp, os.path.basename(e["file"]) + ".o")
        argv.insert(1, "-Xptxas=-v")
        r = subprocess.run(argv, cwd=e["directory"], capture_output=True, text=True)
        return e["file"], r.returncode, r.stdout + r.stderr

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compile_one, units))
    lines = ["| file | kernel | registers | stack frame B | spill stores B | spill loads B |",
             "|---|---|---:|---:|---:|---:|"]
    total = spilled = 0
    for path, rc, log in results:
        if rc != 0:
            print(log)
            print(f"compile failed: {path}")
            return 2
        for name, regs, stack, st, ld in parse(log):
            total += 1
            spilled += (st + ld) > 0
            lines.append(f"| {os.path.basename(path)} | `{name}` | {regs} | {stack} | {st} | {ld} |")
    lines.append("")
    lines.append(f"{total} kernel instantiations, {spilled} with spills")
    text = "\n".join(lines)
    print(text)
    if md:
        open(md, "w").write(text + "\n")
    return 1 if spilled else 0


if __name__ == "__main__":
    sys.exit(main())
