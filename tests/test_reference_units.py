"""The reference engine's units of work beside each other on one thread: row locks, not lost writes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kit.contract import ClockMode, LockTimeout, Storage, digest_of
from kit.reference import MemoryBackend

LEASE = timedelta(seconds=30)


def _stores() -> tuple[Storage, Storage]:
    database = MemoryBackend().provision()
    first = database.open("t", clock=ClockMode.TEST)
    first.migrate()
    return first, database.open("t", clock=ClockMode.TEST)


def test_a_write_to_a_row_the_open_unit_changed_is_refused_and_the_unit_still_commits() -> None:
    holder, other = _stores()
    ref = holder.ensure_definition("wf", "1", digest_of(b"x"), b"x").ref
    with holder.transaction():
        holder.start_run("r", ref, {"by": "unit"})
        with pytest.raises(LockTimeout, match="open transaction"):
            other.start_run("r", ref, {"by": "other"})
    run = other.get_run("r")
    assert run is not None and run.input == {"by": "unit"}


def test_claims_skip_rows_the_open_unit_locked_and_take_the_others() -> None:
    holder, other = _stores()
    ref = holder.ensure_definition("wf", "1", digest_of(b"x"), b"x").ref
    for run_id in ("a", "b"):
        holder.start_run(run_id, ref)
    with holder.transaction():
        assert holder.lock_run("a") is not None
        claims = other.claim_runs("w", LEASE, limit=2)
        assert [c.run_id for c in claims] == ["b"]
    assert [c.run_id for c in holder.claim_runs("w2", LEASE, limit=2)] == ["a"]


def test_the_open_unit_reads_rows_committed_beside_it_and_ids_never_repeat() -> None:
    holder, other = _stores()
    ref = holder.ensure_definition("wf", "1", digest_of(b"x"), b"x").ref
    holder.start_run("r", ref)
    with holder.transaction():
        holder.start_run("mine", ref)
        assert other.send_signal("r", "go", 1, "k1").created
        assert [s.dedup_key for s in holder.list_signals("r")] == ["k1"]
        assert holder.send_signal("r", "go", 2, "k2").created
    ids = [s.signal_id for s in other.list_signals("r")]
    assert [s.dedup_key for s in other.list_signals("r")] == ["k1", "k2"] and len(set(ids)) == 2


def test_writes_that_change_nothing_beside_an_open_unit_leave_the_unit_whole() -> None:
    """A second store's write that changes nothing (a signal to an absent run), before and after the unit's own
    write, leaves the open unit intact: it commits, with its write (two units with equal tables are still two)."""
    holder, other = _stores()
    ref = holder.ensure_definition("wf", "1", digest_of(b"x"), b"x").ref
    with holder.transaction():
        assert other.send_signal("absent", "go", {"n": 0}, "first").outcome.value == "not_found"
        holder.start_run("unit-run", ref, {"by": "unit"})
        assert other.send_signal("absent", "go", {"n": 1}, "later").outcome.value == "not_found"
    assert [r.run_id for r in other.list_runs()] == ["unit-run"]
