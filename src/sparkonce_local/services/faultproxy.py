"""A fault-injecting HTTP/1.1 proxy on loopback, between clients and an object store's S3 endpoint.

It forwards each request and each response unchanged (keep-alive, bodies by ``Content-Length`` or chunked) until a
rule is armed. A rule matches the next ``count`` requests by method and a regex on the path (the query string left
out) and does one thing to each of them:

* ``lose_response`` (:meth:`ProxyControl.lose_responses`): the request reaches the store, which applies it; the
  proxy reads the store's whole answer and closes the client's connection instead of sending it (an end of stream,
  or with ``close="reset"`` a TCP reset), as when a store or a network loses the answer to a PUT it applied;
* ``answer`` (:meth:`ProxyControl.answer_errors`): the request never reaches the store; the proxy answers it with
  an S3 error (``503 SlowDown`` or ``500 InternalError``) and keeps the connection open.

Each rule counts how often it fired and on which paths; it ends after ``count`` firings or when disarmed. More
kinds (latency, a paused peer, resets of the request) fit the same shape: a kind, a match, a count.

The proxy is a process of its own (:class:`FaultProxy` starts it, listening on 127.0.0.1 only; it ends with its
parent), because some clients (delta-rs's file system handler) hold Python's GIL while they wait for an answer.
Rules are armed over its control port, one JSON object a line, from any process on the machine:
:class:`ProxyControl` connects to :attr:`FaultProxy.control_address` (for instance passed to a Spark driver under
test in its environment), and every connection sees the same rules::

    with FaultProxy(host, s3_port) as proxy:          # the test or the chaos harness
        options = {**store_options, "AWS_ENDPOINT_URL": proxy.endpoint}
        rule = proxy.lose_responses("PUT", r"_delta_log/\\d{20}\\.json$")
        ...                                           # a writer, in this process or another one
        assert rule.wait_fired(1, timeout=60) and rule.fired == 1

    ProxyControl(address).lose_responses("PUT", r"\\.json$", count=2)   # another process, same proxy
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal, cast

from sparkonce.errors import OptionError, SparkonceError

log = logging.getLogger(__name__)

RuleKind = Literal["lose_response", "answer"]
CloseHow = Literal["eof", "reset"]

ERROR_ANSWERS: dict[int, tuple[str, str, str]] = {
    503: ("Slow Down", "SlowDown", "Please reduce your request rate."),
    500: ("Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
}
"""The S3 errors an ``answer`` rule can send: status -> (reason, error code, message)."""

_MAX_HEADER = 64 * 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class FaultProxyError(SparkonceError):
    """The fault proxy process did not start, ended, or refused a control command."""


@dataclass
class _Rule:
    """An armed rule (in the proxy process)."""

    rule_id: int
    kind: RuleKind
    method: str
    """An HTTP method in capitals, or ``*`` for any."""
    path: re.Pattern[str]
    remaining: int
    status: int = 0
    """``answer``: the HTTP status sent."""
    close: CloseHow = "eof"
    """``lose_response``: how the client's connection ends."""
    fired: int = 0
    paths: list[str] = field(default_factory=list)
    """The request targets (path and query) it fired on, in order."""

    def matches(self, method: str, target: str) -> bool:
        return (
            self.remaining > 0
            and self.method in ("*", method)
            and self.path.search(target.split("?", 1)[0]) is not None
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule_id,
            "kind": self.kind,
            "method": self.method,
            "path": self.path.pattern,
            "fired": self.fired,
            "remaining": self.remaining,
            "paths": list(self.paths),
        }


