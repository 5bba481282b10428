"""The two-phase protocol's prepared transaction ids: short enough for PostgreSQL, parsed back to their batch."""

from __future__ import annotations

from sparkonce.sinks.postgres import two_phase


def test_prepared_ids_fit_postgres_and_name_their_batch() -> None:
    long_app = "0b1c3e5a-8d2f-4c11-9a0e-7f3b2d6c9e41:" + "analytics." + "t" * 63
    gid = two_phase.prepared_id(long_app, 123_456_789, "a1b2c3d4", 1_999, 2**40)
    assert len(gid) < 200  # PostgreSQL's limit for a transaction identifier
    assert two_phase.batch_of(gid) == 123_456_789
    assert gid.startswith(f"sparkonce:{two_phase.app_tag(long_app)}:")


def test_apps_get_distinct_tags_and_foreign_ids_are_not_parsed() -> None:
    assert two_phase.app_tag("q1:readings") != two_phase.app_tag("q1:readings2")
    assert two_phase.batch_of("xa-transaction-17") is None
    assert two_phase.batch_of("sparkonce:abc:notanumber:x:0:1") is None
    assert two_phase.batch_of("other:abc:5:x:0:1") is None
