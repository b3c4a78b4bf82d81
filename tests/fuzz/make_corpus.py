#!/usr/bin/python3
"""Writes the fuzz seed corpus (tests/fuzz/corpus): valid and invalid MultiplyRequest,
TransposeRequest and UploadChunk messages, each prefixed by the selector byte the fuzz target
reads (0 multiply, 1 transpose, 2 upload header), and service sessions (selector 3; the format is
described in service_session.h): streams, resident matrices, owners, quotas; sessions with
shared memory (selector 4, service_shm.h): regions registered, used, shrunk, unregistered, by
their owner and by others, and every cap. Rerun after a proto change:
  PYTHONPATH=<build>/python /usr/bin/python3 tests/fuzz/make_corpus.py
"""
import os
import struct

from matserve.v1 import matrix_service_pb2 as pb

HANDLE = "00112233445566778899aabbccddeeff"  # the fuzz target's one known handle
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
SIZE = {pb.FP64: 8, pb.FP32: 4, pb.FP16: 2, pb.BF16: 2}


def mat(rows, cols, dtype=pb.FP32, layout=pb.ROW_MAJOR, nbytes=None, fill=b"\x3f"):
    n = rows * cols * SIZE.get(dtype, 4) if nbytes is None else nbytes
    return pb.Matrix(rows=rows, cols=cols, dtype=dtype, layout=layout, data=fill * max(n, 0))


# Service sessions: callers (the op byte's high nibble) and RPCs (its low nibble).
ALICE, BOB, CAROL, NOBODY = 0, 10, 13, 15
RPC = {"multiply": 0, "transpose": 1, "upload": 2, "upload_stream": 3, "download": 4,
       "download_stream": 5, "release": 6, "list": 7, "info": 8, "kernels": 9,
       "upload_stream_grpc": 14, "download_stream_grpc": 15,
       # sessions with shared memory (selector 4) only:
       "register": 10, "unregister": 11, "list_shm": 12, "resize": 13}


def call(rpc, msg=b"", who=ALICE):
    payload = msg if isinstance(msg, bytes) else msg.SerializeToString()
    return bytes([who << 4 | RPC[rpc]]) + struct.pack("<H", len(payload)) + payload


def stream(*chunks):
    return b"".join(struct.pack("<H", len(c.SerializeToString())) + c.SerializeToString()
                    for c in chunks)


def ref(i):
    """A one-byte handle: the session's i-th handle."""
    return chr(i)


def header(rows, cols, dtype=pb.FP32, layout=pb.ROW_MAJOR):
    return pb.Matrix(rows=rows, cols=cols, dtype=dtype, layout=layout)


def up(rows, cols, dtype=pb.FP32, who=ALICE, **kw):
    return call("upload", pb.UploadRequest(matrix=mat(rows, cols, dtype, fill=b"\x11"), **kw), who)


def reg(name, obj=0, size=65536, offset=0, who=ALICE, key=None):
    """RegisterSharedMemory of the session's object `obj` (a one-byte key), or of `key`."""
    return call("register", pb.RegisterSharedMemoryRequest(
        name=name, key=chr(obj) if key is None else key, offset=offset, byte_size=size), who)


def shm(rows, cols, region, offset=0, dtype=pb.FP32):
    return pb.Matrix(rows=rows, cols=cols, dtype=dtype,
                     shm=pb.SharedMemoryRef(region=region, offset=offset))


def out(region, offset=0):
    return pb.SharedMemoryRef(region=region, offset=offset)


def resize(obj, units):
    """The session's object `obj` set to units * 256 bytes behind the server's back."""
    return call("resize", bytes([obj]) + struct.pack("<H", units))


