"""A decision's snapshot is read in one round trip and its commit's writes travel together (PostgreSQL's
pipeline mode, MySQL's multi-statements), in one transaction: a statement that fails half-way through
the pipelined writes, or a fenced UPDATE that changes no row, leaves nothing behind, and the store goes
on working."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

from kit.contract import (
    Backend,
    ClockMode,
    Decision,
    NewCommand,
    NewEvent,
    Outcome,
    RunStatus,
    Snapshot,
    Storage,
    StorageError,
    digest_of,
)
from kit.pytest_plugin import use_backend
from kit.runtime.ceiling import RecordingBackend

LEASE = timedelta(seconds=30)


@pytest.fixture(params=["postgres", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from use_backend(request.param)


def _decision(snapshot: Snapshot) -> Decision:
    """Events, a command and the consumption of the run's finished command: every kind of write."""
    done = [c.command_id for c in snapshot.command_results]
    return Decision(
        RunStatus.BLOCKED,
        events=(NewEvent("step", operation_key=f"e{len(snapshot.history)}"), NewEvent("note")),
        commands=(NewCommand(f"c{len(snapshot.history)}", "work", {"n": 1}),),
        consume_commands=tuple(done),
    )


def _claimed_with_a_result(store: Storage) -> tuple[Any, Snapshot]:
    """A run whose first decision scheduled a command that completed: claimed again, its snapshot."""
    ref = store.ensure_definition("wf", "1", digest_of(b"b"), b"b").ref
    store.start_run("r", ref, {"i": 1})
    (claim,) = store.claim_runs("w", LEASE)
    snapshot = store.load_claimed(claim)
    assert isinstance(snapshot, Snapshot)
    assert store.commit_decision(claim, claim.revision, _decision(snapshot)) is Outcome.COMMITTED
    (work,) = store.claim_commands("cw", LEASE)
    store.complete_command(work, {"ok": True})
    (claim,) = store.claim_runs("w", LEASE)
    snapshot = store.load_claimed(claim)
    assert isinstance(snapshot, Snapshot) and snapshot.command_results
    return claim, snapshot


@pytest.fixture
def opened(server: Backend) -> Iterator[tuple[Storage, RecordingBackend]]:
    """A migrated store on a fresh database of ``server``, whose round trips are counted."""
    recording = RecordingBackend(server)
    database = server.provision()
    try:
        store = database.open("t", clock=ClockMode.TEST)
        try:
            store.migrate()
            yield store, recording
        finally:
            store.close()
    finally:
        recording.stop()
        database.drop()


def test_a_snapshot_takes_one_round_trip_and_a_commit_at_most_three(opened: tuple[Storage, RecordingBackend]) -> None:
    store, recording = opened
    claim, snapshot = _claimed_with_a_result(store)
    before = recording.round_trips
    assert isinstance(store.load_claimed(claim), Snapshot)
    read = recording.round_trips - before
    before = recording.round_trips
    assert store.commit_decision(claim, claim.revision, _decision(snapshot)) is Outcome.COMMITTED
    committed = recording.round_trips - before
    assert read == 1, f"the snapshot took {read} round trips (its BEGIN, reads and COMMIT go together)"
    assert committed <= 3, f"the commit took {committed} round trips (lock and reads, writes, COMMIT)"


class _Rewrite:
    """A statement hook-free way to make one pipelined write go wrong on the server: ``old`` in the SQL of
    every statement that has it is replaced by ``new``."""

    @staticmethod
    def install(store: Any, old: str, new: str) -> None:
        original = store._exec

        def rewritten(cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
            return original(cur, sql.replace(old, new), params)

        store._exec = rewritten

    @staticmethod
    def remove(store: Any) -> None:
        del store._exec


def test_a_write_failing_half_way_through_the_pipeline_leaves_nothing(opened: tuple[Storage, RecordingBackend]) -> None:
    store, _ = opened
    claim, snapshot = _claimed_with_a_result(store)
    before = store.export_state()
    # The command INSERT names a column that does not exist: the server rejects it after the event INSERTs.
    _Rewrite.install(store, "INSERT INTO kit_commands (tenant_id,", "INSERT INTO kit_commands (no_such_column,")
    with pytest.raises(StorageError):
        store.commit_decision(claim, claim.revision, _decision(snapshot))
    _Rewrite.remove(store)
    assert store.export_state() == before, "a commit that failed half-way left rows behind"
    assert store.commit_decision(claim, claim.revision, _decision(snapshot)) is Outcome.COMMITTED
    history = store.get_history("r")
    assert [e.seq for e in history] == list(range(1, len(history) + 1))


def test_a_fenced_update_that_changes_no_row_commits_nothing(opened: tuple[Storage, RecordingBackend]) -> None:
    """Where the COMMIT travels with the writes, the fenced UPDATE itself must stop it on the server."""
    store, _ = opened
    claim, snapshot = _claimed_with_a_result(store)
    before = store.export_state()
    _Rewrite.install(store, "AND revision = ? AND claim_generation = ?", "AND revision = ? + 1 AND claim_generation = ?")
    with pytest.raises(StorageError, match="fenced update"):
        store.commit_decision(claim, claim.revision, _decision(snapshot))
    _Rewrite.remove(store)
    assert store.export_state() == before, "a commit whose fenced update changed no row left rows behind"
    assert store.commit_decision(claim, claim.revision, _decision(snapshot)) is Outcome.COMMITTED