class _ProxyServer:
    """The proxy itself: threads in the proxy's own process (:func:`main`), listening on ``127.0.0.1:<port>`` and
    forwarding to ``upstream_host:upstream_port``, one upstream connection per client connection."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._rules: dict[int, _Rule] = {}
        self._changed = threading.Condition()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    # -- rules (control commands) ----------------------------------------------------------------------------------

    def arm(self, command: dict[str, Any]) -> _Rule:
        """A new rule from an ``arm`` command. Raises ValueError, KeyError or re.error on a bad command."""
        kind = command["kind"]
        if kind not in ("lose_response", "answer"):
            raise ValueError(f"unknown rule kind {kind!r}")
        count = int(command.get("count", 1))
        status = int(command.get("status", 0))
        close = command.get("close", "eof")
        if count < 1:
            raise ValueError(f"count must be >= 1, not {count}")
        if kind == "answer" and status not in ERROR_ANSWERS:
            raise ValueError(f"status must be one of {sorted(ERROR_ANSWERS)}, not {status}")
        if close not in ("eof", "reset"):
            raise ValueError(f"close must be 'eof' or 'reset', not {close!r}")
        with self._changed:
            rule = _Rule(
                len(self._rules) + 1,
                kind,
                str(command.get("method", "*")).upper(),
                re.compile(str(command.get("path", ""))),
                count,
                status=status,
                close=close,
            )
            self._rules[rule.rule_id] = rule
        return rule

    def rule(self, rule_id: int) -> dict[str, Any]:
        with self._changed:
            return self._rules[rule_id].to_json()

    def rules(self) -> list[dict[str, Any]]:
        with self._changed:
            return [r.to_json() for r in self._rules.values()]

    def disarm(self, rule_id: int) -> dict[str, Any]:
        with self._changed:
            rule = self._rules[rule_id]
            rule.remaining = 0
            return rule.to_json()

    def wait(self, rule_id: int, fired: int, timeout: float) -> dict[str, Any]:
        """The rule once it fired ``fired`` times, or as it is after ``timeout`` seconds."""
        with self._changed:
            rule = self._rules[rule_id]
            self._changed.wait_for(lambda: rule.fired >= fired, timeout=max(0.0, timeout))
            return rule.to_json()

    def _claim(self, kind: RuleKind, method: str, target: str) -> _Rule | None:
        with self._changed:
            for rule in self._rules.values():
                if rule.kind == kind and rule.matches(method, target):
                    rule.remaining -= 1
                    rule.fired += 1
                    rule.paths.append(target)
                    self._changed.notify_all()
                    return rule
        return None

    # -- forwarding ------------------------------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), name="fault-proxy-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        upstream_in: BinaryIO | None = None
        reset = False
        try:
            client_in = client.makefile("rb")
            while True:
                head = _read_head(client_in)
                if head is None:
                    return
                method, target = _request_line(head)
                if _header(head, b"expect") is not None:  # the proxy takes the body at once, as it forwards it
                    client.sendall(_CONTINUE)
                    head = _without_header(head, b"expect")
                answer = self._claim("answer", method, target)
                if answer is not None:
                    _copy_body(client_in, None, head)
                    log.info("fault proxy: answered %s %s with %d", method, target, answer.status)
                    client.sendall(_error_answer(answer.status, target, head_request=method == "HEAD"))
                    if _wants_close(head):
                        return
                    continue
                if upstream is not None and _stale(upstream):
                    _close(upstream)  # the store closed the idle connection: a new one, as a client would
                    upstream = upstream_in = None
                if upstream is None or upstream_in is None:
                    upstream = socket.create_connection(self.upstream, timeout=300)
                    upstream_in = upstream.makefile("rb")
                upstream.sendall(head)
                _copy_body(client_in, upstream, head)
                response = _read_head(upstream_in)
                while response is not None and _status(response).startswith(b"1"):
                    response = _read_head(upstream_in)  # an interim answer (the proxy sent 100 itself)
                if response is None:
                    return
                lose = self._claim("lose_response", method, target)
                if lose is not None:
                    _copy_body(upstream_in, None, response, head_request=method == "HEAD")
                    log.info("fault proxy: lost the answer to %s %s (%s)", method, target, response.split(b"\r\n")[0])
                    reset = lose.close == "reset"
                    return  # the store applied it; the client sees its connection end
                client.sendall(response)
                _copy_body(upstream_in, client, response, head_request=method == "HEAD")
                if _wants_close(head) or _wants_close(response):
                    return
        except (OSError, ValueError):
            return
        finally:
            if reset:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
            else:
                _close(client)
            if upstream is not None:
                _close(upstream)


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    conn.close()


def _stale(conn: socket.socket) -> bool:
    """True when an idle upstream connection was closed by the store (or holds bytes nobody asked for)."""
    readable, _, _ = select.select([conn], [], [], 0)
    return bool(readable)


def _read_head(stream: BinaryIO) -> bytes | None:
    """The start line and headers up to the blank line, or None at the end of the stream."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = stream.readline(_MAX_HEADER)
        if not line:
            if lines:
                raise OSError("connection closed in a message head")
            return None
        size += len(line)
        if size > _MAX_HEADER:
            raise OSError("HTTP header too large")
        if line in (b"\r\n", b"\n"):
            if lines:
                lines.append(line)
                return b"".join(lines)
            continue  # a stray blank line between messages
        lines.append(line)


