"""Soak mode's producer: sensor readings at a fixed rate in a thread, through broker and store restarts.

Every record's delivery report is counted by value (acknowledged, or refused / never answered), so the
reconciliation can demand each acknowledged value in the topic exactly once and each refused one at most once
(:func:`~sparkonce_local.chaos.reconcile.check_topic_values`). Runs in the calling process (the CLI).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING

from sparkonce_local.chaos.model import ChaosOptions
from sparkonce_local.chaos.testbed import MALFORMED_SHARE, START_TIME, ChaosSetup

if TYPE_CHECKING:
    from sparkonce_local.services.producer import ProduceResult

PRODUCE_CHUNK = 10.0
"""Seconds of records per producer (a new one for each chunk)."""
LINGER_MS = 1000
"""The soak producer's ``linger.ms``: records handed over within a second go out as one batch per partition."""


class PacedProducer:
    """Produces sensor readings at ``rate`` per second in a thread until stopped, counting every value's delivery
    report. Runs on the driver (harness)."""

    def __init__(self, setup: ChaosSetup, options: ChaosOptions, rate: float, started: float) -> None:
        self.setup = setup
        self.options = options
        self.rate = rate
        self.stop_event = threading.Event()
        self.results: list[ProduceResult] = []
        self.errors: Counter[str] = Counter()
        """Delivery errors by text."""
        self.chunk_errors: Counter[str] = Counter()
        self.started = started
        self.acked_at: dict[bytes, float] = {}
        """When each value was (last) acknowledged, in seconds since the run started."""
        self.acknowledged: Counter[bytes] = Counter()
        self.refused: Counter[bytes] = Counter()
        self.began = 0.0
        self.thread = threading.Thread(target=self._run, name="chaos-soak-producer", daemon=True)

    def first(self, records: int) -> None:
        self.results.append(self._produce(records, None, index=0))

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> tuple[int, int]:
        """Stop and wait for every delivery report; (records acknowledged, malformed among all produced)."""
        self.stop_event.set()
        self.thread.join()
        self.setup.deliveries = (self.acknowledged, self.refused)
        malformed = sum(r.malformed for r in self.results)
        self.setup.produced[:] = [(self.acknowledged.total(), malformed)]
        return self.acknowledged.total(), malformed

    def _delivered(self, value: bytes, error: str | None) -> None:
        if error is None:
            self.acknowledged[value] += 1
            self.acked_at[value] = round(time.monotonic() - self.started, 2)
        else:
            self.refused[value] += 1
            self.errors[error] += 1

    def records_between(self, windows: list[tuple[float, float]]) -> int:
        """Records the paced producer handed to the broker inside ``windows`` (its pacing clock, so about)."""
        if not self.results or self.began == 0.0:
            return 0
        return sum(int((end - start) * self.rate) for start, end in windows if end > self.began)

    def _run(self) -> None:
        from sparkonce.errors import BrokerError

        self.began = time.monotonic()
        index = 1
        while not self.stop_event.is_set():
            # One producer per chunk: after a broker restart tansu fenced the idempotent producer (PRODUCER_FENCED
            # for every later record, 1,400 records in one 30 s chunk); the next chunk starts a new producer.
            try:
                self.results.append(self._produce(int(self.rate * PRODUCE_CHUNK) + 1, self.rate, index=index))
            except BrokerError as err:
                # Records the broker refused (or did not answer within message.timeout.ms): every delivery
                # report was seen, and the topic check allows each such value at most once. Or the broker was
                # down when the chunk started (nothing produced): the next chunk tries again.
                self.chunk_errors[str(err)[:200]] += 1
                self.stop_event.wait(0.5)  # the broker or its store is coming back
            index += 1

    def _produce(self, count: int, rate: float | None, *, index: int) -> ProduceResult:
        from sparkonce_local.services.producer import produce_sensor_readings

        return produce_sensor_readings(
            self.setup.bootstrap,
            topic=self.setup.config.source.topic,
            count=count,
            rate=rate,
            partitions=self.options.partitions,
            malformed_share=MALFORMED_SHARE,
            seed=self.options.seed * 100_003 + index,
            start_time=START_TIME + timedelta(hours=index),
            # Idempotent, and patient: a record handed over while the broker or its store is down waits for it.
            # Batched over a second: the broker on the object store serves one-record batches slowly (about 50
            # records/s read back on the loaded machine), and the reconciliation reads the whole topic.
            client_config={
                "enable.idempotence": "true",
                "message.timeout.ms": "300000",
                "linger.ms": str(LINGER_MS),
                "log_level": "2",  # not the connection refusals of every broker restart
            },
            timeout=330.0,  # past message.timeout.ms: every record has its delivery report by then
            stop=self.stop_event if rate is not None else None,
            on_delivery=self._delivered,
        )


__all__ = ["LINGER_MS", "PRODUCE_CHUNK", "PacedProducer"]
