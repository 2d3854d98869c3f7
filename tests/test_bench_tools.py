"""The benchmark's measuring tools measure what they say: the statement counter counts every statement
a workload's stores send, and the raw replay re-sends exactly the recorded statements, in order."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from kit.contract import Backend, ClockMode, Decision, RunStatus, digest_of
from kit.pytest_plugin import use_backend
from kit.runtime.ceiling import RecordingBackend, replay
from kit.runtime.counting import CountingBackend


@pytest.fixture(params=["postgres", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from use_backend(request.param)


def _work(backend: Backend) -> int:
    """A short workload on a fresh database; returns how many statements its hook saw."""
    seen: list[str] = []
    database = backend.provision()
    try:
        store = database.open("t", clock=ClockMode.TEST, statement_hook=seen.append)
        try:
            store.migrate()
            ref = store.ensure_definition("wf", "1", digest_of(b"b"), b"b").ref
            for i in range(3):
                store.start_run(f"run-{i}", ref, {"i": i})
            for claim in store.claim_runs("w1", timedelta(seconds=30), limit=3):
                store.commit_decision(claim, claim.revision, Decision(RunStatus.COMPLETED, output={"ok": 1}))
        finally:
            store.close()
    finally:
        database.drop()
    return len([s for s in seen if s != "COMMITTED"])


def test_the_replay_resends_every_recorded_statement_in_order_without_failures(server: Backend) -> None:
    recording = RecordingBackend(server)
    sent = _work(recording)  # type: ignore[arg-type]
    units = recording.stop()
    recorded = sum(len(unit) for unit in units)
    assert recorded >= sent > 0, f"the recording missed statements: {recorded} recorded, {sent} sent"
    result = replay(server, units)
    assert result.failed_units == 0, result.first_failure
    assert result.statements >= recorded  # a folded BEGIN is re-sent as two statements in one round trip
    assert result.units == len(units)


def test_the_counter_counts_every_statement_and_stops_when_told() -> None:
    from kit.backends import resolve

    counting = CountingBackend(resolve("sqlite"))
    try:
        database = counting.provision()
        store = database.open("t", clock=ClockMode.TEST)
        try:
            store.migrate()
            before = counting.counter.count
            assert before > 0
            store.get_run("x")
            after = counting.counter.stop()
            assert after > before
            store.get_run("x")
            assert counting.counter.count == after, "a stopped counter went on counting"
        finally:
            store.close()
            database.drop()
    finally:
        counting.close()


def test_the_steady_rate_leaves_out_the_start_and_the_tail() -> None:
    from kit.runtime.bench import steady_rate

    steady = [float(i) / 100 for i in range(100)]  # 100 decisions/s
    assert steady_rate(steady) == pytest.approx(100.0)
    slow_ends = [-5.0, -4.0, -3.0, *steady, 10.0, 20.0, 30.0]  # a slow start and a long tail
    assert steady_rate(slow_ends, trim=0.1) == pytest.approx(100.0, rel=0.2)
    assert steady_rate([0.0, 1.0]) == 0.0  # too few commits to tell


def test_timed_checks_run_with_their_bytecode_cached_in_the_bench_folder_only(tmp_path: Path) -> None:
    """The bench's ``kit check`` runs cache their bytecode and pytest's rewritten suites in the folder it gives
    (whatever PYTHONDONTWRITEBYTECODE says), so timed rounds measure checking rather than compiling."""
    from kit.runtime.bench import _check_seconds

    pycache = tmp_path / "pycache"
    seconds = _check_seconds("memory", per_check=False, pycache=str(pycache))
    assert seconds is not None, "kit check memory --profile none did not pass"
    cached = [p.name for p in pycache.rglob("*.pyc")]
    assert any(name.startswith("runs.") and "pytest" in name for name in cached), (
        f"pytest's rewritten conformance modules were not cached there: {sorted(cached)[:20]}")
    assert any(name.startswith("cli.") for name in cached), "the kit's own modules were not cached there"


def test_the_stress_memory_goal_is_the_median_pair_and_leaves_out_pairs_that_prove_nothing() -> None:
    """Each pair is a 1x and a 10x run; the goal is the median pair's ratio, so one short run that happened to
    record little history cannot decide it. A pair whose 10x run did not grow the history 5x is left out and
    said so; a run that found a violation is flagged."""
    from kit.runtime.bench import _stress_memory

    runs = iter([
        (10_000, 4_000, True), (100_000, 8_000, True),   # pair 1: 2.00
        (15_000, 6_000, True), (120_000, 6_600, True),   # pair 2: 1.10
        (15_000, 6_000, True), (40_000, 9_000, True),    # pair 3: left out (2.7x the history)
        (15_000, 6_000, False), (130_000, 7_200, True),  # pair 4: 1.20, its 1x run found a violation
    ])

    def measure(spec: str, seconds: float, workers: int, count: int) -> dict[str, object]:
        entries, heap_kb, valid = next(runs)
        return {"history_entries": entries, "check_heap_peak_kb": heap_kb, "total_peak_kb": 80_000, "valid": valid}

    ratio, detail = _stress_memory(4, measure)
    assert ratio == pytest.approx(1.20)
    assert detail.startswith("median of 3 pairs")
    assert "pair 3: left out, the 10x run recorded only 2.7x the history" in detail
    assert "(the run found a violation)" in detail
    assert "pair 1: 2.00, 45.5 B of peak per added history entry" in detail  # (8000 - 4000) KiB / 90,000 entries
    none, why = _stress_memory(1, lambda *_: {"history_entries": 1, "check_heap_peak_kb": 1, "total_peak_kb": 1})
    assert none is None and why.startswith("no verdict")
