#!/usr/bin/python3
"""Shared memory and tokens tried as a hostile tenant would: a real matserve with several tokens,
and every class of attack on regions and owners, each with the status it must get. Prints a table
(check, expected, got, PASS/FAIL) and exits 1 on any FAIL or if the server died.

  scripts/ci/attack-shm.py --server-binary build/server/matserve [--backend cuda] [--json OUT]
  scripts/ci/attack-shm.py --target host:port --tokens-file F [--metrics URL] [--server-pid PID]

Started here, the server gets a tokens file of its own, small shared-memory caps and one execution
slot (so that a call can be held queued); the start-up classes (a tokens file with a name given
twice or a byte-order mark, shared memory off, objects of other users) start servers of their own.
With --target, the tokens file must hold two tokens with every permission and one without `shm`;
caps are read from GetServerInfo, and the checks that need a server of their own are skipped.
The client must be on the server's node (it shares /dev/shm). Needs grpcio, numpy and the stubs
(a build's python/ dir; found automatically).
"""
import argparse
import glob
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shm_objects  # noqa: E402  (scripts/ci/shm_objects.py)
from shm_objects import ShmObject  # noqa: E402


def import_stubs(extra):
    for d in [extra, os.environ.get("MATSERVE_STUBS")] + sorted(glob.glob(f"{ROOT}/build*/python")):
        if d and os.path.isdir(d) and d not in sys.path:
            sys.path.append(d)
    global grpc, np, pb, rpc
    import grpc
    import numpy as np
    from matserve.v1 import matrix_service_pb2 as pb
    from matserve.v1 import matrix_service_pb2_grpc as rpc


MAX_MESSAGE = 1 << 30
OPTS = [("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.max_send_message_length", MAX_MESSAGE)]
MAX_DETAILS = 512  # every status message must stay short (client strings are cut)
TOKENS = {"alice": "alice-attack-token-0123456789", "bob": "bob-attack-token-0123456789",
          "carol": "carol-attack-token-0123456789", "eve": "eve-attack-token-0123456789"}
PERMS = {"alice": "", "bob": "", "carol": "info,compute,resident", "eve": "shm"}
MIB = 1 << 20


# --- the server ---------------------------------------------------------------------------------
class Server:
    """A matserve started here (output drained), or None for --target."""

    def __init__(self, binary, backend, *flags, env=None):
        args = [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                f"--backend={backend}", *flags]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env={**os.environ, **(env or {})})
        self.lines, self.port, self.mport = [], None, None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (self.port and self.mport):
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if m := re.search(r"serving gRPC on \S+:(\d+)", line):
                self.port = int(m.group(1))
            if m := re.search(r"metrics on http://\S+:(\d+)/metrics", line):
                self.mport = int(m.group(1))
        if self.port:
            threading.Thread(target=lambda: self.lines.extend(self.proc.stdout),
                             daemon=True).start()
        else:
            self.proc.wait(timeout=60)
            self.lines.extend(self.proc.stdout)

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    @property
    def metrics(self):
        return f"http://127.0.0.1:{self.mport}/metrics" if self.mport else None

    def output(self):
        return "".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def metric(url, name):
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None
    vals = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
            if l.startswith(name + " ") or l.startswith(name + "{")]
    return sum(vals) if vals else None