def _request_line(head: bytes) -> tuple[str, str]:
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    return (parts[0].upper(), parts[1]) if len(parts) >= 2 else ("", "")


def _status(head: bytes) -> bytes:
    return head.split(b" ", 2)[1] if head.startswith(b"HTTP/") else b""


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def _without_header(head: bytes, name: bytes) -> bytes:
    lines = head.split(b"\r\n")
    return b"\r\n".join([lines[0], *(line for line in lines[1:] if line.partition(b":")[0].strip().lower() != name)])


def _wants_close(head: bytes) -> bool:
    return (_header(head, b"connection") or b"").lower() == b"close"


def _copy_body(source: BinaryIO, sink: socket.socket | None, head: bytes, *, head_request: bool = False) -> None:
    """Copy the body that follows ``head`` (a request or a response) from ``source`` to ``sink`` (or drop it)."""
    status = _status(head)
    if head_request or status in (b"204", b"304") or status.startswith(b"1"):
        return
    if (_header(head, b"transfer-encoding") or b"").lower().endswith(b"chunked"):
        while True:
            size_line = source.readline(_MAX_HEADER)
            if not size_line:
                raise OSError("connection closed in a chunked body")
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
            _copy_exactly(source, sink, size + 2)
        return
    length = _header(head, b"content-length")
    if length is not None:
        _copy_exactly(source, sink, int(length))
    elif head.startswith(b"HTTP/"):  # a response without a length: until the store closes
        while chunk := source.read(1 << 16):
            if sink is not None:
                sink.sendall(chunk)


def _copy_exactly(source: BinaryIO, sink: socket.socket | None, size: int) -> None:
    while size > 0:
        chunk = source.read(min(size, 1 << 16))
        if not chunk:
            raise OSError("connection closed in a body")
        size -= len(chunk)
        if sink is not None:
            sink.sendall(chunk)


def _error_answer(status: int, target: str, *, head_request: bool) -> bytes:
    """An S3 error answer (as S3 words it), for an ``answer`` rule."""
    reason, code, message = ERROR_ANSWERS[status]
    request_id = uuid.uuid4().hex[:16].upper()
    resource = target.split("?", 1)[0].replace("&", "&amp;").replace("<", "&lt;")
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message><Resource>{resource}</Resource>"
        f"<RequestId>{request_id}</RequestId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
        f"x-amz-request-id: {request_id}\r\n\r\n"
    ).encode()
    return head if head_request else head + body