def shm_sessions():
    unreg = lambda name="", who=ALICE: call(  # noqa: E731
        "unregister", pb.UnregisterSharedMemoryRequest(name=name), who)
    return {
        "basic": [
            reg("r"), call("list_shm"),
            call("multiply", pb.MultiplyRequest(a=shm(8, 8, chr(0)), b=mat(8, 8),
                                                output_shm=out(chr(0), 4096))),
            call("multiply", pb.MultiplyRequest(a=shm(8, 8, chr(0)), b=shm(8, 8, chr(0), 256),
                                                c=shm(8, 8, chr(0), 512), beta=1.0)),
            call("transpose", pb.TransposeRequest(a=shm(64, 64, chr(0)),
                                                  output_shm=out(chr(0), 16384))),
            call("transpose", pb.TransposeRequest(a=mat(4, 4), output_shm=out(chr(0), 32768),
                                                  scale=2.0)),
            unreg(chr(0)), call("list_shm"), unreg(chr(0))],
        "owners": [
            reg("a"), call("multiply", pb.MultiplyRequest(a=shm(2, 2, chr(0)), b=mat(2, 2)), BOB),
            call("list_shm", b"", BOB), unreg(chr(0), BOB), reg("a", who=BOB),
            reg("c", who=CAROL), call("list_shm", b"", NOBODY), reg("n", who=NOBODY),
            call("multiply", pb.MultiplyRequest(a=shm(2, 2, chr(0)), b=mat(2, 2)), CAROL),
            unreg("", BOB), call("list_shm"), call("list_shm", b"", BOB)],
        "caps": [reg(f"r{i}", obj=i % 3, size=16384) for i in range(5)] + [
            unreg()] + [reg("big0", obj=0), reg("big1", obj=1, size=32768), reg("big2", obj=1),
                        reg("big3", obj=1, who=BOB), reg("big4", obj=2, size=32768, who=BOB),
                        call("list_shm"), call("list_shm", b"", BOB)],
        "bad": [reg("k", key="/etc"), reg("k", key=""), reg("k", key="/matserve-fuzz-absent"),
                reg("a b"), reg(""), reg("x" * 200), reg("o", offset=-1), reg("s", size=31),
                reg("s", size=65537), reg("s", size=32, offset=65535), reg("d"), reg("d"),
                call("multiply", pb.MultiplyRequest(a=shm(8, 8, "none"), b=mat(8, 8))),
                call("multiply", pb.MultiplyRequest(a=shm(8, 8, chr(0), -1), b=mat(8, 8))),
                call("multiply", pb.MultiplyRequest(a=shm(64, 64, chr(0), 65000), b=mat(64, 1))),
                call("multiply", pb.MultiplyRequest(a=mat(2, 2), b=mat(2, 2), keep_result=True,
                                                    output_shm=out(chr(0))))],
        "truncate": [
            reg("t", obj=1),
            resize(1, 16),
            call("multiply", pb.MultiplyRequest(a=shm(64, 64, chr(0)), b=mat(64, 1))),
            call("transpose", pb.TransposeRequest(a=mat(4, 4), output_shm=out(chr(0), 8192))),
            resize(1, 256),
            call("multiply", pb.MultiplyRequest(a=shm(64, 64, chr(0)), b=mat(64, 1))),
            unreg(chr(0)), resize(1, 0), reg("t", obj=1), resize(1, 256), reg("t", obj=1),
            call("transpose", pb.TransposeRequest(a=shm(8, 8, chr(0)), output_shm=out(chr(0), 256)))],
        "overlap": [
            reg("x", obj=2), reg("y", obj=2, offset=4096, size=8192),
            call("multiply", pb.MultiplyRequest(a=shm(8, 8, "x", 4096), b=mat(8, 8),
                                                output_shm=out("y", 0))),
            call("multiply", pb.MultiplyRequest(a=shm(8, 8, "x", 4096), b=mat(8, 8),
                                                output_shm=out("y", 4096))),
            call("transpose", pb.TransposeRequest(a=shm(8, 8, "y"), output_shm=out("x", 4096)))],
        "resident_and_shm": [
            reg("m"), up(8, 8),
            call("multiply", pb.MultiplyRequest(a_handle=ref(0), b=shm(8, 8, chr(0)),
                                                output_shm=out(chr(0), 1024))),
            call("multiply", pb.MultiplyRequest(a=shm(8, 8, chr(0)), b_handle=ref(0),
                                                keep_result=True)),
            call("transpose", pb.TransposeRequest(a_handle=ref(1), output_shm=out(chr(0), 2048))),
            call("release", pb.ReleaseRequest(handle=ref(0)))],
    }


