"""What every queue check stands on: the promise gate, a fresh database per check, time passing.

A queue check is a ``test_*`` method of a :class:`QueueAreaChecks` subclass; its
docstring is the guarantee, :func:`promises` names what it needs. A check whose
promise the adapter does not declare is skipped as ``not-promised``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from kit.conformance._harness import AreaChecks
from kit.queue import (
    DEFAULT_POLICY,
    NOT_PROMISED,
    JobClaim,
    QueueBackend,
    QueueDatabase,
    QueuePolicy,
    QueuePromise,
    QueueStore,
)

__all__ = ["QueueAreaChecks", "elapse", "promises"]

F = TypeVar("F", bound=Callable[..., Any])

_POLL_S = 0.05
_CLOCK_STALL_S = 30.0


def promises(*needed: QueuePromise) -> Callable[[F], F]:
    """Declare the queue promises a check needs; an undeclared one skips it as not promised."""

    def mark(fn: F) -> F:
        existing: tuple[QueuePromise, ...] = getattr(fn, "kit_promises", ())
        fn.kit_promises = existing + needed  # type: ignore[attr-defined]
        return fn

    return mark


def elapse(store: QueueStore, by: timedelta, backend: QueueBackend) -> None:
    """Let ``by`` pass on the store clock: advance the test clock, or wait for the database clock."""
    if QueuePromise.TEST_CLOCK in backend.queue_promises:
        store.advance_clock(by)
        return
    target = store.now() + by
    time.sleep(by.total_seconds())
    give_up = time.monotonic() + _CLOCK_STALL_S
    while store.now() < target:  # the database clock is the judge, not ours
        if time.monotonic() > give_up:
            pytest.fail(f"the store clock did not reach {target} {_CLOCK_STALL_S:.0f} s after it should have: "
                        "a store on a clock only the kit moves must declare test_clock", pytrace=False)
        time.sleep(_POLL_S)


class QueueAreaChecks(AreaChecks):
    """Base of the queue areas: the gate and fixtures read ``queue_promises``, not capabilities."""

    area = "queue"

    @pytest.fixture(autouse=True)
    def _kit_gate(self, request: pytest.FixtureRequest, kit_backend: QueueBackend) -> None:
        needed: tuple[QueuePromise, ...] = getattr(request.function, "kit_promises", ())
        missing = kit_backend.queue_promises.missing(needed)
        if missing:
            names = ", ".join(p.value for p in missing)
            pytest.skip(f"{NOT_PROMISED}: queue {kit_backend.name!r} does not promise {names}")

    @pytest.fixture
    def database(self, kit_backend: QueueBackend) -> Iterator[QueueDatabase]:
        db = kit_backend.provision()
        try:
            yield db
        finally:
            db.drop()

    @pytest.fixture
    def open_store(self, database: QueueDatabase) -> Iterator[Callable[..., QueueStore]]:
        """Open more stores on the check's database (closed at teardown)."""
        opened: list[QueueStore] = []

        def open_(policy: QueuePolicy = DEFAULT_POLICY) -> QueueStore:
            store = database.open(policy)
            opened.append(store)
            return store

        yield open_
        for store in opened:
            store.close()

    @pytest.fixture
    def store(self, open_store: Callable[..., QueueStore]) -> QueueStore:
        return open_store()

    # -- helpers ----------------------------------------------------------
    @staticmethod
    def claim_job(store: QueueStore, worker: str = "w1", queues: list[str] | None = None) -> JobClaim:
        claim = store.claim(worker, queues)
        assert claim is not None, f"worker {worker!r} found no claimable job where one was waiting"
        return claim
