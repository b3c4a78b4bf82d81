"""Protocol Buffers wire-format varints, for the messages the client encodes and decodes by hand
(health checks; WriteRange requests and ReadRange replies, which carry bulk bytes without a
protobuf copy)."""
from typing import Tuple


def varint(n: int) -> bytes:
    """The base-128 varint of a non-negative integer."""
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(buf, pos: int) -> Tuple[int, int]:
    """The varint at buf[pos:] (bytes or memoryview) and the position after it; ValueError when
    the buffer ends inside it."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
