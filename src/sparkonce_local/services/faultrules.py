"""The rules of a fault proxy and its control port, shared by the HTTP/1.1 proxy (the object store's link,
:mod:`sparkonce_local.services.faultproxy_process`) and the TCP proxy (the broker's and PostgreSQL's links,
:mod:`sparkonce_local.services.faultproxy_tcp`).

A rule has a kind, a match and a count: it fires on the next ``count`` requests (HTTP: by method and a regex on the
path) or chunks of bytes (TCP: by direction) that match, and counts its firings. Rules are armed, read, waited on
and disarmed over the control port, one JSON object a line (:func:`serve_control`). Runs in the proxy's own
process only, never on Spark executors.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

RuleKind = Literal["lose_response", "answer", "latency", "close", "reset", "pause"]
"""HTTP rules: ``lose_response``, ``answer``, ``latency``, ``pause``; TCP rules: ``latency``, ``close``, ``reset``,
``pause``."""
CloseHow = Literal["eof", "reset"]
Direction = Literal["up", "down", "any"]
"""TCP rules: the bytes they fire on, ``up`` (client to server), ``down`` (server to client) or ``any``."""

HTTP_KINDS: tuple[RuleKind, ...] = ("lose_response", "answer", "latency", "pause")
TCP_KINDS: tuple[RuleKind, ...] = ("latency", "close", "reset", "pause")
SECONDS_KINDS: tuple[RuleKind, ...] = ("latency", "pause")
"""Kinds that take ``seconds`` (> 0): the delay of each firing, or how long a pause lasts."""
MAX_SECONDS = 600.0

ERROR_ANSWERS: dict[int, tuple[str, str, str]] = {
    503: ("Slow Down", "SlowDown", "Please reduce your request rate."),
    500: ("Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
}
"""The S3 errors an ``answer`` rule can send: status -> (reason, error code, message)."""


@dataclass
class Rule:
    """An armed rule (in the proxy process)."""

    rule_id: int
    kind: RuleKind
    method: str
    """HTTP: a method in capitals, or ``*`` for any (TCP rules: ``*``)."""
    path: re.Pattern[str]
    remaining: int
    status: int = 0
    """``answer``: the HTTP status sent."""
    close: CloseHow = "eof"
    """``lose_response``: how the client's connection ends."""
    direction: Direction = "any"
    seconds: float = 0.0
    """``latency``: the delay added to each request or chunk it fires on; ``pause``: how long forwarding stops."""
    fired: int = 0
    paths: list[str] = field(default_factory=list)
    """HTTP: the request targets (path and query) it fired on, in order; TCP: the connections (``client port``)."""

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
            "direction": self.direction,
            "seconds": self.seconds,
            "fired": self.fired,
            "remaining": self.remaining,
            "paths": list(self.paths),
        }


