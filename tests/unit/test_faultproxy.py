"""The fault proxy against a scripted HTTP/1.1 server on loopback: what it forwards, byte for byte, and what its
rules do (lost answers, error answers), counted; rules armed from another process; the process ends on close."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from sparkonce.errors import OptionError
from sparkonce_local.services.faultproxy import FaultProxy, FaultProxyError, ProxyControl

Answer = Callable[[bytes], bytes]


def ok_answer(request: bytes) -> bytes:
    path = request.split(b" ", 2)[1]
    body = b"ok " + path
    return b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


class ScriptedStore:
    """An HTTP/1.1 server on loopback: records every request's exact bytes and the connection it came on, and
    answers each with ``answer(request)``; with ``close_when_idle`` it closes each connection after an answer
    (without saying so in the answer, as a store's idle timeout does)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self.requests: list[tuple[int, bytes]] = []
        self.answer: Answer = ok_answer
        self.close_when_idle = False
        self.closed = threading.Event()
        self._connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self._connections += 1
            threading.Thread(target=self._serve, args=(conn, self._connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        with conn, conn.makefile("rb") as stream:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = stream.readline()
                    if not line:
                        return
                    head += line
                body = b""
                lowered = head.lower()
                if b"transfer-encoding: chunked" in lowered:
                    while True:
                        size_line = stream.readline()
                        body += size_line
                        size = int(size_line.split(b";")[0], 16)
                        if size == 0:
                            while (trailer := stream.readline()) not in (b"\r\n", b""):
                                body += trailer
                            body += trailer
                            break
                        body += stream.read(size + 2)
                elif b"content-length:" in lowered:
                    length = int(lowered.split(b"content-length:")[1].split(b"\r\n")[0])
                    body = stream.read(length)
                self.requests.append((number, head + body))
                conn.sendall(self.answer(head + body))
                if self.close_when_idle:
                    conn.shutdown(socket.SHUT_RDWR)
                    self.closed.set()
                    return

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def store() -> Iterator[ScriptedStore]:
    running = ScriptedStore()
    yield running
    running.close()


@pytest.fixture
def proxy(store: ScriptedStore) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", store.port) as running:
        yield running


def _connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=30)


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise AssertionError(f"connection ended after {data!r}")
        data += chunk
    return data


def _put(proxy: FaultProxy, path: str, body: bytes = b"data") -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    conn.request("PUT", path, body=body)
    return conn.getresponse()


def test_requests_and_answers_pass_byte_for_byte_on_one_kept_alive_connection(
    store: ScriptedStore, proxy: FaultProxy
) -> None:
    chunked_answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: 1\r\n\r\n"
    )
    head_answer = b'HTTP/1.1 200 OK\r\nContent-Length: 9\r\nETag: "e"\r\n\r\n'  # a HEAD answer has no body

    def answer(request: bytes) -> bytes:
        return {b"GET": chunked_answer, b"HEAD": head_answer}.get(request.split(b" ", 1)[0]) or ok_answer(request)

    store.answer = answer
    requests = [
        b'PUT /b/a.json HTTP/1.1\r\nHost: s\r\nContent-Length: 11\r\nX-Amz-Meta: 1\r\n\r\n{"a": 1}\r\n\n',
        b"PUT /b/c.bin?x=1 HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4;ext=1\r\nab\r\n\r\n3\r\nxyz\r\n0\r\nChecksum: 9\r\n\r\n",
        b"GET /b/?list-type=2&prefix=a HTTP/1.1\r\nHost: s\r\n\r\n",
        b"HEAD /b/a.json HTTP/1.1\r\nHost: s\r\n\r\n",
        b"DELETE /b/a.json HTTP/1.1\r\nHost: s\r\n\r\n",
    ]
    with _connect(proxy) as conn:
        for request in requests:
            conn.sendall(request)
            expected = answer(request)
            assert _read_exactly(conn, len(expected)) == expected
    assert store.requests == [(1, r) for r in requests]  # unchanged, in order, on one store connection


def test_a_lost_answer_reaches_the_store_and_ends_the_client_connection_exactly_count_times(
    store: ScriptedStore, proxy: FaultProxy
) -> None:
    rule = proxy.lose_responses("PUT", r"/_delta_log/\d{20}\.json$", count=2)
    assert (rule.fired, rule.remaining) == (0, 2)
    log_file = "/b/t/_delta_log/00000000000000000007.json"
    assert _put(proxy, "/b/t/part-0.parquet").status == 200  # another path: forwarded
    for _ in range(2):
        with pytest.raises(http.client.RemoteDisconnected, match=r"^Remote end closed connection without response$"):
            _put(proxy, log_file, b"commit")
    assert _put(proxy, log_file + "?x-id=PutObject").status == 200  # the third: the rule is spent
    paths = [r.split(b" ", 2)[1].decode() for _, r in store.requests]
    assert paths == ["/b/t/part-0.parquet", log_file, log_file, log_file + "?x-id=PutObject"]  # all applied
    status = rule.status()
    assert (status.fired, status.remaining, status.paths) == (2, 0, (log_file, log_file))
    assert rule.wait_fired(2, timeout=0)


def test_a_lost_answer_can_end_the_connection_with_a_reset(store: ScriptedStore, proxy: FaultProxy) -> None:
    rule = proxy.lose_responses("*", r"x$", close="reset")
    with _connect(proxy) as conn:
        conn.sendall(b"DELETE /b/x HTTP/1.1\r\nHost: s\r\n\r\n")
        with pytest.raises(ConnectionResetError, match="Connection reset by peer"):
            assert conn.recv(1024) == b"", "expected a reset, not an end of stream"
    assert rule.fired == 1 and len(store.requests) == 1


@pytest.mark.parametrize(("status", "code"), [(503, b"<Code>SlowDown</Code>"), (500, b"<Code>InternalError</Code>")])
def test_an_error_answer_never_reaches_the_store_and_keeps_the_connection(
    store: ScriptedStore, proxy: FaultProxy, status: int, code: bytes
) -> None:
    rule = proxy.answer_errors("PUT", r"\.json$", status=status)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    conn.request("PUT", "/b/a.json", body=b"x" * 1000)
    answer = conn.getresponse()
    assert answer.status == status and code in answer.read()
    conn.request("PUT", "/b/a.json", body=b"y")  # the same connection, forwarded now
    assert conn.getresponse().read() == b"ok /b/a.json"
    conn.close()
    assert [r[-1:] for _, r in store.requests] == [b"y"]
    assert rule.fired == 1


def test_a_delayed_request_reaches_the_store_unchanged_and_counts(store: ScriptedStore, proxy: FaultProxy) -> None:
    rule = proxy.delay_requests("GET", r"/slow$", 0.2, count=2)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    for path in ("/b/slow", "/b/fast", "/b/slow", "/b/slow"):
        conn.request("GET", path)
        assert conn.getresponse().read() == b"ok " + path.encode()
    conn.close()
    status = rule.status()
    assert (status.fired, status.paths, status.seconds) == (2, ("/b/slow", "/b/slow"), 0.2)
    assert len(store.requests) == 4


def test_a_paused_store_holds_every_request_on_open_connections_then_forwards_each_once(
    store: ScriptedStore, proxy: FaultProxy
) -> None:
    first = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=60)
    second = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=60)
    second.request("GET", "/b/before")  # an open connection from before the pause
    assert second.getresponse().read() == b"ok /b/before"
    rule = proxy.pause(2.0)  # store_net_pause: the store stops answering, no connection closes
    answers: dict[str, bytes] = {}

    def send(conn: http.client.HTTPConnection, path: str) -> None:
        conn.request("PUT", path, body=b"held")
        answers[path] = conn.getresponse().read()

    senders = [threading.Thread(target=send, args=(first, "/b/first"))]
    senders[0].start()
    assert rule.wait_fired(1, timeout=30)  # the first request started the pause and is held
    senders.append(threading.Thread(target=send, args=(second, "/b/second")))
    senders[1].start()
    assert [r.split(b" ", 2)[1] for _, r in store.requests] == [b"/b/before"]  # nothing went on yet
    for sender in senders:
        sender.join(60)
    assert answers == {"/b/first": b"ok /b/first", "/b/second": b"ok /b/second"}
    assert sorted(r.split(b" ", 2)[1] for _, r in store.requests) == [b"/b/before", b"/b/first", b"/b/second"]
    second.request("GET", "/b/after")  # the held connections stayed open and keep working
    assert second.getresponse().read() == b"ok /b/after"
    first.close()
    second.close()
    assert (rule.fired, rule.remaining, rule.paths) == (1, 0, ["/b/first"])


