"""HTTP/1.1 message framing over blocking streams, as the fault proxy forwards messages: read a message head, look
at its start line and headers, copy its body (``Content-Length``, chunked with trailers, or up to the end of a
response), byte for byte.

A malformed or truncated message is an :class:`OSError` (the connection is then closed, as for a network error).
Runs in the fault proxy's process (:mod:`sparkonce_local.services.faultproxy`), never on Spark executors.
"""

from __future__ import annotations

import socket
from typing import BinaryIO

MAX_HEAD = 64 * 1024
"""The largest message head (start line and headers) read, in bytes."""
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
"""The interim answer to a request with ``Expect: 100-continue``."""


def read_head(stream: BinaryIO) -> bytes | None:
    """The start line and headers up to the blank line, or None at the end of the stream."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = stream.readline(MAX_HEAD)
        if not line:
            if lines:
                raise OSError("connection closed in a message head")
            return None
        size += len(line)
        if size > MAX_HEAD:
            raise OSError("HTTP header too large")
        if line in (b"\r\n", b"\n"):
            if lines:
                lines.append(line)
                return b"".join(lines)
            continue  # a stray blank line between messages
        lines.append(line)


def request_line(head: bytes) -> tuple[str, str]:
    """The method (in capitals) and the target of a request head; two empty strings when it has none."""
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    return (parts[0].upper(), parts[1]) if len(parts) >= 2 else ("", "")


def status_code(head: bytes) -> bytes:
    """The status code of a response head (``b"200"``); ``b""`` for a request head."""
    return head.split(b" ", 2)[1] if head.startswith(b"HTTP/") else b""


def header(head: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case) in ``head``, or None."""
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def without_header(head: bytes, name: bytes) -> bytes:
    """``head`` without the lines of header ``name`` (lower case)."""
    lines = head.split(b"\r\n")
    return b"\r\n".join([lines[0], *(line for line in lines[1:] if line.partition(b":")[0].strip().lower() != name)])


def wants_close(head: bytes) -> bool:
    """True when the message asks to close the connection after it (``Connection: close``)."""
    return (header(head, b"connection") or b"").lower() == b"close"


def copy_body(source: BinaryIO, sink: socket.socket | None, head: bytes, *, head_request: bool = False) -> None:
    """Copy the body that follows ``head`` (a request or a response) from ``source`` to ``sink`` (or drop it)."""
    status = status_code(head)
    if head_request or status in (b"204", b"304") or status.startswith(b"1"):
        return
    if (header(head, b"transfer-encoding") or b"").lower().endswith(b"chunked"):
        while True:
            size_line = source.readline(MAX_HEAD)
            if not size_line:
                raise OSError("connection closed in a chunked body")
            if sink is not None:
                sink.sendall(size_line)
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = source.readline(MAX_HEAD)
                    if sink is not None:
                        sink.sendall(trailer)
                    if trailer in (b"\r\n", b"\n", b""):
                        return
            copy_exactly(source, sink, size + 2)
        return
    length = header(head, b"content-length")
    if length is not None:
        copy_exactly(source, sink, int(length))
    elif head.startswith(b"HTTP/"):  # a response without a length: until the store closes
        while chunk := source.read(1 << 16):
            if sink is not None:
                sink.sendall(chunk)


def copy_exactly(source: BinaryIO, sink: socket.socket | None, size: int) -> None:
    """Copy ``size`` bytes from ``source`` to ``sink`` (or drop them); OSError when the stream ends first."""
    while size > 0:
        chunk = source.read(min(size, 1 << 16))
        if not chunk:
            raise OSError("connection closed in a body")
        size -= len(chunk)
        if sink is not None:
            sink.sendall(chunk)


__all__ = [
    "CONTINUE",
    "MAX_HEAD",
    "copy_body",
    "copy_exactly",
    "header",
    "read_head",
    "request_line",
    "status_code",
    "wants_close",
    "without_header",
]