class PauseGate:
    """The pause of a proxy process (a ``pause`` rule fired): while it lasts, no connection forwards anything.
    Runs in the proxy process."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._until = 0.0

    def pause(self, seconds: float) -> None:
        """Stop forwarding for ``seconds`` from now (a pause already running ends at the later of the two)."""
        with self._changed:
            self._until = max(self._until, time.monotonic() + seconds)
            self._changed.notify_all()

    def hold(self) -> None:
        """Wait while a pause lasts."""
        with self._changed:
            while (left := self._until - time.monotonic()) > 0:
                self._changed.wait(left)


class RuleBook:
    """The rules of one proxy process, armed and read from any control connection. Runs in the proxy process."""

    def __init__(self, kinds: tuple[RuleKind, ...]) -> None:
        self.kinds = kinds
        self._rules: dict[int, Rule] = {}
        self._changed = threading.Condition()

    def arm(self, command: dict[str, Any]) -> Rule:
        """A new rule from an ``arm`` command. Raises ValueError, KeyError or re.error on a bad command."""
        kind = command["kind"]
        if kind not in self.kinds:
            raise ValueError(f"unknown rule kind {kind!r} (this proxy has {list(self.kinds)})")
        count = int(command.get("count", 1))
        status = int(command.get("status", 0))
        close = command.get("close", "eof")
        direction = command.get("direction", "any")
        seconds = float(command.get("seconds", 0.0))
        if count < 1:
            raise ValueError(f"count must be >= 1, not {count}")
        if kind == "answer" and status not in ERROR_ANSWERS:
            raise ValueError(f"status must be one of {sorted(ERROR_ANSWERS)}, not {status}")
        if close not in ("eof", "reset"):
            raise ValueError(f"close must be 'eof' or 'reset', not {close!r}")
        if direction not in ("up", "down", "any"):
            raise ValueError(f"direction must be 'up', 'down' or 'any', not {direction!r}")
        if kind in SECONDS_KINDS and not 0 < seconds <= MAX_SECONDS:
            raise ValueError(f"seconds must be > 0 and <= {MAX_SECONDS:.0f}, not {seconds}")
        with self._changed:
            rule = Rule(
                len(self._rules) + 1,
                kind,
                str(command.get("method", "*")).upper(),
                re.compile(str(command.get("path", ""))),
                count,
                status=status,
                close=close,
                direction=direction,
                seconds=seconds,
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

    def claim(self, kind: RuleKind, method: str, target: str) -> Rule | None:
        """HTTP: the first armed rule of ``kind`` matching the request, counted as fired on it; None if none."""
        return self._claim_first(lambda r: r.kind == kind and r.matches(method, target), target)

    def claim_chunk(self, direction: Literal["up", "down"], where: str) -> Rule | None:
        """TCP: the first armed rule matching a chunk going ``direction``, counted as fired on connection
        ``where``; None if none."""
        return self._claim_first(lambda r: r.remaining > 0 and r.direction in ("any", direction), where)

    def _claim_first(self, match: Callable[[Rule], bool], where: str) -> Rule | None:
        with self._changed:
            for rule in self._rules.values():
                if match(rule):
                    rule.remaining -= 1
                    rule.fired += 1
                    rule.paths.append(where)
                    self._changed.notify_all()
                    return rule
        return None


def _control_connection(rules: RuleBook, conn: socket.socket) -> None:
    """Serve one control connection: a JSON command a line, a JSON answer a line (``{"error": ...}`` on failure)."""
    with conn, conn.makefile("r", encoding="utf-8") as commands:
        for line in commands:
            answer: dict[str, Any]
            try:
                command = json.loads(line)
                op = command.get("op")
                if op == "arm":
                    answer = rules.arm(command).to_json()
                elif op == "status":
                    answer = rules.rule(int(command["rule"]))
                elif op == "disarm":
                    answer = rules.disarm(int(command["rule"]))
                elif op == "wait":
                    answer = rules.wait(int(command["rule"]), int(command["fired"]), float(command["timeout"]))
                elif op == "rules":
                    answer = {"rules": rules.rules()}
                else:
                    answer = {"error": f"unknown op {op!r}"}
            except (ValueError, KeyError, TypeError, AttributeError, re.error) as err:
                answer = {"error": f"{type(err).__name__}: {err}"}
            conn.sendall((json.dumps(answer) + "\n").encode("utf-8"))


def listen(handle: Callable[[socket.socket], None], *, name: str) -> int:
    """Listen on ``127.0.0.1`` (a free port, returned) and serve each connection with ``handle`` in a thread of its
    own, named ``name``."""
    server = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), name=name, daemon=True).start()

    threading.Thread(target=accept, name=f"{name}-accept", daemon=True).start()
    return int(server.getsockname()[1])


def serve_control(rules: RuleBook, proxy_port: int) -> None:
    """The rest of a proxy process's life: open the control port, print ``PORTS <proxy port> <control port>``
    (both on 127.0.0.1), serve control connections, and return when stdin ends (the parent closed it or ended)."""
    control_port = listen(lambda conn: _control_connection(rules, conn), name="fault-proxy-control")
    print(f"PORTS {proxy_port} {control_port}", flush=True)
    sys.stdin.read()


__all__ = [
    "ERROR_ANSWERS",
    "HTTP_KINDS",
    "MAX_SECONDS",
    "PauseGate",
    "SECONDS_KINDS",
    "TCP_KINDS",
    "CloseHow",
    "Direction",
    "Rule",
    "RuleBook",
    "RuleKind",
    "listen",
    "serve_control",
]
