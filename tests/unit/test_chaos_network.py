"""The chaos harness's store link faults (store_net_reset, store_net_pause) injected through the HTTP fault proxy
in front of a scripted store on loopback, while a client keeps sending requests: what fired, and the note."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from sparkonce_local.chaos.network import inject_network
from sparkonce_local.chaos.plan import Fault
from sparkonce_local.chaos.testbed import ChaosSetup
from sparkonce_local.services.faultproxy import FaultProxy
from tests.unit.test_faultproxy import ScriptedStore


@pytest.fixture
def store() -> Iterator[ScriptedStore]:
    running = ScriptedStore()
    yield running
    running.close()


@pytest.fixture
def setup(store: ScriptedStore, tmp_path: Path) -> Iterator[ChaosSetup]:
    with FaultProxy("127.0.0.1", store.port) as proxy:
        # only the store's link matters here: no pipeline, no driver spec
        yield ChaosSetup(tmp_path, tmp_path / "pipeline.toml", cast(Any, None), "", cast(Any, None), {}, proxy=proxy)


def _keep_asking(setup: ChaosSetup, stop: threading.Event, outcomes: list[str]) -> threading.Thread:
    """A client sending ``GET /b/k`` again and again on one connection (a new one after an error) until ``stop``."""
    assert setup.proxy is not None
    port = setup.proxy.port

    def ask() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while not stop.is_set():
            try:
                conn.request("GET", "/b/k")
                outcomes.append(conn.getresponse().read().decode())
            except (OSError, http.client.HTTPException) as err:
                outcomes.append(type(err).__name__)
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            stop.wait(0.02)
        conn.close()

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("fault", "note", "failure"),
    [
        (
            Fault("store_net_reset", stage="raw"),
            "store link: the store applied /b/k, its connection reset before the answer",
            "ConnectionResetError",
        ),
        (
            Fault("store_net_pause", stage="raw", downtime=1.0),
            "store link paused 1.00s from the request /b/k (connections kept open)",
            None,
        ),
    ],
    ids=["store_net_reset", "store_net_pause"],
)
def test_a_store_link_fault_fires_on_the_next_request(
    setup: ChaosSetup, store: ScriptedStore, fault: Fault, note: str, failure: str | None
) -> None:
    stop = threading.Event()
    outcomes: list[str] = []
    client = _keep_asking(setup, stop, outcomes)
    try:
        injected, said = inject_network(setup, fault, until=float("inf"), alive=lambda: True)
        asked = len(outcomes)
        while len(outcomes) < asked + 2 and client.is_alive():
            stop.wait(0.02)  # the client goes on after the fault
    finally:
        stop.set()
        client.join(60)
    assert (injected, said) == (True, note)
    failures = [o for o in outcomes if o != "ok /b/k"]
    assert failures == ([failure] if failure else [])  # a reset costs one request; a pause none
    assert len(store.requests) == len(outcomes)  # every request reached the store, the reset one too
