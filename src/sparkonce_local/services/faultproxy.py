"""A fault-injecting HTTP/1.1 proxy on loopback, between clients and an object store's S3 endpoint.

It forwards each request and each response unchanged (keep-alive, bodies by ``Content-Length`` or chunked) until a
rule is armed. A rule matches the next ``count`` requests by method and a regex on the path (the query string left
out) and does one thing to each of them:

* ``lose_response`` (:meth:`ProxyControl.lose_responses`): the request reaches the store, which applies it; the
  proxy reads the store's whole answer and closes the client's connection instead of sending it (an end of stream,
  or with ``close="reset"`` a TCP reset), as when a store or a network loses the answer to a PUT it applied;
* ``answer`` (:meth:`ProxyControl.answer_errors`): the request never reaches the store; the proxy answers it with
  an S3 error (``503 SlowDown`` or ``500 InternalError``) and keeps the connection open;
* ``latency`` (:meth:`ProxyControl.delay_requests`): the request waits ``seconds`` before it goes on;
* ``pause`` (:meth:`ProxyControl.pause`): the store stops answering for ``seconds``: no request goes on and no
  answer comes back on any connection (new ones are accepted and wait), every connection stays open; then the held
  requests go on and their answers come back, none lost.

A connection reset before any answer is ``lose_response`` with ``close="reset"``: the request reached the store and
was applied, the client sees only the reset (the harder case for a client: it cannot tell whether its write
happened, and a retried conditional PUT finds the object there).

Each rule counts how often it fired and on which paths; it ends after ``count`` firings or when disarmed.
:class:`TcpFaultProxy` is the same for any TCP protocol (the broker's, PostgreSQL's), its rules firing on chunks
of bytes: added latency, dropped or reset connections, a paused peer (:mod:`sparkonce_local.services.faultproxy_tcp`).

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

This module is the control side (any process); the proxy process itself is
:mod:`sparkonce_local.services.faultproxy_process` (HTTP forwarding, with the framing of
:mod:`sparkonce_local.services.http1`) or :mod:`sparkonce_local.services.faultproxy_tcp`, and its rules and control
port are :mod:`sparkonce_local.services.faultrules`.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

from sparkonce.errors import OptionError, SparkonceError
from sparkonce_local.services.faultrules import ERROR_ANSWERS, MAX_SECONDS, CloseHow, Direction, RuleKind


class FaultProxyError(SparkonceError):
    """The fault proxy process did not start, ended, or refused a control command."""


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
    """HTTP: the request targets it fired on, in order; TCP: the client connections."""
    direction: Direction = "any"
    seconds: float = 0.0

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
            cast(Direction, data.get("direction", "any")),
            float(data.get("seconds", 0.0)),
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

    def delay_requests(self, method: str, path: str, seconds: float, count: int = 1) -> ArmedRule:
        """HTTP: arm a rule: the next ``count`` requests with ``method`` (``*``: any) whose path matches ``path``
        wait ``seconds`` in the proxy before they go on to the store."""
        return self._arm(
            {"kind": "latency", "method": method, "path": path, "count": count, "seconds": _seconds(seconds)}
        )

    def add_latency(self, seconds: float, count: int = 1, *, direction: Direction = "any") -> ArmedRule:
        """TCP: arm a rule: each of the next ``count`` chunks going ``direction`` waits ``seconds``."""
        return self._arm_tcp("latency", count, direction, seconds=_seconds(seconds))

    def drop_connections(self, count: int = 1, *, direction: Direction = "any") -> ArmedRule:
        """TCP: arm a rule: the next ``count`` chunks going ``direction`` are dropped and their connections end
        (FIN to both sides)."""
        return self._arm_tcp("close", count, direction)

    def reset_connections(self, count: int = 1, *, direction: Direction = "any") -> ArmedRule:
        """TCP: arm a rule: the next ``count`` chunks going ``direction`` are dropped and their connections are
        reset (RST to both sides)."""
        return self._arm_tcp("reset", count, direction)

    def pause(self, seconds: float, count: int = 1, *, direction: Direction = "any") -> ArmedRule:
        """Arm a rule: the next ``count`` chunks going ``direction`` (TCP), or requests (HTTP, any), each stop all
        forwarding for ``seconds`` (connections stay open; new ones wait; what was held then goes on), as a peer
        that stops answering."""
        return self._arm_tcp("pause", count, direction, seconds=_seconds(seconds))

    def _arm_tcp(self, kind: RuleKind, count: int, direction: Direction, *, seconds: float = 0.0) -> ArmedRule:
        if direction not in ("up", "down", "any"):
            raise OptionError("direction", direction, "must be 'up', 'down' or 'any'")
        return self._arm({"kind": kind, "path": "", "count": count, "direction": direction, "seconds": seconds})

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


def _seconds(seconds: float) -> float:
    if not 0 < seconds <= MAX_SECONDS:
        raise OptionError("seconds", seconds, f"must be > 0 and <= {MAX_SECONDS:.0f}")
    return float(seconds)


class FaultProxy(ProxyControl):
    """A fault proxy in its own process, in front of ``upstream_host:upstream_port`` (the store's S3 port), and a
    control connection to it.

    Runs in the harness or test process; the proxy process listens on 127.0.0.1 only and ends with :meth:`close`,
    or when this process ends (its stdin closes).

    Raises:
        FaultProxyError: the proxy process did not start.
    """

    MODE = "http"

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        command = ["-m", "sparkonce_local.services.faultproxy_process", self.MODE, upstream_host, str(upstream_port)]
        self._proc = subprocess.Popen(
            [sys.executable, *command],
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


class TcpFaultProxy(FaultProxy):
    """A TCP fault proxy in its own process (:mod:`sparkonce_local.services.faultproxy_tcp`), in front of
    ``upstream_host:upstream_port`` (the broker's or PostgreSQL's port), and a control connection to it: its rules
    are :meth:`add_latency`, :meth:`drop_connections`, :meth:`reset_connections` and :meth:`pause`.

    Clients connect to :attr:`address` instead of the server's. A Kafka broker must advertise that address as its
    listener (clients connect to the addresses of the Metadata response, not to the bootstrap one).

    Raises:
        FaultProxyError: the proxy process did not start.
    """

    MODE = "tcp"

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``, the address clients connect to instead of the server's."""
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TcpFaultProxy:
        return self


__all__ = [
    "ERROR_ANSWERS",
    "ArmedRule",
    "FaultProxy",
    "FaultProxyError",
    "ProxyControl",
    "RuleStatus",
    "TcpFaultProxy",
]
