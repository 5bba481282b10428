"""A fault-injecting HTTP/1.1 proxy on loopback, between clients and an object store's S3 endpoint.

It forwards each request and each response unchanged (keep-alive, bodies by ``Content-Length`` or chunked) until a
rule is armed: :meth:`FaultProxy.lose_responses` makes the next ``count`` requests whose method and path match
reach the store (it applies them) while their answers never reach the client, whose connection is closed instead,
as when a store or a network loses the answer to a PUT it applied. Each rule counts how often it fired.

Used by the chaos harness (``store_lost_response``) and the tests: :class:`FaultProxy` starts the proxy as a process
of its own (listening on 127.0.0.1 only) and arms its rules over a control connection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

_MAX_HEADER = 64 * 1024


@dataclass
class _Rule:
    """An armed rule: lose the answers of the next ``remaining`` requests matching ``method`` and ``path``."""

    method: str
    path: re.Pattern[str]
    remaining: int
    fired: int = 0
    paths: list[str] | None = None
    """The request paths whose answers were lost, in order."""


class _ProxyServer:
    """The proxy itself: threads in the proxy's own process (:func:`main`), listening on ``127.0.0.1:<port>`` and
    forwarding to ``upstream_host:upstream_port``. It runs apart from every client because some clients (delta-rs's
    file system handler) hold Python's GIL while they wait for an answer."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._closed = threading.Event()
        self._connections: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()

    def arm(self, method: str, path: str, count: int) -> _Rule:
        rule = _Rule(method.upper(), re.compile(path), count, paths=[])
        with self._lock:
            self._rules.append(rule)
        return rule

    def disarm(self, rule: _Rule) -> None:
        with self._lock:
            rule.remaining = 0
            if rule in self._rules:
                self._rules.remove(rule)

    # -- internals ---------------------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), name="fault-proxy-conn", daemon=True).start()

    def _claim(self, method: str, path: str) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.remaining > 0 and rule.method == method and rule.path.search(path.split("?", 1)[0]):
                    rule.remaining -= 1
                    rule.fired += 1
                    assert rule.paths is not None
                    rule.paths.append(path)
                    if rule.remaining == 0:
                        self._rules.remove(rule)
                    return rule
        return None

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        upstream_in: BinaryIO | None = None
        with self._lock:
            self._connections.add(client)
        try:
            client_in = client.makefile("rb")
            while not self._closed.is_set():
                head = _read_head(client_in)
                if head is None:
                    return
                method, path = _request_line(head)
                if upstream is None or upstream_in is None:
                    upstream = socket.create_connection(self.upstream, timeout=300)
                    with self._lock:
                        self._connections.add(upstream)
                    upstream_in = upstream.makefile("rb")
                upstream.sendall(_without_expect(head))
                _copy_body(client_in, upstream, head)
                response = _read_head(upstream_in)
                if response is None:
                    return
                rule = self._claim(method, path)
                if rule is not None:
                    _copy_body(upstream_in, None, response, head_request=method == "HEAD")
                    log.info("fault proxy: lost the answer to %s %s (%s)", method, path, response.split(b"\r\n")[0])
                    return  # the store applied it; the client sees its connection close
                client.sendall(response)
                _copy_body(upstream_in, client, response, head_request=method == "HEAD")
                if b"connection: close" in response.lower():
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._connections.discard(client)
                if upstream is not None:
                    self._connections.discard(upstream)
            _close(client)
            if upstream is not None:
                _close(upstream)


