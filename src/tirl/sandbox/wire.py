"""Framing of the messages between the pool (host side) and its worker processes.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (one object). Both sides
are tirl's own code; the untrusted code never holds these pipes. This module has no I/O policy beyond
encoding, decoding and incremental parsing.
"""

from __future__ import annotations

import json
import struct

HEADER = struct.Struct(">I")
#: Largest frame accepted (a result with capped outputs is far smaller).
MAX_FRAME_BYTES = 256 * 1024 * 1024


def encode(message: dict) -> bytes:
    """One frame holding ``message`` (JSON-serialisable; lone surrogates are escaped by ``json``)."""
    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict:
    """The message of one frame body.

    Raises:
        ValueError: not a JSON object.
    """
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError("frame is not a JSON object")
    return message


class FrameBuffer:
    """Incremental parser: feed bytes, take complete messages."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        """Append ``data`` and return every complete message, in order.

        Raises:
            ValueError: a frame is larger than :data:`MAX_FRAME_BYTES` or not valid JSON.
        """
        self._buf += data
        out = []
        while len(self._buf) >= HEADER.size:
            (length,) = HEADER.unpack_from(self._buf)
            if length > MAX_FRAME_BYTES:
                raise ValueError(f"frame of {length} bytes exceeds the limit")
            if len(self._buf) < HEADER.size + length:
                break
            body = bytes(self._buf[HEADER.size : HEADER.size + length])
            del self._buf[: HEADER.size + length]
            out.append(decode_body(body))
        return out
