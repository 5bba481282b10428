"""The network faults of a chaos run (:data:`~sparkonce_local.chaos.plan.NETWORK_KINDS`), injected through the
fault proxies of the test bed: a TCP fault proxy on the broker's and PostgreSQL's links, the HTTP one on the
object store's (:mod:`sparkonce_local.services.faultproxy`).

A fault arms one rule and counts as injected once the rule fired on the run's own traffic (a chunk of bytes or a
request of a client of the run: Spark's Kafka reads, the PostgreSQL stage, delta-rs's requests, or the harness's
producer); a rule that did not fire before ``until`` is disarmed and the fault reported missed. A pause or a
latency fault returns once it is over, so the next fault starts after it. Runs in the calling process (the CLI).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkonce_local.chaos.plan import LINK_OF, Fault
from sparkonce_local.chaos.testbed import ChaosSetup
from sparkonce_local.services.faultproxy import ArmedRule, FaultProxy, ProxyControl

LATENCY_WAIT = 60.0
"""Seconds a latency fault waits for all its chunks to be delayed before it disarms the rest."""


def inject_network(setup: ChaosSetup, fault: Fault, until: float, *, alive: Callable[[], bool]) -> tuple[bool, str]:
    """Arm ``fault``'s rule on its link's proxy and wait until it fired (True) or ``until`` / ``alive()`` false.

    Returns:
        Whether the fault happened, and a note for the report (what fired, on which connection or request).
    """
    link = link_of(fault)
    proxy: FaultProxy | None = setup.proxy if link == "store" else setup.links.get(link or "")
    if proxy is None:
        return False, f"missed: no fault proxy on the {link} link"
    rule = _arm(proxy, fault)
    fired = _wait(rule, 1, until, alive)
    if not fired:
        proxy.disarm(rule)
        if rule.fired == 0:
            return False, f"missed: no traffic on the {link} link to fire on"
    status = rule.status()
    where = status.paths[0] if status.paths else "?"
    if fault.kind.endswith("_net_pause"):
        _sleep_until(time.monotonic() + fault.downtime, until)  # the pause runs in the proxy: wait it out
        what = "request" if link == "store" else "chunk on"
        return True, f"{link} link paused {fault.downtime:.2f}s from the {what} {where} (connections kept open)"
    if fault.kind.endswith("_net_drop"):
        return True, f"{link} link: a chunk dropped, its connection ended on both sides ({where})"
    if fault.kind == "store_net_reset":
        return True, f"store link: the store applied {where}, its connection reset before the answer"
    if fault.kind.endswith("_net_reset"):
        return True, f"{link} link: a chunk dropped, its connection reset on both sides ({where})"
    # bursts and latency: let the rest of the count fire, bounded, then stop it
    _wait(rule, fault.count, min(until, time.monotonic() + LATENCY_WAIT), alive)
    done = proxy.disarm(rule)
    if fault.kind == "net_latency":
        return True, f"{link} link: {done.fired} of {fault.count} chunk(s) delayed {fault.seconds:.2f}s each"
    answer = "503 SlowDown" if fault.kind == "store_slowdown" else "500 InternalError"
    return True, f"store answered {done.fired} of {fault.count} request(s) {answer}, first {where}"


def link_of(fault: Fault) -> str | None:
    """The link a network fault acts on (a latency fault names its own; None for other kinds)."""
    return fault.link if fault.kind == "net_latency" else LINK_OF.get(fault.kind)


def _arm(proxy: ProxyControl, fault: Fault) -> ArmedRule:
    if fault.kind.endswith("_net_pause"):
        return proxy.pause(fault.downtime)
    if fault.kind.endswith("_net_drop"):
        return proxy.drop_connections()
    if fault.kind == "store_net_reset":
        return proxy.lose_responses("*", "", close="reset")  # applied by the store, then reset: the harder case
    if fault.kind.endswith("_net_reset"):
        return proxy.reset_connections()
    if fault.kind == "store_slowdown":
        return proxy.answer_errors("*", "", status=503, count=fault.count)
    if fault.kind == "store_error":
        return proxy.answer_errors("*", "", status=500, count=fault.count)
    if fault.link == "store":
        return proxy.delay_requests("*", "", fault.seconds, count=fault.count)
    return proxy.add_latency(fault.seconds, count=fault.count)


def _wait(rule: ArmedRule, times: int, until: float, alive: Callable[[], bool]) -> bool:
    while True:
        left = until - time.monotonic()
        if rule.wait_fired(times, timeout=max(0.0, min(1.0, left))):
            return True
        if left <= 1.0 or not alive():
            return False


def _sleep_until(end: float, until: float) -> None:
    while (left := min(end, until) - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))  # the pause the proxy holds; bounded by the run's deadline


__all__ = ["LATENCY_WAIT", "inject_network", "link_of"]
