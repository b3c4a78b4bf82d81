"""Shared-memory objects a client process left behind in /dev/shm, for the end-to-end tests that
check a CLI or bench run cleaned up after itself without counting the objects of other tests
running beside them (ctest -j): the C++ client names its objects matserve-<pid>-... and the CLI
matserve-cli-<pid>, so an object whose process has exited (or is this one) was left behind."""
import os
import re

_CREATOR = re.compile(r"^matserve-(?:cli-)?(\d+)(?:-|$)")


def matserve_objects():
    return {f for f in os.listdir("/dev/shm") if f.startswith("matserve-")}


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def left_behind(before):
    """The matserve objects made since `before` by this process or by one that has exited."""
    left = set()
    for name in matserve_objects() - before:
        m = _CREATOR.match(name)
        pid = int(m.group(1)) if m else None
        if pid is None or pid == os.getpid() or not _running(pid):
            left.add(name)
    return left
