"""A seeded sample of the fuzz corpus (``tests/fuzz_corpus.py``): damaged checkpoint files (``metadata``,
``offsets/N``, ``commits/N``, ``sources/``, a Delta source's offsets), ``_spark_metadata`` and Delta log files (JSON
commits, classic and multi-part Parquet checkpoints, ``_last_checkpoint``), read by the checkpoint reader, the Delta
log reader, history, ``verify``, the Delta source's planning and the doctor (the function and ``sparkonce doctor``).

Every case must end in a correct answer or an error of sparkonce's error tree naming a file of the damaged
checkpoint or table: never another exception, never a damaged file read as something it does not say.
``SPARKONCE_FUZZ_CASES`` and ``SPARKONCE_FUZZ_SEED`` run more or other cases; ``benchmarks/fuzz_corpus.py`` runs
the whole corpus (recorded in docs/reliability.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz_corpus import OUTCOMES, World, build_world, run_corpus, targets

CASES = int(os.environ.get("SPARKONCE_FUZZ_CASES", "200"))
SEED = int(os.environ.get("SPARKONCE_FUZZ_SEED", "20261126"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> World:
    return build_world(tmp_path_factory.mktemp("fuzz"), fixtures_dir)


def test_the_corpus_covers_every_format(world: World) -> None:
    formats = {t.fmt for t in targets(world)}
    assert formats == {
        "metadata",
        "offsets",
        "commits",
        "sources",
        "delta-offsets",
        "spark-metadata",
        "delta-json",
        "delta-checkpoint",
        "last-checkpoint",
    }


def test_damaged_files_end_in_an_answer_or_a_clear_error(world: World) -> None:
    result = run_corpus(world, seed=SEED, cases=CASES)
    assert not result.bad, f"{len(result.bad)} bad read(s) (seed {SEED}):\n" + "\n".join(result.bad[:20])
    by_outcome = {o: sum(v for (_, oo), v in result.counts.items() if oo == o) for o in OUTCOMES}
    assert by_outcome["ok"] and by_outcome["clear-error"], by_outcome