def sessions():
    chunk = pb.UploadChunk
    return {
        "upload_download": [
            up(4, 4), call("download", pb.DownloadRequest(handle=ref(0))),
            call("download_stream", pb.DownloadRequest(handle=ref(0), chunk_bytes=4096)),
            call("list"), call("release", pb.ReleaseRequest(handle=ref(0))),
            call("release", pb.ReleaseRequest(handle=ref(0))),
            call("download", pb.DownloadRequest(handle=ref(0)))],
        "stream_big": [
            call("upload_stream", stream(chunk(header=header(64, 48)), chunk(data=b"\x01" * 4096),
                                         chunk(data=b"\x02" * 4096), chunk(data=b"\x03" * 4096))),
            call("download", pb.DownloadRequest(handle=ref(0))),
            call("download_stream", pb.DownloadRequest(handle=ref(0), chunk_bytes=5000)),
            call("download_stream", pb.DownloadRequest(handle=ref(0))),
            call("download_stream", pb.DownloadRequest(handle=ref(0), chunk_bytes=100))],
        "stream_bad": [
            call("upload_stream", stream(chunk(header=header(2, 2)), chunk(data=b"\x01" * 15))),
            call("upload_stream", stream(chunk(header=header(2, 2)), chunk(data=b"\x01" * 17))),
            call("upload_stream", stream(chunk(header=mat(2, 2)))),
            call("upload_stream", stream(chunk(header=header(2, 2)), chunk(header=header(2, 2)))),
            call("upload_stream", stream(chunk(header=header(1, 2, pb.FP64), data=b"\x00" * 16),
                                         chunk(colocate_with="x"))),
            call("upload_stream", b""),
            call("upload_stream", stream(chunk(data=b"\x00" * 16))),
            call("upload_stream", stream(chunk(header=header(99, 2)))),
            call("upload_stream", stream(chunk(header=header(2, 2), colocate_with="nope")))],
        "resident_ops": [
            up(8, 4), up(4, 8),
            call("multiply", pb.MultiplyRequest(a_handle=ref(0), b_handle=ref(1), keep_result=True)),
            call("multiply", pb.MultiplyRequest(a_handle=ref(0), b_handle=ref(1), c_handle=ref(2),
                                                beta=1.0, verify=True)),
            call("transpose", pb.TransposeRequest(a_handle=ref(0), in_place=True, verify=True)),
            call("transpose", pb.TransposeRequest(a_handle=ref(1), keep_result=True, scale=2.0)),
            call("multiply", pb.MultiplyRequest(a_handle=ref(0), b=mat(4, 3), transpose_a=True,
                                                keep_result=True, output_dtype=pb.FP32)),
            call("download", pb.DownloadRequest(handle=ref(0))), call("list"),
            call("release", pb.ReleaseRequest(handle=ref(2))),
            call("multiply", pb.MultiplyRequest(a_handle=ref(0), b_handle=ref(2)))],
        "owners": [
            up(4, 4), call("download", pb.DownloadRequest(handle=ref(0)), BOB),
            call("release", pb.ReleaseRequest(handle=ref(0)), BOB),
            call("multiply", pb.MultiplyRequest(a_handle=ref(0), b=mat(4, 2)), CAROL),
            call("multiply", pb.MultiplyRequest(a=mat(2, 4), b=mat(4, 2)), CAROL),
            call("multiply", pb.MultiplyRequest(a=mat(2, 4), b=mat(4, 2), keep_result=True), CAROL),
            call("list", b"", NOBODY), call("upload", pb.UploadRequest(matrix=mat(2, 2)), NOBODY),
            up(2, 2, who=BOB), call("list", b"", BOB),
            call("transpose", pb.TransposeRequest(a_handle=ref(0), in_place=True), BOB),
            call("multiply", pb.MultiplyRequest(a_handle=ref(1), b_handle=ref(0))),
            call("info"), call("kernels", b"", CAROL), call("info", b"", NOBODY)],
        "quota": [up(32, 64) for _ in range(6)] + [up(32, 64, who=BOB) for _ in range(4)] + [
            call("multiply", pb.MultiplyRequest(a=mat(64, 1), b=mat(1, 64), keep_result=True,
                                                ), BOB),
            call("release", pb.ReleaseRequest(handle=ref(0))), up(32, 64, who=BOB)],
        "grpc_streams": [
            call("upload_stream_grpc", stream(chunk(header=header(64, 64)),
                                              *[chunk(data=b"\x05" * 4096) for _ in range(4)])),
            call("download_stream_grpc", pb.DownloadRequest(handle=ref(0), chunk_bytes=6144)),
            call("download_stream_grpc", pb.DownloadRequest(handle=ref(0), chunk_bytes=6145)),
            # A chunk larger than a message after all the bytes: gRPC ends the stream.
            call("upload_stream", stream(chunk(header=header(16, 64)), chunk(data=b"\x06" * 4096),
                                         chunk(data=b"\x07" * 13000))),
            call("upload_stream_grpc", stream(chunk(header=header(2, 2)))),
            call("download_stream_grpc", pb.DownloadRequest(handle="unknown"), BOB)],
        "colocate": [
            up(3, 3, pb.FP64),
            call("upload", pb.UploadRequest(matrix=mat(3, 3, pb.FP64), colocate_with=ref(0))),
            call("upload_stream", stream(chunk(header=header(1, 1, pb.BF16), colocate_with=ref(1)),
                                         chunk(data=b"\x80\x3f"))),
            call("upload", pb.UploadRequest(matrix=mat(3, 3), colocate_with=ref(0)), BOB),
            call("multiply", pb.MultiplyRequest(a_handle=ref(2), b_handle=ref(2), c_handle=ref(2),
                                                beta=0.5, keep_result=True))],
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    mul = {
        "mul_ok_f32": pb.MultiplyRequest(a=mat(3, 5), b=mat(5, 2)),
        "mul_ok_f64_trans": pb.MultiplyRequest(a=mat(5, 3, pb.FP64), b=mat(2, 5, pb.FP64),
                                               transpose_a=True, transpose_b=True),
        "mul_ok_f16_c": pb.MultiplyRequest(a=mat(4, 4, pb.FP16), b=mat(4, 4, pb.FP16),
                                           c=mat(4, 4, pb.FP16), alpha=2.0, beta=0.5),
        "mul_ok_bf16_out_f32": pb.MultiplyRequest(a=mat(2, 3, pb.BF16), b=mat(3, 2, pb.BF16),
                                                  output_dtype=pb.FP32, compute=pb.COMPUTE_BF16),
        "mul_ok_tf32_colmajor": pb.MultiplyRequest(a=mat(3, 3, layout=pb.COL_MAJOR), b=mat(3, 3),
                                                   compute=pb.COMPUTE_TF32,
                                                   output_layout=pb.COL_MAJOR),
        "mul_ok_handles": pb.MultiplyRequest(a_handle=HANDLE, b_handle=HANDLE, transpose_b=True),
        "mul_ok_handle_inline": pb.MultiplyRequest(a_handle=HANDLE, b=mat(8, 4), keep_result=True),
        "mul_bad_short": pb.MultiplyRequest(a=mat(3, 5, nbytes=59), b=mat(5, 2)),
        "mul_bad_dims": pb.MultiplyRequest(a=mat(3, 5), b=mat(4, 2)),
        "mul_bad_overflow": pb.MultiplyRequest(
            a=pb.Matrix(rows=1 << 62, cols=1 << 62, dtype=pb.FP32), b=mat(1, 1)),
        "mul_bad_negative": pb.MultiplyRequest(a=pb.Matrix(rows=-4, cols=2, dtype=pb.FP32),
                                               b=mat(2, 2)),
        "mul_bad_nan_alpha": pb.MultiplyRequest(a=mat(2, 2), b=mat(2, 2), alpha=float("nan")),
        "mul_bad_inf_beta": pb.MultiplyRequest(a=mat(2, 2), b=mat(2, 2), beta=float("inf")),
        "mul_bad_enum": pb.MultiplyRequest(a=mat(2, 2, dtype=77), b=mat(2, 2)),
        "mul_bad_compute": pb.MultiplyRequest(a=mat(2, 2), b=mat(2, 2), compute=99),
        "mul_bad_unknown_handle": pb.MultiplyRequest(a_handle="ff" * 16, b=mat(2, 2)),
        "mul_bad_both": pb.MultiplyRequest(a=mat(2, 2), a_handle=HANDLE, b=mat(2, 2)),
        "mul_bad_c_shape": pb.MultiplyRequest(a=mat(2, 3), b=mat(3, 4), c=mat(4, 2)),
        "mul_bad_dtype_mix": pb.MultiplyRequest(a=mat(2, 2), b=mat(2, 2, pb.FP64)),
        "mul_bad_huge_out": pb.MultiplyRequest(a=mat(4096, 1), b=mat(1, 4096)),
    }
    for k, v in mul.items():
        seeds[k] = b"\x00" + v.SerializeToString()
    tr = {
        "tr_ok": pb.TransposeRequest(a=mat(7, 3)),
        "tr_ok_scale_f64": pb.TransposeRequest(a=mat(3, 7, pb.FP64), scale=-1.5, verify=True),
        "tr_ok_inplace": pb.TransposeRequest(a_handle=HANDLE, in_place=True),
        "tr_ok_keep": pb.TransposeRequest(a_handle=HANDLE, keep_result=True),
        "tr_bad_inplace_inline": pb.TransposeRequest(a=mat(2, 2), in_place=True),
        "tr_bad_scale_nan": pb.TransposeRequest(a=mat(2, 2), scale=float("nan")),
        "tr_bad_long": pb.TransposeRequest(a=mat(2, 2, nbytes=17)),
        "tr_bad_layout": pb.TransposeRequest(a=mat(2, 2, layout=5)),
    }
    for k, v in tr.items():
        seeds[k] = b"\x01" + v.SerializeToString()
    up = {
        "up_ok_header": pb.UploadChunk(header=pb.Matrix(rows=64, cols=32, dtype=pb.FP32)),
        "up_ok_whole": pb.UploadChunk(header=mat(4, 4, pb.FP64)),
        "up_bad_zero": pb.UploadChunk(header=pb.Matrix(rows=0, cols=32, dtype=pb.FP32)),
        "up_bad_big": pb.UploadChunk(header=pb.Matrix(rows=4096, cols=4096, dtype=pb.FP64)),
        "up_bad_dtype": pb.UploadChunk(header=pb.Matrix(rows=2, cols=2)),
        "up_data": pb.UploadChunk(data=struct.pack("<4f", 1, 2, 3, 4)),
    }
    for k, v in up.items():
        seeds[k] = b"\x02" + v.SerializeToString()
    seeds["garbage"] = b"\x00\xff\xff\xff\xff\x0f"
    for k, v in sessions().items():
        seeds["svc_" + k] = b"\x03" + b"".join(v)
    for k, v in shm_sessions().items():
        seeds["shm_" + k] = b"\x04" + b"".join(v)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"make_corpus: {len(seeds)} seeds in {OUT}")


if __name__ == "__main__":
    main()
