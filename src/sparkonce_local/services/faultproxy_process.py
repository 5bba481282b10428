"""The fault proxy's own process: the armed rules, the forwarding threads and the control port.

:class:`sparkonce_local.services.faultproxy.FaultProxy` starts it as ``python -m
sparkonce_local.services.faultproxy_process UPSTREAM_HOST UPSTREAM_PORT``; everything else talks to it through
:class:`~sparkonce_local.services.faultproxy.ProxyControl` (one JSON command a line on its control port). See
:mod:`sparkonce_local.services.faultproxy` for what the rules do. Runs in that process only, never on Spark
executors.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import select
import socket
import struct
import sys
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal

from sparkonce_local.services.http1 import (
    CONTINUE,
    copy_body,
    header,
    read_head,
    request_line,
    status_code,
    wants_close,
    without_header,
)

log = logging.getLogger(__name__)

RuleKind = Literal["lose_response", "answer"]
CloseHow = Literal["eof", "reset"]

ERROR_ANSWERS: dict[int, tuple[str, str, str]] = {
    503: ("Slow Down", "SlowDown", "Please reduce your request rate."),
    500: ("Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
}
"""The S3 errors an ``answer`` rule can send: status -> (reason, error code, message)."""


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
                head = read_head(client_in)
                if head is None:
                    return
                method, target = request_line(head)
                if header(head, b"expect") is not None:  # the proxy takes the body at once, as it forwards it
                    client.sendall(CONTINUE)
                    head = without_header(head, b"expect")
                answer = self._claim("answer", method, target)
                if answer is not None:
                    copy_body(client_in, None, head)
                    log.info("fault proxy: answered %s %s with %d", method, target, answer.status)
                    client.sendall(_error_answer(answer.status, target, head_request=method == "HEAD"))
                    if wants_close(head):
                        return
                    continue
                if upstream is not None and _stale(upstream):
                    _close(upstream)  # the store closed the idle connection: a new one, as a client would
                    upstream = upstream_in = None
                if upstream is None or upstream_in is None:
                    upstream = socket.create_connection(self.upstream, timeout=300)
                    upstream_in = upstream.makefile("rb")
                upstream.sendall(head)
                copy_body(client_in, upstream, head)
                response = read_head(upstream_in)
                while response is not None and status_code(response).startswith(b"1"):
                    response = read_head(upstream_in)  # an interim answer (the proxy sent 100 itself)
                if response is None:
                    return
                lose = self._claim("lose_response", method, target)
                if lose is not None:
                    copy_body(upstream_in, None, response, head_request=method == "HEAD")
                    log.info("fault proxy: lost the answer to %s %s (%s)", method, target, response.split(b"\r\n")[0])
                    reset = lose.close == "reset"
                    return  # the store applied it; the client sees its connection end
                client.sendall(response)
                copy_body(upstream_in, client, response, head_request=method == "HEAD")
                if wants_close(head) or wants_close(response):
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
    """The proxy process: ``python -m sparkonce_local.services.faultproxy_process UPSTREAM_HOST UPSTREAM_PORT``.

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


__all__ = ["ERROR_ANSWERS", "CloseHow", "RuleKind", "main"]


if __name__ == "__main__":
    main()
