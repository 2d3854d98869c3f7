"""Runs: start with idempotency, reads, stable keyset pagination, cancellation."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest

from kit.conformance._harness import AreaChecks, Threads, requires
from kit.contract import (
    Capability,
    Decision,
    DefinitionMismatch,
    DefinitionNotFound,
    DefinitionRef,
    NewEvent,
    Promise,
    RunAlreadyExists,
    RunStatus,
    StartResult,
    Storage,
    digest_of,
    iter_pages,
)
from kit.contract.json_exact import assert_json_equal, json_equal
from kit.contract.outcomes import Outcome
from kit.inspect import exports_runs, observable_state_from_reads, run_state

__all__ = ["RunChecks"]


class RunChecks(AreaChecks):
    area = "runs"

    def test_start_creates_pending_run(self, store: Storage) -> None:
        """start_run() creates a pending run at revision 0, generation 0, with its input and definition."""
        ref = self.define(store)
        earliest = store.now()
        result = store.start_run("run-1", ref, {"order": 42})
        latest = store.now()
        run = result.run
        assert result.created
        assert (run.status, run.revision, run.claim_generation, run.claim_owner) == (RunStatus.PENDING, 0, 0, None)
        assert run.definition == ref
        assert_json_equal(run.input, {"order": 42}, "the run input")
        assert earliest <= run.created_at <= latest, "created_at is not the store clock's time of the start"
        assert run.output is None and not run.cancel_requested
        assert_json_equal(store.get_run("run-1"), run, "get_run()")

    @requires(Promise.DEFINITIONS)
    def test_start_requires_an_ensured_definition(self, store: Storage) -> None:
        """start_run() with an unknown definition raises DefinitionNotFound and stores nothing."""
        with pytest.raises(DefinitionNotFound):
            store.start_run("run-1", DefinitionRef("ghost", "1", digest_of(b"x")))
        assert store.get_run("run-1") is None

    @requires(Promise.DEFINITIONS)
    def test_start_requires_the_stored_digest(self, store: Storage) -> None:
        """start_run() naming a different digest than the stored one raises DefinitionMismatch."""
        ref = self.define(store, body=b"v1")
        with pytest.raises(DefinitionMismatch):
            store.start_run("run-1", DefinitionRef(ref.name, ref.version, digest_of(b"v2")))
        assert store.get_run("run-1") is None

    def test_repeated_idempotency_key_returns_existing_run(self, store: Storage) -> None:
        """A repeated idempotency key returns the existing run with created=False and changes nothing."""
        ref = self.define(store)
        first = store.start_run("run-1", ref, {"v": 1}, idempotency_key="order-42")
        self.let_time_pass(store)
        again = store.start_run("run-2", ref, {"v": 2}, idempotency_key="order-42")
        assert not again.created and again.run == first.run
        assert store.get_run("run-2") is None and store.get_run("run-1") == first.run

    def test_retried_start_returns_existing_run(self, store: Storage) -> None:
        """A retried start (same run id and key, its ack lost) returns the run as it now is, created=False, changing nothing."""
        ref = self.define(store)
        first = store.start_run("run-1", ref, {"v": 1}, idempotency_key="order-42")
        self.let_time_pass(store)
        before = self.observed(store)
        again = store.start_run("run-1", ref, {"v": 1}, idempotency_key="order-42")
        assert not again.created and again.run == first.run, f"the retry did not return the existing run: {again}"
        assert self.observed(store) == before, "the retried start changed the store"
        self.claim_one(store)
        before = self.observed(store)
        late = store.start_run("run-1", ref, {"v": 1}, idempotency_key="order-42")
        assert not late.created and json_equal(late.run, store.get_run("run-1")), f"a retry after a claim did not return the run as it is: {late}"
        assert late.run.status is RunStatus.RUNNING and self.observed(store) == before, "the late retry changed the run"

    def test_duplicate_run_id_is_refused(self, store: Storage) -> None:
        """Starting an existing run id without its idempotency key raises RunAlreadyExists."""
        run = self.start(store, "run-1", input={"v": 1})
        with pytest.raises(RunAlreadyExists):
            store.start_run("run-1", run.definition, {"v": 2})
        assert store.get_run("run-1") == run

    @requires(Capability.CONCURRENT_CONNECTIONS)
    def test_concurrent_starts_with_one_key_create_one_run(self, open_store: Callable[..., Storage]) -> None:
        """Concurrent starts repeating one idempotency key create exactly one run; all get it back."""
        stores = [open_store() for _ in range(4)]
        ref = self.define(stores[0])
        results = Threads.run([
            partial(s.start_run, f"run-{i}", ref, {"i": i}, idempotency_key="same")
            for i, s in enumerate(stores)
        ])
        assert sum(r.created for r in results) == 1
        assert len({r.run.run_id for r in results}) == 1
        assert len(list(iter_pages(stores[0]))) == 1

    @requires(Capability.CONCURRENT_CONNECTIONS)
    def test_concurrent_starts_of_one_run_id_create_one_run(self, open_store: Callable[..., Storage]) -> None:
        """Concurrent first starts of one run id without a key create one run; every other caller gets RunAlreadyExists."""
        stores = [open_store() for _ in range(4)]
        ref = self.define(stores[0])

        def start(store: Storage, i: int) -> StartResult | RunAlreadyExists:
            try:
                return store.start_run("run-1", ref, {"i": i})
            except RunAlreadyExists as refused:
                return refused

        results = Threads.run([partial(start, s, i) for i, s in enumerate(stores)])
        created = [r for r in results if isinstance(r, StartResult) and r.created]
        refused = [r for r in results if isinstance(r, RunAlreadyExists)]
        assert (len(created), len(refused)) == (1, 3), f"expected one created and three RunAlreadyExists, got {results}"
        runs = list(iter_pages(stores[0]))
        assert runs == [created[0].run], f"expected exactly the winner's run stored, got {runs}"

    def test_get_absent_run_is_none(self, store: Storage) -> None:
        """get_run() of an unknown id returns nothing."""
        assert store.get_run("nope") is None

    def test_list_runs_orders_by_code_point(self, store: Storage) -> None:
        """list_runs() orders run ids by code point, whatever the database's default collation."""
        ref = self.define(store)
        ids = ["b", "B", "a", "\u00e9", "e\u0301", "Z", "~", "10", "9", "a-", "a_", "\u4e2d"]
        for run_id in ids:
            store.start_run(run_id, ref)
        assert [r.run_id for r in store.list_runs(limit=100)] == sorted(ids)

    def test_pagination_is_stable(self, store: Storage) -> None:
        """Keyset pages concatenate to the full ordered list with no run missing or repeated."""
        ref = self.define(store)
        ids = [f"run-{i:03d}" for i in range(23)] + ["Run-x", "\u00e9t\u00e9"]
        for run_id in reversed(ids):
            store.start_run(run_id, ref)
        paged = [r.run_id for r in iter_pages(store, page=7)]
        assert paged == sorted(ids)

    def test_pagination_after_last_is_empty(self, store: Storage) -> None:
        """A page after the last run id is empty."""
        self.start(store, "run-1")
        assert store.list_runs(after="run-1") == []

    def test_list_runs_filters_by_status(self, store: Storage) -> None:
        """list_runs(status=...) returns exactly the runs in that status."""
        self.completed(store, "done")
        self.start(store, "waiting", definition=self.define(store))
        assert [r.run_id for r in store.list_runs(status=RunStatus.COMPLETED)] == ["done"]
        assert [r.run_id for r in store.list_runs(status=RunStatus.PENDING)] == ["waiting"]

    def test_history_reads_page_by_seq(self, store: Storage) -> None:
        """get_history() pages by seq with after_seq and limit."""
        claim = self.started_and_claimed(store)
        events = tuple(NewEvent("e", {"i": i}) for i in range(5))
        assert store.commit_decision(claim, 0, Decision(RunStatus.PENDING, events=events)) is Outcome.COMMITTED
        assert [e.seq for e in store.get_history("run-1", after_seq=2, limit=2)] == [3, 4]
        assert_json_equal([e.payload["i"] for e in store.get_history("run-1")], [0, 1, 2, 3, 4], "the payloads in history order")

    @requires(Promise.COMMANDS, Promise.TIMERS, Promise.SIGNALS)
    def test_export_state_matches_reads(self, store: Storage) -> None:
        """A store's optional export_state() shows exactly what its individual reads show; so does
        export_state(run_ids=...) for the runs named that exist, when the store takes run ids."""
        if not callable(getattr(store, "export_state", None)):
            pytest.skip("unsupported: the store has no export_state() (optional; the reads are used instead)")
        self.blocked_on_command(store, "a")
        self.blocked_on_timer(store, "b")
        self.completed(store, "c")
        self.start(store, "d", definition=self.define(store))
        store.send_signal("a", "go", {"x": 1}, "s1")
        exported = store.export_state()  # type: ignore[attr-defined]
        assert_json_equal(exported, observable_state_from_reads(store), "export_state()")
        assert list(exported) == ["a", "b", "c", "d"]
        if exports_runs(store):
            some = store.export_state(run_ids=["c", "absent", "a", "c"])  # type: ignore[attr-defined]
            assert_json_equal(some, {"a": run_state(store, "a"), "c": run_state(store, "c")},
                              "export_state(run_ids=['c', 'absent', 'a', 'c'])")
            assert list(some) == ["a", "c"]
            assert_json_equal(store.export_state(run_ids=[]), {}, "export_state(run_ids=[])")  # type: ignore[attr-defined]

    @requires(Promise.CANCEL_REQUESTS, Promise.WAKE_ON_INPUT)
    def test_cancel_request_marks_and_wakes_blocked_run(self, store: Storage) -> None:
        """request_cancel() sets cancel_requested and makes a blocked run runnable."""
        self.blocked(store)
        assert store.request_cancel("run-1", "user asked") is Outcome.COMMITTED
        run = store.get_run("run-1")
        assert run is not None and run.cancel_requested and run.cancel_reason == "user asked"
        assert run.status is RunStatus.PENDING
        assert self.claim_one(store).run_id == "run-1"

    @requires(Promise.CANCEL_REQUESTS)
    def test_cancel_request_twice_is_duplicate(self, store: Storage) -> None:
        """A second request_cancel() on the same run is a duplicate and changes nothing."""
        self.waiting(store)
        store.request_cancel("run-1", "first")
        before = store.get_run("run-1")
        assert store.request_cancel("run-1", "second") is Outcome.DUPLICATE
        assert_json_equal(store.get_run("run-1"), before, "the run")

    @requires(Promise.CANCEL_REQUESTS)
    def test_cancel_request_on_closed_or_absent_run(self, store: Storage) -> None:
        """request_cancel() is 'terminal' on a closed run and 'not_found' on an unknown one."""
        self.completed(store)
        before = store.get_run("run-1")
        assert store.request_cancel("run-1") is Outcome.TERMINAL
        assert_json_equal(store.get_run("run-1"), before, "the run")
        assert store.request_cancel("ghost") is Outcome.NOT_FOUND

    @requires(Promise.CANCEL_REQUESTS, Promise.WAKE_ON_INPUT)
    def test_cancel_request_on_running_run_is_honoured_by_commit(self, store: Storage) -> None:
        """A cancel landing on a running run marks it, and a blocked commit then leaves it runnable."""
        claim = self.started_and_claimed(store)
        assert store.request_cancel("run-1") is Outcome.COMMITTED
        running = store.get_run("run-1")
        assert running is not None and running.status is RunStatus.RUNNING and running.wakeup_pending
        assert store.commit_decision(claim, 0, Decision(RunStatus.BLOCKED)) is Outcome.COMMITTED
        assert store.get_run("run-1").status is RunStatus.PENDING  # type: ignore[union-attr]
