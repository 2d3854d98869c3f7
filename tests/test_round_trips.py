"""Fewer round trips: where the driver can (``fold_begin``), a transaction's BEGIN travels with its
first statement (in one string, or one pipeline), and never after any statement of the transaction."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from kit.contract import (
    Backend,
    ClockMode,
    Decision,
    DefinitionRef,
    NewCommand,
    NewEvent,
    Outcome,
    RunStatus,
    digest_of,
)
from kit.pytest_plugin import use_backend


@pytest.fixture(params=["postgres", "mysql", "sqlite"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from use_backend(request.param)


def _statements(backend: Backend, action: str) -> list[str]:
    database = backend.provision()
    seen: list[str] = []
    try:
        store = database.open("t", clock=ClockMode.TEST, statement_hook=seen.append)
        try:
            store.migrate()
            seen.clear()
            if action == "claim":
                store.claim_runs("w1", timedelta(seconds=30), limit=1)
            else:
                store.get_run("run-1")
        finally:
            store.close()
    finally:
        database.drop()
    return [s for s in seen if s != "COMMITTED"]


def test_a_claim_opens_its_transaction_and_reads_the_clock_in_one_round_trip(backend: Backend) -> None:
    statements = _statements(backend, "claim")
    folds = bool(getattr(getattr(backend, "dialect", None), "fold_begin", False))
    first = statements[0].upper()
    assert first.startswith(("BEGIN", "SET TRANSACTION", "START TRANSACTION")), statements
    if folds:
        assert "; " in first, f"the BEGIN was sent on its own: {statements[:2]}"
        assert "KIT_TEST_CLOCK" in first, f"the clock was not read in the claim's first round trip: {statements[:2]}"
    assert statements[-1] == "COMMIT"


def test_a_read_with_parameters_still_starts_its_transaction_first(backend: Backend) -> None:
    statements = _statements(backend, "read")
    assert statements[0].upper().startswith(("BEGIN", "SET TRANSACTION", "START TRANSACTION")), statements
    # The read follows the BEGIN: in its own statement, or folded into the BEGIN's string (MySQL).
    assert any("kit_runs" in s for s in statements), statements


def _points(backend: Backend, action: str) -> list[str]:
    """The statement points (each one round trip where the dialect folds) of one ``action`` on a run that
    waits for it: ``start``, ``commit`` (a decision that appends an event and schedules a command) or
    ``complete`` (that command's completion)."""
    database = backend.provision()
    seen: list[str] = []
    try:
        store = database.open("t", clock=ClockMode.TEST, statement_hook=seen.append)
        try:
            store.migrate()
            body = b"wf"
            definition = store.ensure_definition("wf", "1", digest_of(body), body)
            ref = DefinitionRef(definition.name, definition.version, definition.digest)
            if action == "start":
                seen.clear()
                store.start_run("run-1", ref, {"n": 1})
                return [s for s in seen if s != "COMMITTED"]
            store.start_run("run-1", ref, {"n": 1})
            claim = store.claim_runs("w1", timedelta(seconds=30))[0]
            decision = Decision(
                RunStatus.BLOCKED, events=(NewEvent("step", {"n": 1}, "op-1"),),
                commands=(NewCommand("op-1", "charge", {"n": 1}),),
            )
            if action == "commit":
                seen.clear()
            assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
            if action == "complete":
                command = store.claim_commands("w2", timedelta(seconds=30))[0]
                seen.clear()
                assert store.complete_command(command, {"ok": True}) is Outcome.COMPLETED
        finally:
            store.close()
    finally:
        database.drop()
    return [s for s in seen if s != "COMMITTED"]


def _folds(backend: Backend) -> bool:
    return bool(getattr(getattr(backend, "dialect", None), "fold_begin", False))


def test_a_completion_locks_reads_the_clock_then_writes_in_two_round_trips_before_its_commit(
    backend: Backend,
) -> None:
    points = _points(backend, "complete")
    assert points[-1] == "COMMIT"
    if _folds(backend):
        assert len(points) == 3, points
        first = points[0].upper()
        assert "FROM KIT_RUNS" in first and "FROM KIT_COMMANDS" in first and "KIT_TEST_CLOCK" in first, points[0]
        assert points[1].upper().count("UPDATE ") == 2, points[1]


def test_a_decision_commit_reads_behind_the_lock_in_its_first_round_trip(backend: Backend) -> None:
    points = _points(backend, "commit")
    assert points[-1] == "COMMIT"
    if _folds(backend):
        assert len(points) == 3, points
        first = points[0].upper()
        assert first.index("FROM KIT_RUNS") < first.index("KIT_TEST_CLOCK") < first.index("FROM KIT_EVENTS"), first
        assert "INSERT INTO KIT_EVENTS" in points[1].upper() and "UPDATE KIT_RUNS" in points[1].upper(), points[1]


def test_a_start_reads_its_definition_and_the_clock_in_its_first_round_trip(backend: Backend) -> None:
    points = _points(backend, "start")
    assert points[-1] == "COMMIT"
    if _folds(backend):
        first = points[0].upper()
        assert "FROM KIT_DEFINITIONS" in first and "KIT_TEST_CLOCK" in first, points
        assert len(points) <= 4, points
