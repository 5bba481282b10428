"""The TCP fault proxy on the broker's and PostgreSQL's links, under real clients: a fault fires during a real
operation and the client recovers (confluent-kafka's idempotent producer retries a produce whose answer was reset
away, every record lands once) or fails cleanly (psycopg's connection ends with ``OperationalError``, the server
kept what it committed, a new connection works)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sparkonce.errors import SinkError
from sparkonce.retries import count_retries
from sparkonce.sinks.postgres import PostgresSink, PostgresSinkOptions
from sparkonce_local.chaos.reconcile import read_topic
from sparkonce_local.services.broker import create_topic, free_port, start_broker, stop_broker
from sparkonce_local.services.faultproxy import TcpFaultProxy
from tests.fixtures_postgres import LocalPostgres


@pytest.fixture
def proxied_broker(tmp_path: Path) -> Iterator[tuple[str, TcpFaultProxy]]:
    """A broker that advertises a fault proxy in front of it (every client connection goes through the proxy)."""
    port = free_port()
    with TcpFaultProxy("127.0.0.1", port) as proxy:
        info = start_broker(state_dir=tmp_path / "broker", port=port, advertise=proxy.address)
        try:
            yield info.bootstrap, proxy
        finally:
            stop_broker(state_dir=tmp_path / "broker")


def test_an_idempotent_producer_recovers_from_a_reset_answer_and_writes_each_record_once(
    proxied_broker: tuple[str, TcpFaultProxy],
) -> None:
    from confluent_kafka import Producer

    bootstrap, proxy = proxied_broker
    assert bootstrap == proxy.address
    create_topic(bootstrap, "links", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(50):
        producer.produce("links", value=f"before {i}".encode(), on_delivery=on_delivery)
    assert producer.flush(60) == 0
    rule = proxy.reset_connections(direction="down")  # the broker's next answer is lost, its connection reset
    for i in range(200):
        producer.produce("links", value=f"after {i}".encode(), on_delivery=on_delivery)
    assert producer.flush(120) == 0
    assert rule.fired == 1 and errors == []
    values = Counter(read_topic(bootstrap, "links").values())
    expected = [f"before {i}".encode() for i in range(50)] + [f"after {i}".encode() for i in range(200)]
    assert values == Counter(expected)


def test_a_consumer_waits_out_a_paused_broker_on_the_same_connection(
    proxied_broker: tuple[str, TcpFaultProxy],
) -> None:
    from confluent_kafka import Producer

    bootstrap, proxy = proxied_broker
    create_topic(bootstrap, "paused", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(20):
        producer.produce("paused", value=f"v{i}".encode())
    assert producer.flush(60) == 0
    rule = proxy.pause(3.0)
    values = sorted(read_topic(bootstrap, "paused").values(), key=lambda v: int((v or b"v0")[1:]))
    assert values == [f"v{i}".encode() for i in range(20)]
    assert rule.fired == 1


@pytest.fixture
def proxied_postgres(postgres: LocalPostgres) -> Iterator[tuple[str, TcpFaultProxy]]:
    server = postgres.server
    with TcpFaultProxy(server.host, server.port) as proxy:
        yield server.dsn.replace(f":{server.port}/", f":{proxy.port}/"), proxy


def test_a_commit_whose_answer_is_reset_fails_cleanly_and_the_server_kept_it(
    postgres: LocalPostgres, proxied_postgres: tuple[str, TcpFaultProxy]
) -> None:
    dsn, proxy = proxied_postgres
    table = postgres.unique_name("links")
    postgres.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
    conn = psycopg.connect(dsn)
    conn.execute(f"INSERT INTO {table} VALUES (1), (2)")
    rule = proxy.reset_connections(direction="down")  # the answer to COMMIT is lost: the outcome is unknown
    with pytest.raises(psycopg.OperationalError, match="server closed the connection unexpectedly"):
        conn.commit()
    assert conn.closed and rule.fired == 1
    assert postgres.fetch(f"SELECT id FROM {table} ORDER BY id") == [(1,), (2,)]  # the server committed it
    with psycopg.connect(dsn, autocommit=True) as again:  # a new connection through the proxy works
        assert again.execute(f"SELECT count(*) FROM {table}").fetchone() == (2,)


def test_a_query_through_a_paused_link_completes_on_the_same_connection(
    postgres: LocalPostgres, proxied_postgres: tuple[str, TcpFaultProxy]
) -> None:
    dsn, proxy = proxied_postgres
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        rule = proxy.pause(2.0, direction="up")
        assert conn.execute("SELECT pg_backend_pid()").fetchone() == (pid,)
    assert rule.fired == 1


def test_the_sink_connects_again_after_a_reset_connection_and_gives_up_after_its_attempts(
    postgres: LocalPostgres, proxied_postgres: tuple[str, TcpFaultProxy], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sparkonce.sinks.postgres.sink")
    dsn, proxy = proxied_postgres
    table = postgres.unique_name("links")
    sink = PostgresSink(PostgresSinkOptions(dsn=dsn, table=table, app_id="links", ledger_table=f"{table}_ledger"))
    rule = proxy.reset_connections(count=2, direction="up")  # the first two connection attempts are reset
    sink.check()
    assert rule.fired == 2
    assert count_retries(caplog.messages) == {"postgres_connect": 2}  # each retry a warning
    assert postgres.fetch(f"SELECT count(*) FROM {table}_ledger") == [(0,)]
    rule = proxy.reset_connections(count=4, direction="up")
    with pytest.raises(SinkError, match="unreachable after 4 attempts"):
        sink.check()
    assert rule.fired == 4
