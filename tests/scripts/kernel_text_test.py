#!/usr/bin/env python3
"""Tests of scripts/dev/kernel_text.py without a CUDA toolkit: its ELF section reader on a small
ELF file written here, and `compare` on listings that match, match under new names in another
order, or differ."""
import os
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "dev"))
import kernel_text  # noqa: E402


def write_elf(path, sections):
    """A minimal ELF64 file: a null section, the given (name, bytes) PROGBITS sections, .shstrtab."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _ in sections) + b".shstrtab\0"
    body = b"".join(data for _, data in sections) + names
    shoff = 64 + len(body)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 1, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64,
                          len(sections) + 2, len(sections) + 1)
    heads = [bytes(64)]
    off, name_off = 64, 1
    for n, data in sections:
        heads.append(struct.pack("<IIQQQQIIQQ", name_off, 1, 0, 0, off, len(data), 0, 0, 1, 0))
        off += len(data)
        name_off += len(n) + 1
    heads.append(struct.pack("<IIQQQQIIQQ", name_off, 3, 0, 0, off, len(names), 0, 0, 1, 0))
    with open(path, "wb") as f:
        f.write(header + body + b"".join(heads))


class SectionsTest(unittest.TestCase):
    def test_reads_each_section_by_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cubin")
            write_elf(path, [(".text.k1", b"\x01\x02\x03\x04"), (".nv.info.k1", b"\xaa\xbb")])
            secs = kernel_text.sections(path)
        self.assertEqual(secs[".text.k1"], (b"\x01\x02\x03\x04", 4))
        self.assertEqual(secs[".nv.info.k1"], (b"\xaa\xbb", 2))


class CompareTest(unittest.TestCase):
    def run_compare(self, before, after):
        with tempfile.TemporaryDirectory() as tmp:
            b, a = os.path.join(tmp, "b.txt"), os.path.join(tmp, "a.txt")
            open(b, "w").write("".join(l + "\n" for l in before))
            open(a, "w").write("".join(l + "\n" for l in after))
            out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "dev",
                                                               "kernel_text.py"), "compare", b, a],
                                 capture_output=True, text=True)
        return out.returncode, out.stdout

    def test_same_code_same_names_is_identical(self):
        rc, out = self.run_compare(["text=1 size=4  k<0>", "text=2 size=4  k<1>"],
                                   ["text=1 size=4  k<0>", "text=2 size=4  k<1>"])
        self.assertEqual(rc, 0, out)
        self.assertNotIn("DIFFERENT", out)

    def test_renamed_kernels_in_another_order_pair_by_code(self):
        rc, out = self.run_compare(["text=1 size=4  k<false>", "text=2 size=4  k<true>"],
                                   ["text=2 size=4  k<kB>", "text=1 size=4  k<kA>"])
        self.assertEqual(rc, 0, out)
        self.assertIn("identical  k<kB>\n    was    k<true>", out)
        self.assertIn("identical  k<kA>\n    was    k<false>", out)

    def test_changed_code_fails_and_names_the_kernel(self):
        rc, out = self.run_compare(["text=1 size=4  k<0>", "text=2 size=4  k<1>"],
                                   ["text=1 size=4  k<0>", "text=3 size=4  k<1>"])
        self.assertEqual(rc, 1, out)
        self.assertIn("DIFFERENT  k<1>", out)

    def test_a_missing_kernel_fails(self):
        rc, out = self.run_compare(["text=1 size=4  k<0>", "text=2 size=4  k<1>"],
                                   ["text=1 size=4  k<0>"])
        self.assertEqual(rc, 1, out)


if __name__ == "__main__":
    unittest.main()