# -- the control side (any process) ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleStatus:
    """What an armed rule did so far."""

    rule_id: int
    kind: RuleKind
    method: str
    path: str
    fired: int
    remaining: int
    """Firings left (0 once it fired ``count`` times or was disarmed)."""
    paths: tuple[str, ...]
    """The request targets it fired on, in order."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RuleStatus:
        return cls(
            int(data["rule"]),
            cast(RuleKind, data["kind"]),
            str(data["method"]),
            str(data["path"]),
            int(data["fired"]),
            int(data["remaining"]),
            tuple(data["paths"]),
        )


class ArmedRule:
    """A rule armed in a fault proxy, seen from a control connection: each property asks the proxy afresh."""

    def __init__(self, control: ProxyControl, rule_id: int) -> None:
        self._control = control
        self.rule_id = rule_id

    def status(self) -> RuleStatus:
        return RuleStatus.from_json(self._control._ask({"op": "status", "rule": self.rule_id}))

    @property
    def fired(self) -> int:
        return self.status().fired

    @property
    def remaining(self) -> int:
        return self.status().remaining

    @property
    def paths(self) -> list[str]:
        return list(self.status().paths)

    def wait_fired(self, times: int = 1, *, timeout: float) -> bool:
        """Wait until the rule fired ``times`` times (True) or ``timeout`` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        while True:  # the proxy waits at most 10 s per question, so a stalled proxy is noticed
            left = deadline - time.monotonic()
            status = RuleStatus.from_json(
                self._control._ask({"op": "wait", "rule": self.rule_id, "fired": times, "timeout": min(left, 10.0)})
            )
            if status.fired >= times:
                return True
            if left <= 10.0:
                return False

    def __repr__(self) -> str:
        return f"ArmedRule({self.rule_id})"