def wait_until(predicate, timeout=120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


# --- checks -------------------------------------------------------------------------------------
class Checks:
    def __init__(self, stub, pid):
        self.stub = stub
        self.pid = pid
        self.rows = []  # (section, check, expected, got, verdict, details)
        self.section = ""

    def record(self, check, expected, got, ok, details=""):
        self.rows.append((self.section, check, expected, got, "PASS" if ok else "FAIL",
                          details[:300]))

    def skip(self, check, why):
        self.rows.append((self.section, check, "-", "-", "SKIP", why))

    def expect(self, check, expected, fn, fragment=None):
        """Runs fn(); `expected` is a status name ("OK" for success) or a tuple of names; a
        fragment must appear in the status message. Every message must be short."""
        want = (expected,) if isinstance(expected, str) else tuple(expected)
        details = ""
        try:
            result = fn()
            got = "OK"
        except grpc.RpcError as e:
            got, details, result = e.code().name, e.details() or "", e
        ok = got in want and len(details) <= MAX_DETAILS
        if ok and fragment and got != "OK":
            ok = fragment in details
        if len(details) > MAX_DETAILS:
            details = f"message of {len(details)} chars: " + details
        elif ok is False and fragment and fragment not in details:
            details = f"wanted {fragment!r} in: {details}"
        self.record(check, "|".join(want), got, ok, details)
        return result

    def truth(self, check, ok, details=""):
        self.record(check, "true", str(bool(ok)).lower(), bool(ok), details)
        return ok

    def alive(self):
        if self.pid is not None:
            try:
                os.kill(self.pid, 0)
            except OSError:
                return False
        try:
            self.stub.GetServerInfo(pb.GetServerInfoRequest(), metadata=md("alice"), timeout=30)
            return True
        except grpc.RpcError as e:
            return e.code() != grpc.StatusCode.UNAVAILABLE


TOKEN_OF = {}


def md(who):
    return [("authorization", f"Bearer {TOKEN_OF[who]}")] if who else None


def reg(name, key, size, offset=0):
    return pb.RegisterSharedMemoryRequest(name=name, key=key, offset=offset, byte_size=size)


def ref(region, offset=0):
    return pb.SharedMemoryRef(region=region, offset=offset)


def shm_mat(rows, cols, region, offset=0, dtype=None):
    return pb.Matrix(rows=rows, cols=cols, dtype=dtype or pb.FP32, shm=ref(region, offset))


def inline(a):
    return pb.Matrix(rows=a.shape[0], cols=a.shape[1],
                     dtype=pb.FP64 if a.dtype == np.float64 else pb.FP32, data=a.tobytes())


def rand(rows, cols, dtype=None):
    return np.random.default_rng(7).uniform(-1, 1, (rows, cols)).astype(dtype or np.float32)


class Attack:
    def __init__(self, args, stub, channel, metrics_url, pid, limits):
        self.args, self.stub, self.channel = args, stub, channel
        self.metrics, self.pid, self.limits = metrics_url, pid, limits
        self.c = Checks(stub, pid)
        self.objects = []

    def obj(self, size, **kw):
        o = ShmObject(size, prefix="matserve-attack", **kw)
        self.objects.append(o)
        return o

    def register(self, who, request):
        return shm_objects.register(self.stub, request, md(who))

    def unregister_all(self):
        for who in [w for w in ("alice", "bob", "eve") if w in TOKEN_OF]:
            try:
                self.stub.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(),
                                                 metadata=md(who), timeout=60)
            except grpc.RpcError:
                pass

    def listed(self, who):
        return [r.name for r in self.stub.ListSharedMemory(pb.ListSharedMemoryRequest(),
                                                           metadata=md(who), timeout=60).regions]

    def close(self):
        for o in self.objects:
            o.close()

    # -- authentication and permissions
    def auth(self):
        c, s = self.c, self.stub
        c.section = "tokens"
        o = self.obj(4096)
        for who, label in ((None, "no token"), ("bogus", "unknown token")):
            m = md(who) if who != "bogus" else [("authorization", "Bearer " + "z" * 40)]
            c.expect(f"Register, {label}", "UNAUTHENTICATED",
                     lambda: s.RegisterSharedMemory(reg("x", o.key, 4096), metadata=m, timeout=30))
            c.expect(f"ListSharedMemory, {label}", "UNAUTHENTICATED",
                     lambda: s.ListSharedMemory(pb.ListSharedMemoryRequest(), metadata=m,
                                                timeout=30))
            c.expect(f"Unregister all, {label}", "UNAUTHENTICATED",
                     lambda: s.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(),
                                                      metadata=m, timeout=30))
        # Headers over gRPC's metadata limit end the connection (gRPC's own answer), so on a
        # connection of its own: a channel with the same target and options would share the
        # main channel's connection (gRPC's global subchannel pool), and the next call on it could
        # find the socket closed. The server must not echo the token either way.
        long_bearer = [("authorization", "Bearer " + "y" * 20000)]
        with grpc.insecure_channel(self.args.target_used,
                                   options=OPTS + [("grpc.use_local_subchannel_pool", 1)]) as ch:
            c.expect("a 20000-character bearer token", ("UNAUTHENTICATED", "RESOURCE_EXHAUSTED"),
                     lambda: rpc.MatrixServiceStub(ch).ListSharedMemory(
                         pb.ListSharedMemoryRequest(), metadata=long_bearer, timeout=30))
        c.expect("'Basic' instead of 'Bearer'", "UNAUTHENTICATED",
                 lambda: s.ListSharedMemory(pb.ListSharedMemoryRequest(), timeout=30, metadata=[
                     ("authorization", "Basic " + TOKEN_OF["alice"])]))
        c.expect("a token's prefix", "UNAUTHENTICATED",
                 lambda: s.ListSharedMemory(pb.ListSharedMemoryRequest(), timeout=30, metadata=[
                     ("authorization", "Bearer " + TOKEN_OF["alice"][:-1])]))
        for rpc_name, call in (
                ("RegisterSharedMemory", lambda: s.RegisterSharedMemory(
                    reg("x", o.key, 4096), metadata=md("carol"), timeout=30)),
                ("UnregisterSharedMemory", lambda: s.UnregisterSharedMemory(
                    pb.UnregisterSharedMemoryRequest(), metadata=md("carol"), timeout=30)),
                ("ListSharedMemory", lambda: s.ListSharedMemory(
                    pb.ListSharedMemoryRequest(), metadata=md("carol"), timeout=30)),
                ("RegisterCudaMemory", lambda: s.RegisterCudaMemory(
                    pb.RegisterCudaMemoryRequest(name="g", ipc_handle=bytes(64), byte_size=64),
                    metadata=md("carol"), timeout=30))):
            c.expect(f"{rpc_name} without 'shm'", "PERMISSION_DENIED", call,
                     fragment="needs permission 'shm'")
        if "eve" in TOKEN_OF:  # shm without compute: registers, may not compute with it
            self.register("eve", reg("e", o.key, 4096))
            c.expect("a region used by a token without 'compute'", "PERMISSION_DENIED",
                     lambda: s.Transpose(pb.TransposeRequest(a=shm_mat(4, 4, "e")),
                                         metadata=md("eve"), timeout=30))
            self.unregister_all()
        else:
            c.skip("a region used by a token without 'compute'", "no shm-only token")

    # -- keys, names, ranges, file kinds
    def bad_registrations(self):
        c, s = self.c, self.stub
        c.section = "registration"
        o = self.obj(1 << 16)
        a = lambda r: (lambda: s.RegisterSharedMemory(r, metadata=md("alice"), timeout=30))  # noqa
        IA, NF = "INVALID_ARGUMENT", "NOT_FOUND"
        for label, key, want in (
                ("empty key", "", IA), ("key without '/'", o.key[1:], IA),
                ("key '/'", "/", IA), ("key with a second '/'", "/a/b", IA),
                ("key '/../etc/passwd'", "/../etc/passwd", IA), ("key '/..'", "/..", IA),
                ("key '/.'", "/.", IA), ("key with NUL", o.key + "\0x", IA),
                ("key of 300 characters", "/" + "k" * 299, IA),
                ("key of an absent object", f"/matserve-attack-absent-{os.getpid()}", NF)):
            c.expect(label, want, a(reg("x", key, 4096)), fragment="key:")
        for label, name in (("empty name", ""), ("name of 129 characters", "n" * 129),
                            ("name with a space", "a b"), ("name with '/'", "a/b"),
                            ("name '..'/x", "../x"), ("name with a non-ASCII letter", "r\u00e9gion"),
                            ("name with NUL", "a\0b"), ("name with a newline", "a\nb")):
            c.expect(label, IA, a(reg(name, o.key, 4096)), fragment="name:")
        size = o.size
        for label, off, n, frag in (
                ("offset -1", -1, 4096, "offset:"), ("byte_size 0", 0, 0, "byte_size:"),
                ("byte_size -4096", 0, -4096, "byte_size:"),
                ("range 1 byte past the end", 1, size, "byte_size:"),
                ("offset past the end", size + 4096, 32, "byte_size:"),
                ("offset + byte_size overflowing int64", 1 << 62, (1 << 63) - 1, "byte_size:"),
                ("byte_size 2^63-1", 0, (1 << 63) - 1, "byte_size:"),
                ("byte_size 31 (below the nonce)", 0, 31, "at least 32 bytes")):
            c.expect(label, (IA, "RESOURCE_EXHAUSTED"), a(reg("x", o.key, n, off)), fragment=frag)
        # Things in /dev/shm that are not shared-memory objects.
        base = f"/dev/shm/matserve-attack-{os.getpid()}"
        os.symlink(o.path, base + "-link")
        os.symlink("/etc/passwd", base + "-passwd")
        os.mkfifo(base + "-fifo")
        os.mkdir(base + "-dir")
        made = [base + s for s in ("-link", "-passwd", "-fifo", "-dir")]
        if os.geteuid() == 0:
            os.mknod(base + "-null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
            made.append(base + "-null")
        try:
            for path in made:
                key = path[len("/dev/shm"):]
                c.expect(f"key naming a {path.rsplit('-', 1)[1]} in /dev/shm", IA,
                         a(reg("x", key, 4096)), fragment="key:")
            c.truth("the server still serves after opening a FIFO", c.alive())
        finally:
            for path in made:
                (os.rmdir if path.endswith("-dir") else os.unlink)(path)
        # A name given twice; the object unlinked after registration keeps working.
        self.register("alice", reg("dup", o.key, 4096))
        c.expect("a region name registered twice", "ALREADY_EXISTS",
                 lambda: self.register("alice", reg("dup", o.key, 4096)))
        gone = self.obj(4096)
        a_ = rand(4, 4)
        gone.write(0, a_.tobytes())
        self.register("alice", reg("gone", gone.key, 4096))
        gone.close()  # unlinked: the server's mapping holds the pages
        r = c.expect("a region whose object was unlinked since", "OK",
                     lambda: s.Transpose(pb.TransposeRequest(a=shm_mat(4, 4, "gone")),
                                         metadata=md("alice"), timeout=30))
        if not isinstance(r, grpc.RpcError):
            got = np.frombuffer(r.b.data, np.float32).reshape(4, 4)
            c.truth("... and reads the bytes it held", np.array_equal(got, a_.T))
        c.expect("unregistering a name twice", "NOT_FOUND", lambda: [s.UnregisterSharedMemory(
            pb.UnregisterSharedMemoryRequest(name="gone"), metadata=md("alice"), timeout=30)
            for _ in range(2)])
        self.unregister_all()

    # -- CUDA IPC handles that open nothing (the CPU backend refuses the call as such)
    def cuda_handles(self):
        c, s = self.c, self.stub
        c.section = "cuda ipc"
        want = ("FAILED_PRECONDITION",) if self.args.backend == "cpu" else (
            "INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND")
        for label, handle in (("64 zero bytes", bytes(64)), ("64 random bytes", os.urandom(64)),
                              ("10 bytes", bytes(10)), ("20000 bytes", b"h" * 20000)):
            c.expect(f"RegisterCudaMemory with a handle of {label}", want,
                     lambda: s.RegisterCudaMemory(pb.RegisterCudaMemoryRequest(
                         name="g", ipc_handle=handle, byte_size=64), metadata=md("alice"),
                         timeout=30))
        c.truth("no CUDA region registered by them", self.listed("alice") == [])
        c.truth("the server lives", c.alive())

    # -- places in regions
    def bad_places(self):
        c, s = self.c, self.stub
        c.section = "places"
        o = self.obj(1 << 16)
        self.register("alice", reg("r", o.key, 1 << 16))
        b = inline(rand(8, 8))
        mul = lambda **kw: (lambda: s.Multiply(pb.MultiplyRequest(**kw), metadata=md("alice"),  # noqa
                                               timeout=30))
        IA = "INVALID_ARGUMENT"
        c.expect("an unknown region", "NOT_FOUND", mul(a=shm_mat(8, 8, "nope"), b=b),
                 fragment="a.shm.region")
        c.expect("offset -1", IA, mul(a=shm_mat(8, 8, "r", -1), b=b), fragment="a.shm")
        c.expect("a matrix past the region's end", IA,
                 mul(a=shm_mat(8, 8, "r", (1 << 16) - 255), b=b), fragment="a.shm")
        c.expect("offset 2^63-1", IA, mul(a=shm_mat(8, 8, "r", (1 << 63) - 1), b=b),
                 fragment="a.shm")
        c.expect("rows x cols overflowing", IA, mul(a=pb.Matrix(
            rows=1 << 40, cols=1 << 40, dtype=pb.FP32, shm=ref("r")), b=b))
        c.expect("data and shm both given", IA, mul(a=pb.Matrix(
            rows=8, cols=8, dtype=pb.FP32, data=bytes(256), shm=ref("r")), b=b))
        c.expect("output_shm past the end", IA, mul(a=b, b=b, output_shm=ref("r", (1 << 16) - 8)),
                 fragment="output_shm")
        c.expect("output_shm over a.shm in one region", IA,
                 mul(a=shm_mat(8, 8, "r"), b=b, output_shm=ref("r", 128)), fragment="overlaps")
        self.register("alice", reg("r2", o.key, 1 << 15, offset=1 << 15))
        c.expect("output_shm over a.shm through a second registration", IA,
                 mul(a=shm_mat(8, 8, "r", 1 << 15), b=b, output_shm=ref("r2", 64)),
                 fragment="overlaps")
        c.expect("output_shm with keep_result", IA,
                 mul(a=b, b=b, output_shm=ref("r", 4096), keep_result=True))
        c.expect("Transpose in_place with output_shm", IA, lambda: s.Transpose(
            pb.TransposeRequest(a=b, in_place=True, output_shm=ref("r")), metadata=md("alice"),
            timeout=30))
        c.expect("a batch stacked past the region's end", IA, mul(
            a=pb.Matrix(rows=64, cols=64, dtype=pb.FP32, shm=ref("r"), batch=5),
            b=inline(rand(64, 64))))
        self.unregister_all()

    # -- one tenant against another
    def cross_tenant(self):
        c, s = self.c, self.stub
        c.section = "tenants"
        secret = rand(8, 8)
        o = self.obj(8192)  # alice's object
        o.write(0, secret.tobytes())
        self.register("alice", reg("mine", o.key, 8192))
        b = inline(rand(8, 8))
        as_bob = lambda f, **kw: (lambda: f(metadata=md("bob"), timeout=30, **kw))  # noqa
        c.expect("bob reads alice's region by name", "NOT_FOUND",
                 as_bob(s.Multiply, request=pb.MultiplyRequest(a=shm_mat(8, 8, "mine"), b=b)))
        c.expect("bob writes alice's region by name (output_shm)", "NOT_FOUND",
                 as_bob(s.Transpose, request=pb.TransposeRequest(a=b, output_shm=ref("mine"))))
        c.expect("bob unregisters alice's region by name", "NOT_FOUND",
                 as_bob(s.UnregisterSharedMemory,
                        request=pb.UnregisterSharedMemoryRequest(name="mine")))
        c.expect("bob unregisters all of his (none)", "OK",
                 as_bob(s.UnregisterSharedMemory, request=pb.UnregisterSharedMemoryRequest()))
        c.truth("bob lists none of alice's regions", self.listed("bob") == [])
        c.truth("alice's region survives bob", self.listed("alice") == ["mine"])
        steal = reg("stolen", o.key, 8192)
        e = c.expect("bob registers alice's key without the nonce", "FAILED_PRECONDITION",
                     lambda: s.RegisterSharedMemory(steal, metadata=md("bob"), timeout=30),
                     fragment="registration nonce")
        bob_nonce = shm_objects.nonce_of(e) if isinstance(e, grpc.RpcError) else None
        c.truth("the refusal carries a 32-hex-digit nonce",
                re.fullmatch(r"[0-9a-f]{32}", bob_nonce or "") is not None)
        # Alice's nonce for the same key does not admit bob, nor a nonce for another key.
        try:
            s.RegisterSharedMemory(reg("again", o.key, 8192), metadata=md("alice"), timeout=30)
        except grpc.RpcError as err:
            alice_nonce = shm_objects.nonce_of(err)
        saved = o.read(0, 32)
        o.write(0, alice_nonce.encode())
        c.expect("bob registers with alice's nonce in the object", "FAILED_PRECONDITION",
                 lambda: s.RegisterSharedMemory(steal, metadata=md("bob"), timeout=30))
        other = self.obj(8192)
        try:
            s.RegisterSharedMemory(reg("o", other.key, 8192), metadata=md("bob"), timeout=30)
        except grpc.RpcError as err:
            other_nonce = shm_objects.nonce_of(err)
        o.write(0, other_nonce.encode())
        c.expect("bob registers with his nonce for another key", "FAILED_PRECONDITION",
                 lambda: s.RegisterSharedMemory(steal, metadata=md("bob"), timeout=30))
        o.write(0, saved)
        c.expect("the nonce written outside the range's first bytes", "FAILED_PRECONDITION",
                 lambda: self._nonce_at(steal, o, 64))
        c.truth("alice's bytes untouched by all this", o.read(0, 256) == secret.tobytes())
        c.truth("bob holds no region", self.listed("bob") == [])
        # A nonce is used once: the bytes left in place do not register a second region.
        nonce = self._nonce_for("bob", steal)
        o.write(0, nonce.encode())
        c.expect("bob registers after writing his own nonce (he can write the object)", "OK",
                 lambda: s.RegisterSharedMemory(steal, metadata=md("bob"), timeout=30))
        c.expect("the same nonce again, for a second name", "FAILED_PRECONDITION",
                 lambda: s.RegisterSharedMemory(reg("stolen2", o.key, 8192), metadata=md("bob"),
                                                timeout=30))
        o.write(0, saved)
        self.unregister_all()
        # Resident handles of another token, named as operands next to regions.
        h = s.Upload(pb.UploadRequest(matrix=inline(secret)), metadata=md("alice"),
                     timeout=30).resident.handle
        self.register("bob", reg("b", self.obj(8192).key, 8192))
        c.expect("bob names alice's resident handle with his region as output", "NOT_FOUND",
                 as_bob(s.Multiply, request=pb.MultiplyRequest(a_handle=h, b=b,
                                                               output_shm=ref("b"))))
        c.expect("bob downloads alice's handle", "NOT_FOUND",
                 as_bob(s.Download, request=pb.DownloadRequest(handle=h)))
        c.expect("bob releases alice's handle", "NOT_FOUND",
                 as_bob(s.Release, request=pb.ReleaseRequest(handle=h)))
        c.expect("carol (no shm) names bob's region", "NOT_FOUND",
                 lambda: s.Multiply(pb.MultiplyRequest(a=shm_mat(8, 8, "b"), b=b),
                                    metadata=md("carol"), timeout=30))
        s.Release(pb.ReleaseRequest(handle=h), metadata=md("alice"), timeout=30)
        self.unregister_all()

    def _nonce_for(self, who, request):
        try:
            self.stub.RegisterSharedMemory(request, metadata=md(who), timeout=30)
        except grpc.RpcError as e:
            return shm_objects.nonce_of(e) or ""
        raise AssertionError("registered without a nonce")

    def _nonce_at(self, request, o, offset):
        nonce = self._nonce_for("bob", request)
        saved = o.read(offset, 32)
        o.write(offset, nonce.encode())
        try:
            return self.stub.RegisterSharedMemory(request, metadata=md("bob"), timeout=30)
        finally:
            o.write(offset, saved)

    # -- long strings
    def long_strings(self):
        c, s = self.c, self.stub
        c.section = "long strings"
        o = self.obj(4096)
        self.register("alice", reg("r", o.key, 4096))
        long = "x" * 20000
        b = inline(rand(2, 2))
        for label, want, call in (
                ("key", "INVALID_ARGUMENT", lambda: s.RegisterSharedMemory(
                    reg("k", "/" + long, 64), metadata=md("alice"), timeout=30)),
                ("name", "INVALID_ARGUMENT", lambda: s.RegisterSharedMemory(
                    reg(long, o.key, 64), metadata=md("alice"), timeout=30)),
                ("Unregister name", "NOT_FOUND", lambda: s.UnregisterSharedMemory(
                    pb.UnregisterSharedMemoryRequest(name=long), metadata=md("alice"), timeout=30)),
                ("a.shm.region", "NOT_FOUND", lambda: s.Multiply(pb.MultiplyRequest(
                    a=shm_mat(2, 2, long), b=b), metadata=md("alice"), timeout=30)),
                ("c.shm.region", "NOT_FOUND", lambda: s.Multiply(pb.MultiplyRequest(
                    a=b, b=b, c=shm_mat(2, 2, long), beta=1.0), metadata=md("alice"), timeout=30)),
                ("output_shm.region", "NOT_FOUND", lambda: s.Transpose(pb.TransposeRequest(
                    a=b, output_shm=ref(long)), metadata=md("alice"), timeout=30)),
                ("variant", ("INVALID_ARGUMENT", "NOT_FOUND"), lambda: s.Multiply(
                    pb.MultiplyRequest(a=shm_mat(2, 2, "r"), b=b, variant=long),
                    metadata=md("alice"), timeout=30)),
                ("a_handle", "NOT_FOUND", lambda: s.Multiply(pb.MultiplyRequest(
                    a_handle=long, b=b), metadata=md("alice"), timeout=30))):
            c.expect(f"20000-character {label}", want, call)
        self.unregister_all()

    # -- caps
    def quotas(self):
        c, s = self.c, self.stub
        c.section = "caps"
        lim = self.limits
        n = lim.max_shm_regions_per_owner
        if n <= 256:
            o = self.obj(4096)
            for i in range(n):
                self.register("alice", reg(f"q{i}", o.key, 64))
            c.expect(f"region {n + 1} of one caller", "RESOURCE_EXHAUSTED",
                     lambda: self.register("alice", reg("over", o.key, 64)),
                     fragment="--max_shm_regions_per_owner")
            c.expect("another caller is not held back", "OK",
                     lambda: self.register("bob", reg("mine", o.key, 64)))
            self.unregister_all()
        else:
            c.skip("regions per caller", f"the cap is {n}")
        per_owner, total = lim.max_shared_memory_bytes_per_owner, lim.max_shared_memory_bytes
        huge = self.obj(1 << 47)  # sparse: no memory behind it
        c.expect("a 2 TiB range of a sparse 2^47-byte object", "RESOURCE_EXHAUSTED",
                 lambda: s.RegisterSharedMemory(reg("huge", huge.key, 1 << 41),
                                                metadata=md("alice"), timeout=30),
                 fragment="--max_shared_memory_bytes")
        if per_owner < total and per_owner <= (1 << 46):
            c.expect("the per-caller byte cap, exactly", "OK",
                     lambda: self.register("alice", reg("all", huge.key, per_owner)))
            c.expect("one byte over the per-caller byte cap", "RESOURCE_EXHAUSTED",
                     lambda: s.RegisterSharedMemory(reg("more", huge.key, 32),
                                                    metadata=md("alice"), timeout=30),
                     fragment="--max_shared_memory_bytes_per_owner")
            if 2 * per_owner > total:
                c.expect("past the server-wide byte cap (a second caller)", "RESOURCE_EXHAUSTED",
                         lambda: s.RegisterSharedMemory(reg("all", huge.key, per_owner),
                                                        metadata=md("bob"), timeout=30),
                         fragment="--max_shared_memory_bytes")
            else:
                c.skip("the server-wide byte cap", "two callers cannot reach it")
            a = rand(1024, 1024)
            r = c.expect("an inline request still gets its memory", "OK", lambda: s.Transpose(
                pb.TransposeRequest(a=inline(a)), metadata=md("alice"), timeout=120))
            if not isinstance(r, grpc.RpcError):
                c.truth("... and its result is right", np.array_equal(
                    np.frombuffer(r.b.data, np.float32).reshape(1024, 1024), a.T))
            self.unregister_all()
            c.expect("the bytes come back when unregistered", "OK",
                     lambda: self.register("bob", reg("all", huge.key, per_owner)))
            self.unregister_all()
        else:
            c.skip("per-caller and server-wide byte caps", "caps out of reach")
        c.truth("huge registrations left no mapping", not self._mapped(huge.key))

    def _mapped(self, key=""):
        if self.pid is None:
            return False
        with open(f"/proc/{self.pid}/maps") as f:
            return any("/dev/shm" + key in line for line in f)

    # -- objects truncated or unmapped under the server
    def truncation(self):
        c, s = self.c, self.stub
        c.section = "truncation"
        o = self.obj(1 << 16)
        a = rand(64, 64)
        o.write(0, a.tobytes())
        self.register("alice", reg("t", o.key, 1 << 16))
        o.truncate(4096)
        c.expect("an operand in a truncated object", "FAILED_PRECONDITION", lambda: s.Multiply(
            pb.MultiplyRequest(a=shm_mat(64, 64, "t"), b=inline(a)), metadata=md("alice"),
            timeout=30), fragment="truncated")
        c.expect("a result into a truncated object", "FAILED_PRECONDITION", lambda: s.Transpose(
            pb.TransposeRequest(a=inline(a), output_shm=ref("t", 8192)), metadata=md("alice"),
            timeout=30))
        # Refused before any byte was touched (the size is checked per call), so the mapping
        # is still the object's: grown back, the region serves the bytes it holds now.
        o.truncate(1 << 16)
        r = c.expect("the object grown back before any fault: serves", "OK", lambda: s.Transpose(
            pb.TransposeRequest(a=shm_mat(64, 64, "t")), metadata=md("alice"), timeout=30))
        if not isinstance(r, grpc.RpcError):
            now = np.frombuffer(o.read(0, 64 * 64 * 4), np.float32).reshape(64, 64)
            c.truth("... its current bytes (truncated ones read as zero)", np.array_equal(
                np.frombuffer(r.b.data, np.float32).reshape(64, 64), now.T))
        s.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(name="t"), metadata=md("alice"),
                                 timeout=30)
        o.write(0, a.tobytes())
        self.register("alice", reg("t", o.key, 1 << 16))
        c.expect("registered again: serves", "OK", lambda: s.Multiply(pb.MultiplyRequest(
            a=shm_mat(64, 64, "t"), b=inline(a)), metadata=md("alice"), timeout=30))
        # The possession check reading an object truncated under it: zeros, refused.
        p = self.obj(8192)
        req = reg("p", p.key, 8192)
        nonce = self._nonce_for("alice", req)
        p.write(0, nonce.encode())
        p.truncate(0)
        c.expect("registering an object truncated to 0 after its nonce", "INVALID_ARGUMENT",
                 lambda: s.RegisterSharedMemory(req, metadata=md("alice"), timeout=30))
        self.unregister_all()
        self.queued_truncation()

    def queued_truncation(self):
        """A 2048 x 40000 fp32 transpose from one object into another, queued behind a long call;
        the output object is truncated to 0 meanwhile: 80000 pages that fault, more than the
        kernel's ~65530 mappings per process if each fault split the mapping."""
        c, s = self.c, self.stub
        rows, cols = 2048, 40000
        size = rows * cols * 4
        if 2 * size > self.limits.max_shared_memory_bytes_per_owner:
            c.skip("truncation racing a queued call", "per-caller byte cap below 2 x 328 MB")
            return
        src, dst = self.obj(size), self.obj(size)
        self.register("alice", reg("in", src.key, size))
        self.register("alice", reg("out", dst.key, size))
        holder = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hold",
                                   self.args.target_used, "--hold-token", TOKEN_OF["alice"],
                                   "--stubs", os.path.dirname(os.path.dirname(
                                       os.path.dirname(pb.__file__)))],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        queued = False
        try:
            running = self.metrics and wait_until(
                lambda: (metric(self.metrics, "matserve_requests_in_flight") or 0) >= 1
                or holder.poll() is not None)
            channel = grpc.insecure_channel(self.args.target_used, options=OPTS)
            fut = rpc.MatrixServiceStub(channel).Transpose.future(pb.TransposeRequest(
                a=shm_mat(rows, cols, "in"), output_shm=ref("out")), metadata=md("alice"),
                timeout=600)
            if running:
                queued = wait_until(
                    lambda: (metric(self.metrics, "matserve_queue_depth") or 0) >= 1
                    or holder.poll() is not None or fut.done()) and holder.poll() is None
            dst.truncate(0)
            if queued:
                c.truth("the transpose was queued when the output was truncated", True)
            elif self.args.target:  # a server with free slots runs it at once: still a race
                c.skip("the transpose was queued when the output was truncated",
                       "not queued: the target has a free slot or no --metrics (start it with "
                       "--cpu_concurrency=1 / --streams_per_device=1 to queue)")
            else:
                c.truth("the transpose was queued when the output was truncated", False)
            c.expect("transpose into an object truncated under a queued call (80000 pages)",
                     "FAILED_PRECONDITION", lambda: fut.result(), fragment="region 'out'")
            channel.close()
        finally:
            out, _ = holder.communicate(timeout=600)
        c.truth("the long call ahead of it completed", holder.returncode == 0, out[-300:])
        c.truth("the server lives", c.alive())
        c.expect("the region keeps failing until registered again", "FAILED_PRECONDITION",
                 lambda: s.Transpose(pb.TransposeRequest(a=shm_mat(rows, cols, "in"),
                                                         output_shm=ref("out")),
                                     metadata=md("alice"), timeout=600))
        self.unregister_all()
        dst.close()
        src.close()

    # -- races between registration, unregistration and use
    def races(self):
        c, s = self.c, self.stub
        c.section = "races"
        o = self.obj(1 << 20)
        a = rand(64, 64)
        o.write(0, a.tobytes())
        errors, outcomes = [], {}
        stop = time.monotonic() + self.args.race_seconds

        def churn(i):
            while time.monotonic() < stop:
                try:
                    self.register("alice", reg("hot", o.key, 1 << 16))
                    outcomes["registered"] = outcomes.get("registered", 0) + 1
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.ALREADY_EXISTS:
                        errors.append(f"register: {e.code().name} {e.details()}")
                try:
                    s.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(
                        name="hot" if i % 2 else ""), metadata=md("alice"), timeout=30)
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.NOT_FOUND:
                        errors.append(f"unregister: {e.code().name} {e.details()}")

        def use():
            while time.monotonic() < stop:
                try:
                    r = s.Multiply(pb.MultiplyRequest(a=shm_mat(64, 64, "hot"), b=inline(a),
                                                      output_shm=ref("hot", 1 << 15)),
                                   metadata=md("alice"), timeout=60)
                    outcomes["used"] = outcomes.get("used", 0) + 1
                    if (r.c.rows, r.c.cols) != (64, 64):
                        errors.append("use: wrong reply shape")
                except grpc.RpcError as e:
                    if e.code() not in (grpc.StatusCode.NOT_FOUND,
                                        grpc.StatusCode.FAILED_PRECONDITION):
                        errors.append(f"use: {e.code().name} {e.details()}")

        threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
        threads += [threading.Thread(target=use) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        c.truth(f"register / unregister / use of one name from 8 threads "
                f"({outcomes.get('registered', 0)} registrations, {outcomes.get('used', 0)} uses)",
                not errors, "; ".join(errors[:3]))
        c.truth("at most one region of that name afterwards", len(self.listed("alice")) <= 1)
        c.truth("the object's bytes survive the concurrent handshakes",
                o.read(0, a.nbytes) == a.tobytes())
        self.unregister_all()
        c.truth("none after unregistering all", self.listed("alice") == [])
        # Unregistering a region while a call uses it: the call completes on its mapping.
        big = self.obj(1024 * 1024 * 4 * 2)
        x = rand(1024, 1024)
        big.write(0, x.tobytes())
        self.register("alice", reg("busy", big.key, big.size))
        fut = s.Transpose.future(pb.TransposeRequest(a=shm_mat(1024, 1024, "busy"),
                                                     output_shm=ref("busy", 1 << 22)),
                                 metadata=md("alice"), timeout=120)
        s.UnregisterSharedMemory(pb.UnregisterSharedMemoryRequest(name="busy"),
                                 metadata=md("alice"), timeout=30)
        r = c.expect("a call racing the unregistration of its region",
                     ("OK", "NOT_FOUND"), lambda: fut.result())
        if not isinstance(r, grpc.RpcError):
            got = np.frombuffer(big.read(1 << 22, 1 << 22), np.float32).reshape(1024, 1024)
            c.truth("... and wrote its whole result", np.array_equal(got, x.T))
        c.expect("the name registers again at once", "OK",
                 lambda: self.register("alice", reg("busy", big.key, big.size)))
        self.unregister_all()
        # Nonce requests for many keys: bounded, the server lives.
        keys = [self.obj(64) for _ in range(200)]
        for k in keys:
            try:
                s.RegisterSharedMemory(reg("n", k.key, 64), metadata=md("bob"), timeout=30)
            except grpc.RpcError:
                pass
        c.truth("200 nonces asked for, none redeemed: the server lives", c.alive())
        for k in keys:
            k.close()

    # -- the end state
    def end_state(self):
        c = self.c
        c.section = "end"
        self.unregister_all()
        c.truth("the server is alive", c.alive())
        for who in ("alice", "bob"):
            c.truth(f"nothing registered for {who}", self.listed(who) == [])
            c.truth(f"nothing resident for {who}", not self.stub.ListResident(
                pb.ListResidentRequest(), metadata=md(who), timeout=30).matrices)
        if self.pid is not None:
            c.truth("no object mapped in the server", not self._mapped())


# --- servers of their own -----------------------------------------------------------------------
def startup_checks(c, binary, backend, tmp):
    c.section = "start-up"
    path = os.path.join(tmp, "dup-tokens")
    with open(path, "w") as f:
        f.write(f"{TOKENS['alice']} alice\n{TOKENS['bob']} alice info,compute\n")
    srv = Server(binary, backend, f"--auth_tokens_file={path}")
    code = srv.stop() if srv.port else srv.proc.returncode
    c.record("a tokens file giving one name twice stops the server", "exit != 0",
             f"exit {code}", code not in (0, None) and not srv.port
             and "is given to another token already" in srv.output(), srv.output()[-200:])
    path = os.path.join(tmp, "bom-tokens")
    with open(path, "wb") as f:
        f.write(b"\xef\xbb\xbf" + f"{TOKENS['alice']} alice\n".encode())
    srv = Server(binary, backend, f"--auth_tokens_file={path}")
    if srv.port:
        ch = grpc.insecure_channel(srv.target, options=OPTS)
        c.stub, saved = rpc.MatrixServiceStub(ch), c.stub
        c.expect("the first token of a file that starts with a BOM", "OK",
                 lambda: c.stub.ListSharedMemory(pb.ListSharedMemoryRequest(), timeout=30,
                                                 metadata=[("authorization",
                                                            "Bearer " + TOKENS["alice"])]))
        c.stub = saved
        ch.close()
    else:
        c.record("the first token of a file that starts with a BOM", "OK", "no start", False,
                 srv.output()[-200:])
    c.record("... and that server stops cleanly", "exit 0", f"exit {srv.stop()}",
             srv.proc.returncode == 0)
    srv = Server(binary, backend, "--shared_memory=false")
    ch = grpc.insecure_channel(srv.target, options=OPTS)
    c.stub, saved = rpc.MatrixServiceStub(ch), c.stub
    o = ShmObject(4096, prefix="matserve-attack")
    try:
        c.expect("RegisterSharedMemory with --shared_memory=false", "FAILED_PRECONDITION",
                 lambda: c.stub.RegisterSharedMemory(reg("x", o.key, 4096), timeout=30),
                 fragment="--shared_memory=false")
        c.expect("a region named with --shared_memory=false", "FAILED_PRECONDITION",
                 lambda: c.stub.Transpose(pb.TransposeRequest(a=shm_mat(2, 2, "x")), timeout=30))
        if os.geteuid() == 0:
            os.fchown(o.fd, 65534, 65534)
            c.stub = saved
            c.expect("an object of another uid (nobody)", "PERMISSION_DENIED",
                     lambda: shm_objects.register(saved, reg("theirs", o.key, 4096), md("alice")),
                     fragment="--shared_memory_allow_other_uids")
        else:
            c.skip("an object of another uid", "needs root to give an object away")
    finally:
        c.stub = saved
        o.close()
        ch.close()
        srv.stop()


def hold(target, token, stubs):
    """--hold: one long multiply (1500^2 fp64) that keeps the server's slot busy."""
    import_stubs(stubs)
    a = np.random.default_rng(1).uniform(-1, 1, (1500, 1500))
    ch = grpc.insecure_channel(target, options=OPTS)
    r = rpc.MatrixServiceStub(ch).Multiply(pb.MultiplyRequest(a=inline(a), b=inline(a)),
                                           metadata=[("authorization", f"Bearer {token}")],
                                           timeout=600)
    print("held", r.c.rows)
    return 0


def read_tokens(path):
    """name -> (token, permissions) from a tokens file (BOM, comments, blank lines, ';')."""
    text = open(path, encoding="utf-8-sig").read()
    out = {}
    for line in re.split(r"[;\n]", text):
        parts = line.split()
        if parts and not parts[0].startswith("#") and len(parts) >= 2:
            out[parts[1]] = (parts[0], set(parts[2].split(",")) if len(parts) > 2 else
                             {"info", "compute", "resident", "shm"})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--server-binary", help="start this matserve")
    p.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--target", help="host:port of a running server (on this node)")
    p.add_argument("--tokens-file", help="--target's tokens file")
    p.add_argument("--metrics", help="--target's /metrics URL (to see a call queued)")
    p.add_argument("--server-pid", type=int, help="--target's pid (liveness, its mappings)")
    p.add_argument("--race-seconds", type=float, default=3.0)
    p.add_argument("--only", help="run only these parts, comma-separated (e.g. truncation,races)")
    p.add_argument("--stubs", help="directory with matserve/v1/*_pb2.py")
    p.add_argument("--json", help="write the table here")
    p.add_argument("--hold", help=argparse.SUPPRESS)
    p.add_argument("--hold-token", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.hold:
        return hold(args.hold, args.hold_token, args.stubs)
    import_stubs(args.stubs)
    if not (args.server_binary or args.target):
        binaries = sorted(glob.glob(f"{ROOT}/build*/server/matserve"))
        if not binaries:
            sys.exit("attack-shm: give --server-binary or --target")
        args.server_binary = binaries[0]

    tmp = tempfile.TemporaryDirectory()
    server = None
    if args.target:
        if not args.tokens_file:
            sys.exit("attack-shm: --target needs --tokens-file")
        tokens = read_tokens(args.tokens_file)
        full = [n for n, (_, perms) in tokens.items() if {"info", "compute", "resident", "shm"}
                <= perms]
        noshm = [n for n, (_, perms) in tokens.items() if "shm" not in perms and "compute" in perms]
        shm_only = [n for n, (_, perms) in tokens.items() if "shm" in perms and
                    "compute" not in perms]
        if len(full) < 2 or not noshm:
            sys.exit("attack-shm: the tokens file needs two tokens with every permission and one "
                     "with compute but without shm")
        TOKEN_OF.update(alice=tokens[full[0]][0], bob=tokens[full[1]][0],
                        carol=tokens[noshm[0]][0])
        if shm_only:
            TOKEN_OF["eve"] = tokens[shm_only[0]][0]
        target, metrics_url, pid = args.target, args.metrics, args.server_pid
    else:
        path = os.path.join(tmp.name, "tokens")
        with open(path, "w") as f:
            f.write("# attack-shm tenants\n")
            for name, token in TOKENS.items():
                f.write(f"{token} {name} {PERMS[name]}\n")
        TOKEN_OF.update(TOKENS)
        slots = "--cpu_concurrency=1" if args.backend == "cpu" else "--streams_per_device=1"
        server = Server(args.server_binary, args.backend, f"--auth_tokens_file={path}", slots, "--max_shm_regions_per_owner=8",
                        f"--max_shared_memory_bytes_per_owner={1 << 30}",
                        f"--max_shared_memory_bytes={3 << 29}", "--check_lock_order",
                        env={"OPENBLAS_NUM_THREADS": "1"})
        if not server.port:
            sys.exit("attack-shm: the server did not start:\n" + server.output())
        target, metrics_url, pid = server.target, server.metrics, server.proc.pid
    args.target_used = target
    channel = grpc.insecure_channel(target, options=OPTS)
    stub = rpc.MatrixServiceStub(channel)
    limits = stub.GetServerInfo(pb.GetServerInfoRequest(), metadata=md("alice"),
                                timeout=60).limits
    attack = Attack(args, stub, channel, metrics_url, pid, limits)
    start = time.monotonic()
    timings = {}
    try:
        for step in (attack.auth, attack.bad_registrations, attack.bad_places,
                     attack.cross_tenant, attack.cuda_handles, attack.long_strings, attack.quotas, attack.truncation,
                     attack.races, attack.end_state):
            if args.only and step.__name__ not in args.only.split(","):
                continue
            t = time.monotonic()
            try:
                step()
            except Exception as e:  # noqa: BLE001 - a step that breaks is a FAIL, the rest go on
                attack.c.record(f"{step.__name__} ran to its end", "no exception",
                                type(e).__name__, False, str(e)[:300])
                attack.unregister_all()
            timings[step.__name__] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        if args.only and "startup_checks" not in args.only.split(","):
            pass
        elif args.server_binary and not args.target:
            startup_checks(attack.c, args.server_binary, args.backend, tmp.name)
        else:
            attack.c.section = "start-up"
            attack.c.skip("tokens files, --shared_memory=false, other uids",
                          "needs a server of its own (--server-binary)")
        timings["startup_checks"] = round(time.monotonic() - t, 1)
    finally:
        attack.close()
        channel.close()
    c = attack.c
    exit_code = server.stop() if server else None
    if server is not None:
        c.section = "end"
        c.record("the server exits cleanly on SIGTERM", "exit 0", f"exit {exit_code}",
                 exit_code == 0, server.output()[-300:] if exit_code else "")
    tmp.cleanup()

    width = max(len(r[1]) for r in c.rows)
    print(f"{'section':<13} {'check':<{width}} {'expected':<28} {'got':<20} verdict")
    for section, check, expected, got, verdict, details in c.rows:
        print(f"{section:<13} {check:<{width}} {expected:<28} {got:<20} {verdict}")
        if verdict == "FAIL" and details:
            print(f"{'':<13}   {details}")
    fails = sum(r[4] == "FAIL" for r in c.rows)
    passes = sum(r[4] == "PASS" for r in c.rows)
    skips = sum(r[4] == "SKIP" for r in c.rows)
    print(f"\nattack-shm: {passes} passed, {fails} failed, {skips} skipped in "
          f"{time.monotonic() - start:.1f} s against {target} ({args.backend})")
    print("seconds per part:", ", ".join(f"{k} {v}" for k, v in timings.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": target, "backend": args.backend, "passed": passes,
                       "failed": fails, "skipped": skips, "seconds": timings,
                       "checks": [dict(zip(("section", "check", "expected", "got", "verdict",
                                            "details"), r)) for r in c.rows]}, f, indent=1)
    print("attack-shm: PASS" if fails == 0 else "attack-shm: FAIL")
    return 0 if fails == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
