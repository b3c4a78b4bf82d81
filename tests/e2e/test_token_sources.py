"""Bearer-token sources on the real server: a Kubernetes-Secret-style tokens file (comments, blank
lines, one token per line) and the same text in $MATSERVE_AUTH_TOKENS both work; a source that is
configured but empty, only comments, or unreadable stops the server at start with a message that
names it, instead of serving without authentication; so do both sources at once, and two tokens
with one name (the name owns a token's matrices and regions). A file that starts with a UTF-8
byte-order mark works as one without."""
import os
import subprocess
import tempfile
import unittest

import grpc
import numpy as np

from matserve.v1 import matrix_service_pb2 as pb
from server_process import ServerProcess, matrix

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
SECRET = f"# matserve tokens, one per line\n\n{ALICE} alice\n  # rotated 2026-11\n\n{BOB} bob\n"


def multiply_as(server, token):
    a = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    metadata = [("authorization", f"Bearer {token}")] if token else None
    return server.stub.Multiply(pb.MultiplyRequest(a=matrix(a), b=matrix(a.T.copy())),
                                metadata=metadata, timeout=60)


def start_fails(*args, env=None):
    """Runs the server expecting it to refuse to start; returns (exit code, stderr)."""
    binary = os.environ.get("MATSERVE_SERVER", "matserve")
    environ = {k: v for k, v in os.environ.items() if k != "MATSERVE_AUTH_TOKENS"}
    environ.update(env or {})
    r = subprocess.run([binary, "--listen=127.0.0.1:0", "--metrics_listen=", "--backend=cpu",
                        *args], capture_output=True, text=True, timeout=120, env=environ)
    return r.returncode, r.stderr


class TokenSourcesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def check_tokens_work(self, server):
        self.assertIn("2 bearer tokens", server.output())
        for token in (ALICE, BOB):
            self.assertEqual(multiply_as(server, token).c.rows, 2)
        for token in (None, "#" * 20, "matserve tokens, one per line"):
            with self.assertRaises(grpc.RpcError) as ctx:
                multiply_as(server, token)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_secret_mounted_as_a_file(self):
        path = self.write("tokens", SECRET)
        with ServerProcess(f"--auth_tokens_file={path}") as server:
            self.check_tokens_work(server)

    def test_secret_in_the_environment(self):
        with ServerProcess(env={"MATSERVE_AUTH_TOKENS": SECRET}) as server:
            self.check_tokens_work(server)

    def test_semicolons_in_the_environment(self):
        with ServerProcess(env={"MATSERVE_AUTH_TOKENS": f"{ALICE} alice;{BOB} bob"}) as server:
            self.check_tokens_work(server)

    def test_a_source_with_no_token_refuses_to_start(self):
        for text in ("", "\n\n", "# only a comment\n", f"# {ALICE} alice\n"):
            path = self.write("tokens", text)
            code, err = start_fails(f"--auth_tokens_file={path}")
            self.assertNotEqual(code, 0, repr(text))
            self.assertIn(f"auth_tokens_file {path}: holds no token", err)
            code, err = start_fails(env={"MATSERVE_AUTH_TOKENS": text})
            self.assertNotEqual(code, 0, repr(text))
            self.assertIn("$MATSERVE_AUTH_TOKENS: holds no token", err)

    def test_an_unreadable_file_refuses_to_start(self):
        path = os.path.join(self.dir.name, "missing")
        code, err = start_fails(f"--auth_tokens_file={path}")
        self.assertNotEqual(code, 0)
        self.assertIn(f"auth_tokens_file: cannot read {path}", err)

    def test_a_malformed_entry_refuses_to_start(self):
        path = self.write("tokens", f"{ALICE} alice\nshort bob\n")
        code, err = start_fails(f"--auth_tokens_file={path}")
        self.assertNotEqual(code, 0)
        self.assertIn(f"auth_tokens_file {path}, line 2: expected", err)

    def test_both_sources_refuse_to_start(self):
        path = self.write("tokens", SECRET)
        code, err = start_fails(f"--auth_tokens_file={path}", env={"MATSERVE_AUTH_TOKENS": SECRET})
        self.assertNotEqual(code, 0)
        self.assertIn("both --auth_tokens_file and $MATSERVE_AUTH_TOKENS are set", err)

    def test_cli_token_file_skips_comments_and_blank_lines(self):
        cli = os.environ.get("MATSERVE_CLI")
        if not cli:
            self.skipTest("matserve-cli not built")
        path = self.write("tokens", SECRET)
        client_token = self.write("client-token", f"# alice's token\n\n{ALICE}\n")
        with ServerProcess(f"--auth_tokens_file={path}") as server:
            r = subprocess.run([cli, "--target", server.target, "--token-file", client_token,
                                "multiply", "--random", "3x4x5"], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)


class TokenNamesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_two_tokens_with_one_name_stop_the_server(self):
        # The second 'alice' (only info,compute) would otherwise be the first one's owner: her
        # resident matrices and shared-memory regions.
        path = os.path.join(self.dir.name, "tokens")
        with open(path, "w") as f:
            f.write(f"{ALICE} alice\n# spare\n{BOB} alice info,compute\n")
        code, err = start_fails(f"--auth_tokens_file={path}")
        self.assertNotEqual(code, 0)
        self.assertIn(f"auth_tokens_file {path}, line 3: the name 'alice' is given to another "
                      "token already (line 1)", err)

    def test_a_byte_order_mark_is_not_part_of_the_first_token(self):
        path = os.path.join(self.dir.name, "tokens")
        with open(path, "w", encoding="utf-8-sig") as f:  # writes the mark first
            f.write(f"{ALICE} alice\n{BOB} bob\n")
        with open(path, "rb") as f:
            self.assertEqual(f.read(3), b"\xef\xbb\xbf")
        with ServerProcess(f"--auth_tokens_file={path}") as server:
            self.assertIn("2 bearer tokens", server.output())
            for token in (ALICE, BOB):
                self.assertEqual(multiply_as(server, token).c.rows, 2)
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
