"""Signals: an idempotent inbox, deduplicated per run, closed with the run."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from kit.conformance._harness import AreaChecks, Threads, requires
from kit.contract import Capability, Decision, Promise, RunStatus, SignalStatus, Storage
from kit.contract.outcomes import Outcome

__all__ = ["SignalChecks"]


@requires(Promise.SIGNALS)
class SignalChecks(AreaChecks):
    area = "signals"

    def test_send_stores_pending_signal_and_wakes_run(self, store: Storage) -> None:
        """send_signal() stores a pending signal with its payload and makes a blocked run runnable."""
        self.waiting(store)
        earliest = store.now()
        receipt = store.send_signal("run-1", "approve", {"by": "ana"}, "sig-1")
        latest = store.now()
        assert receipt.outcome is Outcome.COMMITTED and receipt.created
        signal = receipt.signal
        assert signal is not None and (signal.name, signal.payload, signal.status) == ("approve", {"by": "ana"}, SignalStatus.PENDING)
        assert earliest <= signal.sent_at <= latest and store.list_signals("run-1") == [signal]
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.PENDING

    def test_duplicate_returns_existing_and_keeps_payload(self, store: Storage) -> None:
        """The same (run, dedup key) again returns the existing signal, created=False, payload untouched."""
        self.waiting(store)
        first = store.send_signal("run-1", "approve", {"v": 1}, "sig-1")
        before = self.observed(store)
        again = store.send_signal("run-1", "approve", {"v": 2}, "sig-1")
        assert again.outcome is Outcome.DUPLICATE and not again.created and again.signal == first.signal
        assert self.observed(store) == before

    @requires(Capability.CONCURRENT_CONNECTIONS)
    def test_concurrent_duplicates_store_one_signal(self, open_store: Callable[..., Storage]) -> None:
        """Concurrent sends of one dedup key store exactly one signal; every caller gets it back."""
        stores = [open_store() for _ in range(4)]
        self.waiting(stores[0])
        receipts = Threads.run([partial(s.send_signal, "run-1", "go", {"i": i}, "dup") for i, s in enumerate(stores)])
        assert sum(r.created for r in receipts) == 1
        assert len({r.signal.signal_id for r in receipts if r.signal}) == 1
        assert len(stores[0].list_signals("run-1")) == 1

    def test_terminal_run_rejects_signal(self, store: Storage) -> None:
        """A signal to a terminal run is rejected with terminal and nothing is stored."""
        self.completed(store)
        before = self.observed(store)
        receipt = store.send_signal("run-1", "late", {}, "late-1")
        assert receipt.outcome is Outcome.TERMINAL and receipt.signal is None
        assert self.observed(store) == before

    def test_signal_to_absent_run_is_not_found(self, store: Storage) -> None:
        """A signal to an unknown run returns not_found and stores nothing."""
        assert store.send_signal("ghost", "go", {}, "s").outcome is Outcome.NOT_FOUND
        assert store.list_signals("ghost") == []

    def test_duplicate_after_close_is_still_duplicate(self, store: Storage) -> None:
        """A retried send whose first copy landed before the run closed is answered as a duplicate."""
        self.waiting(store)
        first = store.send_signal("run-1", "go", {}, "sig-1")
        claim = self.claim_one(store)
        store.commit_decision(claim, claim.revision, Decision(RunStatus.COMPLETED))
        again = store.send_signal("run-1", "go", {}, "sig-1")
        assert again.outcome is Outcome.DUPLICATE and again.signal == first.signal

    def test_dedup_keys_are_per_run(self, store: Storage) -> None:
        """One dedup key on two runs is two signals."""
        self.waiting(store, "run-1")
        self.waiting(store, "run-2")
        assert store.send_signal("run-1", "go", {}, "same").created
        assert store.send_signal("run-2", "go", {}, "same").created

    @requires(Promise.WAKE_ON_INPUT)
    def test_signal_on_running_run_marks_it(self, store: Storage) -> None:
        """A signal landing on a running run leaves the mark its commit must honour."""
        self.started_and_claimed(store)
        store.send_signal("run-1", "go", {}, "sig-1")
        run = store.get_run("run-1")
        assert run is not None and run.status is RunStatus.RUNNING and run.wakeup_pending

    def test_signals_are_listed_in_send_order(self, store: Storage) -> None:
        """Signals come back in the order they were sent."""
        self.waiting(store)
        keys = ["z", "a", "m", "b"]
        for k in keys:
            store.send_signal("run-1", "go", {"k": k}, k)
        assert [s.dedup_key for s in store.list_signals("run-1")] == keys
