"""The TCP fault proxy: bytes forwarded unchanged between a client and a server (the broker's Kafka protocol,
PostgreSQL's wire protocol), and the rules of :data:`~sparkonce_local.services.faultrules.TCP_KINDS` applied to
chunks of them.

Each client connection gets its own connection to the server and one thread that forwards whatever either side
sends, as it arrives. Before a chunk (what one ``recv`` returned) is forwarded, the first armed rule whose
direction matches it fires on it:

* ``latency``: the chunk waits ``seconds`` before it goes on (and the connection with it);
* ``close``: the chunk is dropped and both connections end (FIN): a request that never arrived, or with
  ``direction="down"`` an answer lost after the server acted on the request;
* ``reset``: the same, but both connections end with a TCP reset (``SO_LINGER`` 0);
* ``pause``: the peer stops answering: for ``seconds`` no connection forwards anything (new connections are
  accepted and wait), every connection stays open, then forwarding resumes with the held chunk.

One side ending its connection (or a network error) ends both. Runs in the fault proxy's own process
(:mod:`sparkonce_local.services.faultproxy_process`), never on Spark executors.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import struct
import time
from typing import Literal

from sparkonce_local.services.faultrules import PauseGate, RuleBook, listen

log = logging.getLogger(__name__)

CHUNK = 1 << 16
CONNECT_TIMEOUT = 10.0
"""Seconds to open the server connection for a new client connection (the client's connection then closes)."""


class TcpProxyServer:
    """Listens on ``127.0.0.1:<port>`` and forwards each connection to ``upstream_host:upstream_port`` under the
    rules of ``rules``. Runs in the fault proxy's process."""

    def __init__(self, rules: RuleBook, upstream_host: str, upstream_port: int) -> None:
        self.rules = rules
        self.upstream = (upstream_host, upstream_port)
        self.gate = PauseGate()
        self.port = listen(self._serve, name="fault-proxy-tcp-conn")

    def _serve(self, client: socket.socket) -> None:
        how: Literal["eof", "reset"] = "eof"
        upstream: socket.socket | None = None
        try:
            where = f"client port {client.getpeername()[1]}"
            self.gate.hold()  # a paused peer does not take new connections either (the client's stays open)
            upstream = socket.create_connection(self.upstream, timeout=CONNECT_TIMEOUT)
            upstream.settimeout(None)
            peers = {client: (upstream, "up"), upstream: (client, "down")}
            while True:
                readable, _, _ = select.select([client, upstream], [], [], 1.0)
                for conn in readable:
                    self.gate.hold()
                    data = conn.recv(CHUNK)
                    if not data:
                        return  # one side ended: so does the other
                    other, direction = peers[conn]
                    rule = self.rules.claim_chunk("up" if direction == "up" else "down", where)
                    if rule is not None:
                        log.info("fault proxy: %s on %s (%s, %d bytes)", rule.kind, where, direction, len(data))
                        if rule.kind == "latency":
                            time.sleep(rule.seconds)  # the rule's added latency for this chunk
                        elif rule.kind == "pause":
                            self.gate.pause(rule.seconds)
                            self.gate.hold()
                        else:
                            how = "reset" if rule.kind == "reset" else "eof"
                            return  # the chunk is dropped with both connections
                    other.sendall(data)
        except OSError:
            return
        finally:
            _end(client, how)
            if upstream is not None:
                _end(upstream, how)


def _end(conn: socket.socket, how: Literal["eof", "reset"]) -> None:
    with contextlib.suppress(OSError):
        if how == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            conn.shutdown(socket.SHUT_RDWR)
    conn.close()


__all__ = ["CONNECT_TIMEOUT", "TcpProxyServer"]
