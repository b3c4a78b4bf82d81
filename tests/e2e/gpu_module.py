"""Runs one GPU-only end-to-end module for ctest: exit 0 when its tests ran and passed, 1 on a
failure, and 77 (the SKIP_RETURN_CODE these modules carry: ctest lists them as skipped, not
passed) when no test ran, e.g. without a visible GPU; the skip reasons are printed.

Usage: python3 gpu_module.py <module>
"""
import sys
import unittest

SKIPPED = 77


class CountingResult(unittest.TextTestResult):
    passed = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        CountingResult.passed += 1


def main(module):
    suite = unittest.defaultTestLoader.loadTestsFromName(module)
    result = unittest.TextTestRunner(verbosity=2, resultclass=CountingResult).run(suite)
    if not result.wasSuccessful():
        return 1
    if CountingResult.passed == 0:
        reasons = sorted({reason for _, reason in result.skipped}) or ["no test in the module"]
        print(f"{module}: no test ran, reported as skipped: " + "; ".join(reasons), file=sys.stderr)
        return SKIPPED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