def _close(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


def _read_head(stream: BinaryIO) -> bytes | None:
    """The start line and headers up to the blank line, or None at the end of the stream."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = stream.readline(_MAX_HEADER)
        if not line:
            return None if not lines else b"".join(lines)
        lines.append(line)
        size += len(line)
        if line in (b"\r\n", b"\n") and len(lines) > 1:
            return b"".join(lines)
        if line in (b"\r\n", b"\n"):
            lines.clear()  # stray blank line between messages
        if size > _MAX_HEADER:
            raise OSError("HTTP header too large")


def _request_line(head: bytes) -> tuple[str, str]:
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    return (parts[0].upper(), parts[1]) if len(parts) >= 2 else ("", "")


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def _without_expect(head: bytes) -> bytes:
    """The request head without ``Expect: 100-continue`` (the proxy sends the body at once)."""
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"expect:")]
    return b"\r\n".join(lines)


def _copy_body(source: BinaryIO, sink: socket.socket | None, head: bytes, *, head_request: bool = False) -> None:
    """Copy the body that follows ``head`` from ``source`` to ``sink`` (or drop it)."""
    status = head.split(b" ", 2)[1] if head.startswith(b"HTTP/") else b""
    if head_request or status in (b"204", b"304") or status.startswith(b"1"):
        return
    length = _header(head, b"content-length")
    if length is not None:
        remaining = int(length)
        while remaining > 0:
            chunk = source.read(min(remaining, 1 << 16))
            if not chunk:
                raise OSError("connection closed in a body")
            remaining -= len(chunk)
            if sink is not None:
                sink.sendall(chunk)
        return
    if (_header(head, b"transfer-encoding") or b"").lower() == b"chunked":
        while True:
            size_line = source.readline(_MAX_HEADER)
            if sink is not None:
                sink.sendall(size_line)
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = source.readline(_MAX_HEADER)
                    if sink is not None:
                        sink.sendall(trailer)
                    if trailer in (b"\r\n", b"\n", b""):
                        return
            data = source.read(size + 2)
            if sink is not None:
                sink.sendall(data)
        return
    if head.startswith(b"HTTP/"):  # a response without a length: until the store closes
        while chunk := source.read(1 << 16):
            if sink is not None:
                sink.sendall(chunk)


class LostResponses:
    """A rule armed in a :class:`FaultProxy` (harness or test side): how often it fired, on which paths."""

    def __init__(self, proxy: FaultProxy, rule_id: int) -> None:
        self._proxy = proxy
        self.rule_id = rule_id

    def _status(self) -> dict[str, Any]:
        return dict(json.loads(self._proxy._ask(f"STATUS {self.rule_id}")))

    @property
    def fired(self) -> int:
        return int(self._status()["fired"])

    @property
    def remaining(self) -> int:
        return int(self._status()["remaining"])

    @property
    def paths(self) -> list[str]:
        return list(self._status()["paths"])


class FaultProxy:
    """A fault proxy in its own process, in front of ``upstream_host:upstream_port`` (the store's S3 port).

    Runs in the harness or test process; the proxy process listens on 127.0.0.1 only and ends with it.

    Raises:
        OSError: the proxy process did not start.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "sparkonce.services.faultproxy", upstream_host, str(upstream_port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if len(line) != 3 or line[0] != "PORTS":
            self._proc.kill()
            raise OSError(f"the fault proxy did not start: {line}")
        self.port = int(line[1])
        self._control = socket.create_connection(("127.0.0.1", int(line[2])), timeout=30)
        self._control_in = self._control.makefile("r", encoding="utf-8")
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        """The proxy's URL, to give clients instead of the store's (``AWS_ENDPOINT_URL``)."""
        return f"http://127.0.0.1:{self.port}"

    def lose_responses(self, method: str, path: str, count: int = 1) -> LostResponses:
        """Arm a rule: the next ``count`` requests with ``method`` whose path matches the regex ``path`` reach the
        store, and their answers are dropped (the client's connection is closed)."""
        re.compile(path)  # a bad pattern fails here, not in the proxy
        return LostResponses(self, int(self._ask(f"LOSE {method.upper()} {count} {path}")))

    def disarm(self, rule: LostResponses) -> None:
        """Stop ``rule`` (what it already did stays done)."""
        self._ask(f"DISARM {rule.rule_id}")

    def _ask(self, command: str) -> str:
        with self._lock:
            self._control.sendall((command + "\n").encode("utf-8"))
            answer = self._control_in.readline()
        if not answer:
            raise OSError("the fault proxy process ended")
        return answer.strip()

    def close(self) -> None:
        """Stop the proxy process (its connections close with it)."""
        with contextlib.suppress(OSError):
            self._control.close()
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    """The proxy process: ``python -m sparkonce.services.faultproxy UPSTREAM_HOST UPSTREAM_PORT``.

    Prints ``PORTS <proxy port> <control port>``, then serves one control connection (``LOSE <method> <count>
    <regex>``, ``STATUS <id>``, ``DISARM <id>``, one answer line each) until it closes or stdin ends.
    """
    server = _ProxyServer(sys.argv[1], int(sys.argv[2]))
    control = socket.create_server(("127.0.0.1", 0))
    print(f"PORTS {server.port} {control.getsockname()[1]}", flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()  # parent gone: end
    conn, _ = control.accept()
    rules: dict[int, _Rule] = {}
    with conn, conn.makefile("r", encoding="utf-8") as commands:
        for line in commands:
            word, _, rest = line.strip().partition(" ")
            if word == "LOSE":
                method, count, path = rest.split(" ", 2)
                rule_id = len(rules) + 1
                rules[rule_id] = server.arm(method, path, int(count))
                answer = str(rule_id)
            elif word == "STATUS":
                rule = rules[int(rest)]
                answer = json.dumps({"fired": rule.fired, "remaining": rule.remaining, "paths": rule.paths})
            elif word == "DISARM":
                server.disarm(rules[int(rest)])
                answer = "ok"
            else:
                answer = "error"
            conn.sendall((answer + "\n").encode("utf-8"))
    os._exit(0)


if __name__ == "__main__":
    main()


__all__ = ["FaultProxy", "LostResponses"]
