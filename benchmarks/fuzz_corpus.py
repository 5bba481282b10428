"""The fuzz corpus (issue 26): seeded damaged files fed to sparkonce's readers, and malformed Kafka record values fed
to the bronze stage's parse.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/fuzz_corpus.py --seed S --cases N [--records R]``. ``--cases``
damaged files (checkpoint ``metadata``/``offsets``/``commits``/``sources``, a Delta source's offsets,
``_spark_metadata``, Delta JSON commits, Parquet checkpoints, ``_last_checkpoint``; the engine and the reads are
``tests/fuzz_corpus.py``, whose seeded sample runs in ``tests/unit/test_fuzz_files.py``) and ``--records`` mutated
record values (default 0: no Spark), parsed in one Spark job as the bronze stage parses them (the quickstart's
schema). A record must land in bronze with the values it says, or in quarantine with a reason; undeclared fields
fail the batch with ``SchemaMismatchError`` (``drift = "fail"``).

Prints counts per format and outcome (ok / clear-error / traceback / wrong-answer) and every bad case; exits 1
on any traceback or wrong answer.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzz_corpus import OUTCOMES, CorpusResult, build_world, run_corpus, run_records  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--records", type=int, default=0)
    args = parser.parse_args()
    bad: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fuzz-corpus-") as tmp:
        started = time.perf_counter()
        world = build_world(Path(tmp) / "world", ROOT / "tests" / "fixtures")
        result: CorpusResult = run_corpus(world, seed=args.seed, cases=args.cases)
        seconds = time.perf_counter() - started
        formats = sorted({f for f, _ in result.counts})
        print(f"fuzz corpus: seed {args.seed}, {args.cases} file cases, {seconds:.0f} s")
        print(f"{'format':<18}" + "".join(f"{o:>14}" for o in OUTCOMES))
        for fmt in formats:
            print(f"{fmt:<18}" + "".join(f"{result.counts[(fmt, o)]:>14}" for o in OUTCOMES))
        totals = {o: sum(v for (_, oo), v in result.counts.items() if oo == o) for o in OUTCOMES}
        print(f"{'total':<18}" + "".join(f"{totals[o]:>14}" for o in OUTCOMES))
        print("clear errors by type (per read): " + ", ".join(f"{k} {v}" for k, v in result.errors.most_common()))
        bad += result.bad
        from sparkonce.delta.txn.commit import load_table

        for table in world.tables:  # delta-rs still works after the panics it may have raised on damaged files
            try:
                load_table(str(table)).version()
            except BaseException as err:
                bad.append(f"the undamaged table {table} no longer opens after the corpus: {type(err).__name__}: {err}")
        if args.records:
            started = time.perf_counter()
            from sparkonce.spark import local_session

            spark = local_session(app_name="fuzz-records")
            outcomes, record_bad = run_records(spark, args.seed, args.records, Path(tmp))
            seconds = time.perf_counter() - started
            print(
                f"kafka records: {args.records} through the bronze parse, {seconds:.0f} s: "
                + ", ".join(f"{o} {outcomes[o]}" for o in OUTCOMES)
            )
            bad += record_bad
    for line in bad[:200]:
        print("BAD", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
