#!/usr/bin/env python3
"""Writes docs/flags.md, the server's flags reference, from `matserve --help`; with --check, fails
when docs/flags.md differs from what it would write now (ctest docs_flags).

  scripts/dev/gen_flags_doc.py --server build/server/matserve           # rewrite docs/flags.md
  scripts/dev/gen_flags_doc.py --server build/server/matserve --check   # compare only

`matserve --help` lists the flags of server/config.cc, which defines every flag of the server in
both builds (CUDA and CPU-only) alike, so either build's binary writes the same page. The page's
topics are chosen here (TOPICS); a flag no topic names lands under "Other flags".
"""
import argparse
import difflib
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "flags.md"
REGENERATE = "scripts/dev/gen_flags_doc.py --server <build>/server/matserve"

TOPICS = [
    ("Network and transport", "where the server listens and how gRPC is tuned",
     ["listen", "metrics_listen", "replica_id", "max_message_bytes", "max_concurrent_streams",
      "grpc_channel_args", "grpc_min_pollers", "grpc_max_pollers"]),
    ("Security", "TLS and bearer tokens (docs/security.md)",
     ["tls_cert", "tls_key", "tls_client_ca", "auth_tokens_file"]),
    ("Backend and devices", "what computes, on which devices, with how much concurrency",
     ["backend", "devices", "streams_per_device", "cpu_concurrency", "copy_threads",
      "launch_graphs_per_stream", "gate_launches", "pinned_message_bytes", "autotune_table",
      "split_gemm", "split_gemm_min_flops", "split_gemm_tile"]),
    ("Limits and admission", "what a request may ask for; over a limit it is refused "
     "(docs/api.md, Errors)",
     ["max_dimension", "max_matrix_bytes", "memory_budget_bytes", "max_queue_per_device",
      "max_resident_bytes_per_owner", "resident_ttl_seconds", "max_verify_flops",
      "max_verify_bytes", "stream_idle_timeout_seconds", "max_batch_products", "shared_memory",
      "shared_memory_allow_other_uids",
      "max_shm_regions_per_owner", "max_shared_memory_bytes_per_owner",
      "max_shared_memory_bytes"]),
    ("Dynamic batching", "concurrent Multiply requests merged into one launch (docs/api.md)",
     ["max_batch_size", "max_batch_delay_us"]),
    ("Process", "latency mode, lock-order checks, shutdown",
     ["keep_cpus_awake_ms", "keep_cpus_awake_max_calls", "check_lock_order",
      "shutdown_grace_seconds"]),
]


def parse_help(text):
    """[(name, help, default)] of the flags in absl's --help output, in its order."""
    entries, current = [], None
    for line in text.splitlines():
        if re.match(r"^    --\w", line):
            current = [line.strip()]
            entries.append(current)
        elif current is not None and re.match(r"^      \S", line):
            current.append(line.strip())
        else:
            current = None
    flags = []
    for lines in entries:
        joined = " ".join(lines)
        m = re.fullmatch(r"--(\w+) \((.*)\); default: (.*);", joined)
        if not m:
            raise ValueError(f"cannot read this --help entry: {joined!r}")
        flags.append(m.groups())
    return flags


def markdown_text(s):
    return re.sub(r"([|*<>])", lambda m: {"<": "&lt;", ">": "&gt;"}.get(m.group(1),
                                                                          "\\" + m.group(1)), s)


def default_cell(name, value):
    if value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
        return "(empty)" if not value else f"`{value}`"
    if "bytes" in name and re.fullmatch(r"\d+", value) and int(value) >= 1 << 20:
        n = int(value)
        for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20)):
            if n % (1 << shift) == 0 and n >= 1 << shift:
                return f"`{value}` ({n >> shift} {unit})"
    return f"`{value}`"


def render(flags):
    by_name = {name: (text, default) for name, text, default in flags}
    named = {n for _, _, names in TOPICS for n in names}
    topics = [(title, what, [n for n in names if n in by_name]) for title, what, names in TOPICS]
    other = [name for name, _, _ in flags if name not in named]
    if other:
        topics.append(("Other flags", "flags no topic of scripts/dev/gen_flags_doc.py names yet", other))
    out = [
        "<!-- The server's flags, generated from `matserve --help` by scripts/dev/gen_flags_doc.py:",
        f"     do not edit; run {REGENERATE} (ctest docs_flags checks it). -->",
        "# Server flags",
        "",
        "Every flag of `matserve`, as `matserve --help` prints it (`--helpfull` adds the flags of",
        "the libraries, such as `--flagfile`). Flags are given as `--name=value` (a boolean also as",
        "`--name` or `--noname`). Both builds, CUDA and CPU-only, take the same flags; those marked",
        "\"CUDA:\" matter only on the CUDA backend. A bad value stops the server before it starts,",
        "with a message naming the flag. docs/deploy.md says which matter in production.",
        "",
    ]
    for title, what, names in topics:
        if not names:
            continue
        out += [f"## {title}", "", what[0].upper() + what[1:] + ".", "",
                "| flag | default | meaning |", "|------|---------|---------|"]
        for name in names:
            text, default = by_name[name]
            out.append(f"| `--{name}` | {default_cell(name, default)} | {markdown_text(text)} |")
        out.append("")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the matserve binary")
    parser.add_argument("--check", action="store_true",
                        help="compare with docs/flags.md instead of writing it")
    parser.add_argument("--doc", type=pathlib.Path, default=DOC)
    args = parser.parse_args()
    run = subprocess.run([args.server, "--help"], capture_output=True, text=True, timeout=60)
    flags = parse_help(run.stdout)  # absl's --help exits 1 after printing the usage
    if not flags:
        sys.exit(f"{args.server} --help listed no flags (exit {run.returncode}):\n"
                 f"{run.stdout}{run.stderr}")
    text = render(flags)
    if not args.check:
        args.doc.write_text(text)
        print(f"wrote {args.doc} ({len(flags)} flags)")
        return 0
    current = args.doc.read_text() if args.doc.exists() else ""
    if current == text:
        print(f"{args.doc} matches `matserve --help` ({len(flags)} flags)")
        return 0
    sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                               str(args.doc), "generated from --help"))
    print(f"\n{args.doc} is not what `matserve --help` gives now; regenerate it from the repository "
          f"root with:\n  {REGENERATE}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
