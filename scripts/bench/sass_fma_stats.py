#!/usr/bin/env python3
"""How ptxas scheduled the FMAs of a kernel's main loop, read from a cubin (no GPU, no cuobjdump).

For each kernel whose name contains FILTER: in the 600-instruction window with the most FMAs
(the unrolled main loop), the number of FMAs (FFMA or DFMA, register operands), how many carry
the yield hint, how many set no operand-reuse flag, and how many change both multiplicands
against the FMA before them (so read all three operands from the register file). Control bits
follow the Volta-and-later encoding (stall count, yield and reuse flags in the high word).
Used to explain why the fp64 GEMM inner loop tops out below the DFMA rate (gemm-simt.md).

usage: nvcc -cubin -arch=sm_90 ... -o x.cubin; /usr/bin/python3 scripts/bench/sass_fma_stats.py x.cubin [FILTER]
"""
import struct
import sys

FMA_OPCODES = {0x223: "FFMA", 0x22B: "DFMA"}  # register-register-register forms
WINDOW = 600


def sections(data):
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]
    for name, _type, _flags, _addr, offset, size in headers:
        end = data.index(b"\0", strtab + name)
        yield data[strtab + name:end].decode(), offset, size


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    data = open(sys.argv[1], "rb").read()
    wanted = sys.argv[2] if len(sys.argv) > 2 else ""
    for name, offset, size in sections(data):
        if not name.startswith(".text.") or wanted not in name:
            continue
        words = [struct.unpack_from("<QQ", data, p) for p in range(offset, offset + size, 16)]
        is_fma = [lo & 0xFFF in FMA_OPCODES for lo, _ in words]
        start = max(range(max(1, len(words) - WINDOW + 1)),
                    key=lambda i: sum(is_fma[i:i + WINDOW]))
        fmas = yields = no_reuse = both_new = 0
        previous = None
        for lo, hi in words[start:start + WINDOW]:
            if lo & 0xFFF not in FMA_OPCODES:
                continue
            a, b = (lo >> 24) & 0xFF, (lo >> 32) & 0xFF
            fmas += 1
            yields += (hi >> 45) & 1 == 0  # the bit is clear when the hint is set
            no_reuse += (hi >> 58) & 0xF == 0
            both_new += previous is not None and a != previous[0] and b != previous[1]
            previous = (a, b)
        if fmas:
            print(f"{name[6:]}\n  FMAs {fmas}, with yield {yields}, without reuse {no_reuse}, "
                  f"both multiplicands new {both_new}")


if __name__ == "__main__":
    main()
