"""The TCP fault proxy on real sockets against an echo server on loopback: bytes forwarded unchanged, and each
rule kind (latency, dropped and reset connections, a paused peer) doing what it says, counted."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from sparkonce.errors import OptionError
from sparkonce_local.services.faultproxy import FaultProxyError, TcpFaultProxy


class EchoServer:
    """Answers every chunk it receives with ``b"echo:" + chunk``; records what arrived and on which connection,
    and whether each connection ended with EOF or a reset."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self.received: list[tuple[int, bytes]] = []
        self.endings: list[str] = []
        self.ended = threading.Condition()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        ending = "eof"
        with conn:
            try:
                while data := conn.recv(1 << 16):
                    self.received.append((number, data))
                    conn.sendall(b"echo:" + data)
            except ConnectionResetError:
                ending = "reset"
        with self.ended:
            self.endings.append(ending)
            self.ended.notify_all()

    def wait_ended(self, count: int) -> list[str]:
        with self.ended:
            assert self.ended.wait_for(lambda: len(self.endings) >= count, timeout=30)
            return list(self.endings)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[TcpFaultProxy]:
    with TcpFaultProxy("127.0.0.1", echo.port) as running:
        yield running


def connect(proxy: TcpFaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=30)


def exchange(conn: socket.socket, data: bytes) -> bytes:
    conn.sendall(data)
    expected = len(data) + 5
    answer = b""
    while len(answer) < expected:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        answer += chunk
    return answer


def test_bytes_pass_unchanged_both_ways(echo: EchoServer, proxy: TcpFaultProxy) -> None:
    with connect(proxy) as conn:
        assert exchange(conn, b"hello") == b"echo:hello"
        assert exchange(conn, b"\x00\xff" * 10) == b"echo:" + b"\x00\xff" * 10
    assert [data for _, data in echo.received] == [b"hello", b"\x00\xff" * 10]
    assert echo.connections == 1


def test_latency_delays_count_chunks_and_changes_no_byte(echo: EchoServer, proxy: TcpFaultProxy) -> None:
    rule = proxy.add_latency(0.2, count=2, direction="up")
    with connect(proxy) as conn:
        answers = [exchange(conn, f"request {i}".encode()) for i in range(3)]
    assert answers == [f"echo:request {i}".encode() for i in range(3)]
    status = rule.status()
    assert (status.fired, status.remaining, status.kind, status.seconds) == (2, 0, "latency", 0.2)


def test_close_drops_the_request_and_ends_both_connections(echo: EchoServer, proxy: TcpFaultProxy) -> None:
    rule = proxy.drop_connections(direction="up")
    with connect(proxy) as conn:
        conn.sendall(b"lost")
        assert conn.recv(100) == b""
    assert echo.wait_ended(1) == ["eof"]
    assert echo.received == []
    assert rule.fired == 1
    with connect(proxy) as conn:  # the rule is spent: the next connection goes through
        assert exchange(conn, b"next") == b"echo:next"


def test_close_down_loses_the_answer_to_a_request_the_server_got(echo: EchoServer, proxy: TcpFaultProxy) -> None:
    rule = proxy.drop_connections(direction="down")
    with connect(proxy) as conn:
        conn.sendall(b"applied")
        assert conn.recv(100) == b""
    assert [data for _, data in echo.received] == [b"applied"]
    assert rule.fired == 1


def test_reset_ends_both_connections_with_a_reset(echo: EchoServer, proxy: TcpFaultProxy) -> None:
    rule = proxy.reset_connections(direction="up")
    with connect(proxy) as conn:
        conn.sendall(b"reset me")
        with pytest.raises(ConnectionResetError, match="Connection reset by peer"):
            conn.recv(100)
    assert echo.wait_ended(1) == ["reset"]
    assert rule.fired == 1 and echo.received == []


def test_pause_holds_every_connection_open_then_resumes(echo: EchoServer, proxy: TcpFaultProxy) -> None:
    with connect(proxy) as first:
        assert exchange(first, b"before") == b"echo:before"
        rule = proxy.pause(5.0, direction="up")
        first.sendall(b"held")
        assert rule.wait_fired(1, timeout=30)
        second = connect(proxy)  # accepted while paused; waits too
        second.sendall(b"waiting")
        first.settimeout(0.3)
        with pytest.raises(TimeoutError, match=r"^timed out$"):
            first.recv(100)  # nothing forwarded while the peer is paused
        first.settimeout(30)
        assert first.recv(100) == b"echo:held"  # the same connection, after the pause
        with second:
            assert second.recv(100) == b"echo:waiting"
    assert sorted(data for _, data in echo.received) == [b"before", b"held", b"waiting"]
    assert echo.connections == 2
    assert rule.status().fired == 1


def test_a_server_that_is_down_ends_the_client_connection(echo: EchoServer) -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    with TcpFaultProxy("127.0.0.1", port) as proxy, connect(proxy) as conn:
        assert conn.recv(100) == b""


def test_bad_tcp_rules_are_refused(proxy: TcpFaultProxy) -> None:
    with pytest.raises(OptionError, match="seconds"):
        proxy.pause(0)
    with pytest.raises(OptionError, match="direction"):
        proxy.drop_connections(direction="sideways")  # type: ignore[arg-type]
    with pytest.raises(FaultProxyError, match="unknown rule kind 'lose_response'"):
        proxy.lose_responses("PUT", "x")
    assert [r.kind for r in proxy.rules()] == []
