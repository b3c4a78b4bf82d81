#!/usr/bin/env python3
"""Per-kernel machine code of one .cu file, to check that a refactor leaves the SASS unchanged.

  kernel_text.py dump BUILD_DIR kernels/gemm/x.cu OUT.txt   # compile to a cubin, list kernels
  kernel_text.py compare BEFORE.txt AFTER.txt               # same code, kernel by kernel?
  kernel_text.py ptx BUILD_DIR kernels/gemm/x.cu OUT.ptx    # the PTX, to see why code differs

`dump` reruns the file's own compile command from BUILD_DIR (a CUDA build) with -cubin for one
architecture (sm_90a for *_sm90a.cu, else sm_90) and writes one line per kernel: the sha256 of
its .text bytes, of its .nv.info attributes (registers, barriers, parameter layout), of its
relocation offsets and types, its shared and constant sizes, and its demangled name. `compare`
pairs kernels in order, or by identical code when template parameters were renamed (the
listing order may change with the names), printing the old name beside the new, and exits 1 on
any kernel whose code matches none from before. Needs no cuobjdump: a cubin is an ELF file whose sections are read directly.
"""
import hashlib
import os
import shlex
import struct
import subprocess
import sys
import tempfile


def compile_cubin(build_dir, src, cubin, kind="-cubin"):
    targets = subprocess.run(["ninja", "-C", build_dir, "-t", "targets", "all"], check=True,
                             capture_output=True, text=True).stdout
    obj = next(line.split(":")[0] for line in targets.splitlines()
               if line.split(":")[0].endswith("/" + os.path.basename(src) + ".o"))
    cmd = subprocess.run(["ninja", "-C", build_dir, "-t", "commands", obj], check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()[-1]
    args = shlex.split(cmd)
    out, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
            continue
        if a in ("ccache",):
            continue
        if a in ("-MT", "-MF", "-o"):
            skip = 1
            continue
        if a in ("-MD", "-c") or a.startswith("--generate-code") or a.startswith("-gencode"):
            continue
        out.append(a)
    arch = "90a" if src.endswith("_sm90a.cu") else "90"
    out += ["-gencode=arch=compute_%s,code=sm_%s" % (arch, arch), kind, "-o",
            os.path.abspath(cubin)]
    subprocess.run(out, check=True, cwd=build_dir)


def sections(path):
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data,
                                                                  shoff + i * shentsize)
        heads.append((name, typ, off, size))
    stroff = heads[shstrndx][2]

    def name_of(n):
        return data[stroff + n:data.index(b"\0", stroff + n)].decode()

    result = {}
    for name, typ, off, size in heads:
        body = b"" if typ == 8 else data[off:off + size]  # SHT_NOBITS holds no bytes
        result[name_of(name)] = (body, size)
    return result


def sha(b):
    return hashlib.sha256(b).hexdigest()[:16]


def relocs(body):
    # Elf64_Rel(a): offset and the type half of r_info; the symbol index may renumber.
    step = 24 if len(body) % 24 == 0 and len(body) % 16 != 0 else 16
    return b"".join(body[i:i + 8] + body[i + 8:i + 12] for i in range(0, len(body), step))


def dump(build_dir, src, out_txt):
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        compile_cubin(build_dir, src, cubin)
        secs = sections(cubin)
    names = [n[len(".text."):] for n in secs if n.startswith(".text.")]
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                               text=True, check=True).stdout.splitlines()
    with open(out_txt, "w") as f:
        for n, d in zip(names, demangled):
            get = lambda prefix: secs.get(prefix + n, (b"", 0))
            rel = get(".rel.text.")[0] + get(".rela.text.")[0]
            f.write("text=%s size=%d info=%s rel=%s shared=%d const0=%d  %s\n" % (
                sha(get(".text.")[0]), get(".text.")[1], sha(get(".nv.info.")[0]),
                sha(relocs(rel)), get(".nv.shared.")[1], get(".nv.constant0.")[1], d))
    print("%s: %d kernels -> %s" % (src, len(names), out_txt))


def compare(before, after):
    b = [l.split("  ", 1) for l in open(before).read().splitlines()]
    a = [l.split("  ", 1) for l in open(after).read().splitlines()]
    same = len(a) == len(b)
    if not same:
        print("kernel count differs: %d before, %d after" % (len(b), len(a)))
    by_code = {}
    for code, name in b:
        by_code.setdefault(code, []).append(name)
    for i, (code_a, name_a) in enumerate(a):
        code_b, name_b = b[i] if i < len(b) else ("", "")
        if code_a == code_b:  # same place, same code
            print("identical  %s" % name_a)
            if name_a != name_b:
                print("    was    %s" % name_b)
        elif code_a in by_code:  # renamed kernels may be listed in another order
            print("identical  %s\n    was    %s" % (name_a, by_code[code_a][0]))
        else:
            same = False
            print("DIFFERENT  %s\n    after:  %s\n    before: %s  %s" % (name_a, code_a, code_b,
                                                                       name_b))
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "ptx":  # the PTX the cubin is made from
        compile_cubin(sys.argv[2], sys.argv[3], sys.argv[4], "-ptx")
    elif len(sys.argv) == 5 and sys.argv[1] == "dump":
        dump(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(*sys.argv[2:]))
    else:
        sys.exit(__doc__)
