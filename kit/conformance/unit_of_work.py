"""Unit of work: one transaction however deeply nested, rolled back together, callbacks after commit."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

import pytest

from kit.conformance._harness import LEASE, AreaChecks, Threads, requires
from kit.connections import COMMIT_POINT
from kit.contract import (
    Capability,
    Decision,
    NewCommand,
    NewEvent,
    NotInTransaction,
    Promise,
    Storage,
    StorageError,
    TransactionRolledBack,
)
from kit.contract.outcomes import Outcome
from kit.faults import InjectedFault

__all__ = ["UnitOfWorkChecks"]


class _Boom(Exception):
    pass


@requires(Promise.UNIT_OF_WORK)
class UnitOfWorkChecks(AreaChecks):
    area = "unit_of_work"

    def test_operations_commit_together(self, store: Storage) -> None:
        """Operations inside transaction() all land when the block exits normally."""
        ref = self.define(store)
        with store.transaction():
            store.start_run("a", ref)
            store.start_run("b", ref)
        assert [r.run_id for r in store.list_runs()] == ["a", "b"]

    def test_exception_rolls_back_everything_and_reraises(self, store: Storage) -> None:
        """An exception in the block rolls back every operation in it and propagates unchanged."""
        ref = self.define(store)
        with pytest.raises(_Boom), store.transaction():
            store.start_run("a", ref)
            if self.promised(Promise.SIGNALS):
                store.send_signal("a", "go", {}, "s")
            raise _Boom()
        assert store.get_run("a") is None

    def test_nested_blocks_reuse_the_outer_transaction(self, store: Storage) -> None:
        """An inner block's writes roll back when the outer block fails after it."""
        ref = self.define(store)
        with pytest.raises(_Boom), store.transaction():
            with store.transaction():
                store.start_run("inner", ref)
            store.start_run("outer", ref)
            raise _Boom()
        assert store.list_runs() == []

    def test_inner_failure_rolls_back_the_whole_unit(self, store: Storage) -> None:
        """A failed inner block dooms the unit: swallowing its error cannot commit half of it."""
        ref = self.define(store)
        with pytest.raises(TransactionRolledBack), store.transaction():
            store.start_run("first", ref)
            try:
                with store.transaction():
                    store.start_run("second", ref)
                    raise _Boom()
            except _Boom:
                pass
        assert store.list_runs() == []

    def test_callbacks_run_once_in_order_after_outermost_commit(self, store: Storage) -> None:
        """After-commit callbacks run once each, in registration order, only after the outermost commit."""
        calls: list[str] = []
        with store.transaction() as outer:
            outer.on_commit(lambda: calls.append("outer-1"))
            with store.transaction() as inner:
                inner.on_commit(lambda: calls.append("inner"))
            assert calls == []
            outer.on_commit(lambda: calls.append("outer-2"))
            assert calls == []
        assert calls == ["outer-1", "inner", "outer-2"]

    def test_callbacks_never_run_after_rollback(self, store: Storage) -> None:
        """After-commit callbacks registered in a rolled-back unit never run."""
        calls: list[str] = []
        with pytest.raises(_Boom), store.transaction() as tx:
            tx.on_commit(lambda: calls.append("x"))
            raise _Boom()
        with store.transaction():
            pass
        assert calls == []

    @requires(Capability.STATEMENT_FAULTS)
    def test_callbacks_never_run_when_commit_fails(self, store: Storage, open_store: Callable[..., Storage]) -> None:
        """When the commit itself fails, nothing lands and no callback runs."""
        ref = self.define(store)
        calls: list[str] = []
        armed: list[bool] = []

        def fail_commit(statement: str) -> None:
            if armed and statement == COMMIT_POINT:
                raise InjectedFault("injected fault at COMMIT")

        failing = open_store(migrate=False, statement_hook=fail_commit)
        armed.append(True)
        with pytest.raises(StorageError), failing.transaction() as tx:
            tx.on_commit(lambda: calls.append("x"))
            failing.start_run("a", ref)
        assert calls == [] and store.get_run("a") is None

    def test_exception_rolls_back_claims_and_commits(self, store: Storage) -> None:
        """A claim and a fenced commit made inside a failed unit roll back with it: the run is as before."""
        self.start(store)
        before = self.observed(store)
        with pytest.raises(_Boom), store.transaction():
            claim = self.claim_one(store)
            commands = (NewCommand("op-1", "do"),) if self.promised(Promise.COMMANDS) else ()
            decision = Decision(self.waiting_status(), events=(NewEvent("step"),), commands=commands)
            assert store.commit_decision(claim, 0, decision) is Outcome.COMMITTED
            raise _Boom()
        assert self.observed(store) == before, "a claim or commit inside the failed unit survived its rollback"
        again = self.claim_one(store)
        if self.promised(Promise.GENERATION_FENCING):
            assert again.generation == 1, "the rolled-back claim still counts as a generation"

    @requires(Capability.SKIP_LOCKED, Capability.CONCURRENT_CONNECTIONS)
    def test_lock_run_holds_the_row_against_claimers(self, open_store: Callable[..., Storage]) -> None:
        """While a unit holds lock_run() on a pending run, a concurrent claimer skips that run; after it, claims it."""
        holder, other = open_store(), open_store()
        self.start(holder)
        locked, got = Threads.beside_open_transaction(
            holder, partial(holder.lock_run, "run-1"), partial(other.claim_runs, "other", LEASE, 1),
            "a claimer beside lock_run()",
        )
        assert locked is not None, "lock_run() found no run to lock"
        assert got == [], f"a claimer took a run that lock_run() held locked: {got}"
        assert [c.run_id for c in other.claim_runs("other", LEASE, limit=1)] == ["run-1"]

    def test_lock_run_outside_transaction_is_refused(self, store: Storage) -> None:
        """lock_run() outside a transaction raises NotInTransaction."""
        self.start(store)
        with pytest.raises(NotInTransaction):
            store.lock_run("run-1")

    def test_lock_run_inside_transaction_returns_the_run(self, store: Storage) -> None:
        """lock_run() inside a transaction returns the run (and nothing for an unknown id)."""
        run = self.start(store)
        with store.transaction():
            assert store.lock_run("run-1") == run
            assert store.lock_run("ghost") is None

    @requires(Capability.CONCURRENT_CONNECTIONS)
    def test_uncommitted_writes_are_invisible_to_others(self, store: Storage, open_store: Callable[..., Storage]) -> None:
        """Writes inside an open unit are invisible to other connections until it commits."""
        reader = open_store()
        ref = self.define(store)
        seen: list[object] = []
        with store.transaction():
            store.start_run("a", ref)
            thread = threading.Thread(target=lambda: seen.append(reader.get_run("a")), daemon=True)
            thread.start()
            thread.join(10)
            if thread.is_alive():
                pytest.fail("a reader blocked on an open write transaction")
        assert seen == [None]
        assert reader.get_run("a") is not None
