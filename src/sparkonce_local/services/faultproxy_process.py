"""The fault proxy's own process: the HTTP/1.1 forwarding threads here, or the TCP ones
(:mod:`sparkonce_local.services.faultproxy_tcp`), with the rules and the control port of
:mod:`sparkonce_local.services.faultrules`.

:class:`sparkonce_local.services.faultproxy.FaultProxy` starts it as ``python -m
sparkonce_local.services.faultproxy_process http UPSTREAM_HOST UPSTREAM_PORT`` (``tcp`` for
:class:`~sparkonce_local.services.faultproxy.TcpFaultProxy`); everything else talks to it through
:class:`~sparkonce_local.services.faultproxy.ProxyControl` (one JSON command a line on its control port). See
:mod:`sparkonce_local.services.faultproxy` for what the rules do. Runs in that process only, never on Spark
executors.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import struct
import sys
import time
import uuid
from typing import BinaryIO

from sparkonce_local.services.faultproxy_tcp import TcpProxyServer
from sparkonce_local.services.faultrules import (
    ERROR_ANSWERS,
    HTTP_KINDS,
    TCP_KINDS,
    CloseHow,
    PauseGate,
    RuleBook,
    RuleKind,
    listen,
    serve_control,
)
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


class _ProxyServer:
    """The HTTP/1.1 proxy itself: threads in the proxy's own process (:func:`main`), listening on
    ``127.0.0.1:<port>`` and forwarding to ``upstream_host:upstream_port``, one upstream connection per client
    connection, under the rules of ``rules``."""

    def __init__(self, rules: RuleBook, upstream_host: str, upstream_port: int) -> None:
        self.rules = rules
        self.upstream = (upstream_host, upstream_port)
        self.gate = PauseGate()
        self.port = listen(self._serve, name="fault-proxy-conn")

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
                self.gate.hold()  # a paused store takes no request (its connection stays open)
                pause = self.rules.claim("pause", method, target)
                if pause is not None:
                    log.info("fault proxy: paused %.2fs on %s %s", pause.seconds, method, target)
                    self.gate.pause(pause.seconds)
                    self.gate.hold()  # the request is held, then goes on
                if header(head, b"expect") is not None:  # the proxy takes the body at once, as it forwards it
                    client.sendall(CONTINUE)
                    head = without_header(head, b"expect")
                answer = self.rules.claim("answer", method, target)
                if answer is not None:
                    copy_body(client_in, None, head)
                    log.info("fault proxy: answered %s %s with %d", method, target, answer.status)
                    client.sendall(_error_answer(answer.status, target, head_request=method == "HEAD"))
                    if wants_close(head):
                        return
                    continue
                delay = self.rules.claim("latency", method, target)
                if delay is not None:
                    log.info("fault proxy: delayed %s %s by %.2fs", method, target, delay.seconds)
                    time.sleep(delay.seconds)  # the rule's added latency, before the request goes on
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
                lose = self.rules.claim("lose_response", method, target)
                if lose is not None:
                    copy_body(upstream_in, None, response, head_request=method == "HEAD")
                    log.info("fault proxy: lost the answer to %s %s (%s)", method, target, response.split(b"\r\n")[0])
                    reset = lose.close == "reset"
                    return  # the store applied it; the client sees its connection end
                self.gate.hold()  # nor does it answer while paused
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


def main() -> None:
    """The proxy process: ``python -m sparkonce_local.services.faultproxy_process http|tcp UPSTREAM_HOST
    UPSTREAM_PORT``.

    Prints ``PORTS <proxy port> <control port>`` (both on 127.0.0.1), serves control connections (``{"op": "arm",
    "kind": ..., "count": ...}``, ``status``, ``wait``, ``disarm``, ``rules``; see
    :class:`~sparkonce_local.services.faultproxy.ProxyControl`), and ends when its stdin ends.
    """
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "tcp":
        rules = RuleBook(TCP_KINDS)
        serve_control(rules, TcpProxyServer(rules, host, port).port)
    else:
        rules = RuleBook(HTTP_KINDS)
        serve_control(rules, _ProxyServer(rules, host, port).port)


__all__ = ["ERROR_ANSWERS", "CloseHow", "RuleKind", "main"]


if __name__ == "__main__":
    main()