def test_a_reset_of_any_request_comes_after_the_store_applied_it(store: ScriptedStore, proxy: FaultProxy) -> None:
    rule = proxy.lose_responses("*", "", close="reset")  # store_net_reset: the next request, whatever it is
    with _connect(proxy) as conn:
        conn.sendall(b"GET /b/list?prefix=x HTTP/1.1\r\nHost: s\r\n\r\n")
        with pytest.raises(ConnectionResetError, match="Connection reset by peer"):
            assert conn.recv(1024) == b"", "expected a reset, not an end of stream"
    assert _put(proxy, "/b/next").status == 200  # spent after one request
    assert [r.split(b" ", 2)[1] for _, r in store.requests] == [b"/b/list?prefix=x", b"/b/next"]
    assert (rule.fired, rule.paths) == (1, ["/b/list?prefix=x"])


def test_expect_continue_is_answered_by_the_proxy(store: ScriptedStore, proxy: FaultProxy) -> None:
    with _connect(proxy) as conn:
        conn.sendall(b"PUT /b/k HTTP/1.1\r\nHost: s\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
        assert _read_exactly(conn, 25) == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.sendall(b"abc")
        expected = ok_answer(b"PUT /b/k ")
        assert _read_exactly(conn, len(expected)) == expected
    assert store.requests == [(1, b"PUT /b/k HTTP/1.1\r\nHost: s\r\nContent-Length: 3\r\n\r\nabc")]


def test_a_store_that_closed_an_idle_connection_gets_a_new_one(store: ScriptedStore, proxy: FaultProxy) -> None:
    store.close_when_idle = True
    with _connect(proxy) as conn:
        for _ in range(2):
            store.closed.clear()
            conn.sendall(b"GET /b/k HTTP/1.1\r\nHost: s\r\n\r\n")
            assert _read_exactly(conn, len(ok_answer(b"GET /b/k "))) == ok_answer(b"GET /b/k ")
            assert store.closed.wait(10)  # the store ended the connection after its answer
    assert [number for number, _ in store.requests] == [1, 2]


def test_rules_are_armed_and_read_from_another_process(store: ScriptedStore, proxy: FaultProxy) -> None:
    def other_process(code: str) -> str:
        script = (
            "import sys\nfrom sparkonce_local.services.faultproxy import ProxyControl\n"
            f"c = ProxyControl(sys.argv[1])\n{code}"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, proxy.control_address], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    rule_id = int(other_process("print(c.lose_responses('PUT', r'/k$', count=1).rule_id)"))
    with pytest.raises(http.client.RemoteDisconnected, match=r"^Remote end closed connection without response$"):
        _put(proxy, "/b/k")
    assert proxy.rule(rule_id).fired == 1
    assert other_process(f"print(c.rule({rule_id}).status().fired, len(c.rules()))") == "1 1"
    with ProxyControl(proxy.control_address) as control:  # a second connection in this process sees it too
        assert [(r.rule_id, r.kind, r.fired) for r in control.rules()] == [(rule_id, "lose_response", 1)]


def test_wait_fired_returns_false_when_nothing_matched(proxy: FaultProxy) -> None:
    rule = proxy.lose_responses("PUT", r"never$")
    assert not rule.wait_fired(1, timeout=0.2)
    assert proxy.disarm(rule).remaining == 0


def test_bad_rules_are_refused(proxy: FaultProxy) -> None:
    with pytest.raises(OptionError, match="path"):
        proxy.lose_responses("PUT", r"(unclosed")
    with pytest.raises(OptionError, match="status"):
        proxy.answer_errors("PUT", r"x", status=404)
    with pytest.raises(OptionError, match="count"):
        proxy.lose_responses("PUT", r"x", count=0)
    with socket.create_connection(("127.0.0.1", int(proxy.control_address.split(":")[1])), timeout=30) as raw:
        raw.sendall(b'{"op": "arm", "kind": "close", "path": "x"}\n')  # a TCP rule
        assert b"unknown rule kind" in raw.makefile("rb").readline()
    with pytest.raises(FaultProxyError, match="KeyError"):
        proxy.rule(99)


def test_close_ends_the_proxy_process(store: ScriptedStore) -> None:
    proxy = FaultProxy("127.0.0.1", store.port)
    pid, port = proxy.pid, proxy.port
    os.kill(pid, 0)  # running
    proxy.close()
    with pytest.raises(ProcessLookupError, match="No such process"):
        os.kill(pid, 0)
    with pytest.raises(ConnectionRefusedError, match="Connection refused"):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