class ProxyControl:
    """A control connection to a running fault proxy, from any process on the machine.

    Args:
        address: the proxy's :attr:`FaultProxy.control_address`, ``127.0.0.1:<port>``.

    Raises:
        FaultProxyError: nothing listens there.
    """

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        try:
            self._control = socket.create_connection((host or "127.0.0.1", int(port)), timeout=60)
        except (OSError, ValueError) as err:
            raise FaultProxyError(f"no fault proxy control port at {address!r}: {err}") from err
        self.control_address = address
        self._control_in = self._control.makefile("r", encoding="utf-8")
        self._lock = threading.Lock()

    def lose_responses(self, method: str, path: str, count: int = 1, *, close: CloseHow = "eof") -> ArmedRule:
        """Arm a rule: the next ``count`` requests with ``method`` (``*``: any) whose path matches the regex
        ``path`` reach the store, and their answers are dropped (the client's connection ends: ``eof`` or
        ``reset``)."""
        return self._arm({"kind": "lose_response", "method": method, "path": path, "count": count, "close": close})

    def answer_errors(self, method: str, path: str, status: int = 503, count: int = 1) -> ArmedRule:
        """Arm a rule: the next ``count`` requests with ``method`` (``*``: any) whose path matches ``path`` are
        answered by the proxy with an S3 error (:data:`ERROR_ANSWERS`: 503 SlowDown, 500 InternalError) and never
        reach the store."""
        if status not in ERROR_ANSWERS:
            raise OptionError("status", status, f"the proxy answers one of {sorted(ERROR_ANSWERS)}")
        return self._arm({"kind": "answer", "method": method, "path": path, "count": count, "status": status})

    def rule(self, rule_id: int) -> ArmedRule:
        """A rule armed by any connection (its id is :attr:`ArmedRule.rule_id`)."""
        self._ask({"op": "status", "rule": rule_id})
        return ArmedRule(self, rule_id)

    def rules(self) -> list[RuleStatus]:
        """Every rule armed in the proxy so far, by any connection, in arming order."""
        return [RuleStatus.from_json(r) for r in self._ask({"op": "rules"})["rules"]]

    def disarm(self, rule: ArmedRule) -> RuleStatus:
        """Stop ``rule`` (what it already did stays done); what it did."""
        return RuleStatus.from_json(self._ask({"op": "disarm", "rule": rule.rule_id}))

    def _arm(self, command: dict[str, Any]) -> ArmedRule:
        if int(command["count"]) < 1:
            raise OptionError("count", command["count"], "must be >= 1")
        try:
            re.compile(command["path"])
        except re.error as err:
            raise OptionError("path", command["path"], f"is not a regular expression: {err}") from err
        return ArmedRule(self, int(self._ask({"op": "arm", **command})["rule"]))

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            try:
                self._control.sendall((json.dumps(command) + "\n").encode("utf-8"))
                line = self._control_in.readline()
            except OSError as err:
                raise FaultProxyError(f"the fault proxy at {self.control_address} did not answer: {err}") from err
        if not line:
            raise FaultProxyError(f"the fault proxy at {self.control_address} ended")
        answer = dict(json.loads(line))
        if "error" in answer:
            raise FaultProxyError(f"the fault proxy refused {command}: {answer['error']}")
        return answer

    def close(self) -> None:
        """Close this control connection (the proxy and its rules stay)."""
        with contextlib.suppress(OSError):
            self._control_in.close()
            self._control.close()

    def __enter__(self) -> ProxyControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FaultProxy(ProxyControl):
    """A fault proxy in its own process, in front of ``upstream_host:upstream_port`` (the store's S3 port), and a
    control connection to it.

    Runs in the harness or test process; the proxy process listens on 127.0.0.1 only and ends with :meth:`close`,
    or when this process ends (its stdin closes).

    Raises:
        FaultProxyError: the proxy process did not start.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "sparkonce_local.services.faultproxy", upstream_host, str(upstream_port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        words = self._proc.stdout.readline().split()
        if len(words) != 3 or words[0] != "PORTS":
            self._stop()
            raise FaultProxyError(f"the fault proxy did not start (it printed {words})")
        self.port = int(words[1])
        try:
            super().__init__(f"127.0.0.1:{words[2]}")
        except BaseException:
            self._stop()
            raise

    @property
    def pid(self) -> int:
        """The proxy process's id."""
        return self._proc.pid

    @property
    def endpoint(self) -> str:
        """The proxy's URL, to give clients instead of the store's (``AWS_ENDPOINT_URL``)."""
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop the proxy process (its connections close with it) and wait for it."""
        super().close()
        self._stop()

    def _stop(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()  # the proxy ends when its stdin does
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> FaultProxy:
        return self


def _control_connection(server: _ProxyServer, conn: socket.socket) -> None:
    """Serve one control connection: a JSON command a line, a JSON answer a line (``{"error": ...}`` on failure)."""
    with conn, conn.makefile("r", encoding="utf-8") as commands:
        for line in commands:
            answer: dict[str, Any]
            try:
                command = json.loads(line)
                op = command.get("op")
                if op == "arm":
                    answer = server.arm(command).to_json()
                elif op == "status":
                    answer = server.rule(int(command["rule"]))
                elif op == "disarm":
                    answer = server.disarm(int(command["rule"]))
                elif op == "wait":
                    answer = server.wait(int(command["rule"]), int(command["fired"]), float(command["timeout"]))
                elif op == "rules":
                    answer = {"rules": server.rules()}
                else:
                    answer = {"error": f"unknown op {op!r}"}
            except (ValueError, KeyError, TypeError, AttributeError, re.error) as err:
                answer = {"error": f"{type(err).__name__}: {err}"}
            conn.sendall((json.dumps(answer) + "\n").encode("utf-8"))


def main() -> None:
    """The proxy process: ``python -m sparkonce_local.services.faultproxy UPSTREAM_HOST UPSTREAM_PORT``.

    Prints ``PORTS <proxy port> <control port>`` (both on 127.0.0.1), serves control connections (``{"op": "arm",
    "kind": ..., "method": ..., "path": ..., "count": ...}``, ``status``, ``wait``, ``disarm``, ``rules``; see
    :class:`ProxyControl`), and ends when its stdin ends.
    """
    server = _ProxyServer(sys.argv[1], int(sys.argv[2]))
    control = socket.create_server(("127.0.0.1", 0))

    def accept_control() -> None:
        while True:
            conn, _ = control.accept()
            threading.Thread(target=_control_connection, args=(server, conn), daemon=True).start()

    threading.Thread(target=accept_control, name="fault-proxy-control", daemon=True).start()
    print(f"PORTS {server.port} {control.getsockname()[1]}", flush=True)
    sys.stdin.read()  # until the parent closes it or ends


if __name__ == "__main__":
    main()


__all__ = [
    "ERROR_ANSWERS",
    "ArmedRule",
    "FaultProxy",
    "FaultProxyError",
    "ProxyControl",
    "RuleStatus",
]
