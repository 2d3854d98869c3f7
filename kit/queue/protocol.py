"""The queue profile's protocol: what a job-queue adapter implements.

Three layers, like the workflow profile's: a :class:`QueueBackend` declares its
promises and provisions throw-away databases; a :class:`QueueDatabase` opens
stores on one of them; a :class:`QueueStore` is one connection's worth of
operations (not thread-safe: threads open their own). Answers are outcomes
(:class:`kit.contract.outcomes.Outcome`), never exceptions; genuine faults raise
the errors of :mod:`kit.contract.errors`.

``kit check`` picks this profile when the factory's object has ``queue_promises``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from kit.contract.entities import JSON
from kit.contract.outcomes import Outcome
from kit.queue.entities import DEFAULT_POLICY, Enqueued, Job, JobClaim, JobStatus, QueuePolicy
from kit.queue.promises import QueuePromises

__all__ = ["QueueBackend", "QueueDatabase", "QueueStore", "is_queue_backend"]


@runtime_checkable
class QueueStore(Protocol):
    def close(self) -> None: ...

    def now(self) -> datetime:
        """The store clock (the test clock under ``test_clock``, else the database's)."""

    def advance_clock(self, by: timedelta) -> datetime:
        """Move the test clock forward (promise ``test_clock`` only); return the new time."""

    def enqueue(
        self,
        queue: str,
        task: str,
        payload: JSON = None,
        *,
        key: str | None = None,
        lock: str | None = None,
        delay: timedelta | None = None,
    ) -> Enqueued:
        """Add a job (``queued``, 0 attempts). With ``key``, a waiting job with that key absorbs it."""

    def claim(self, worker: str, queues: Sequence[str] | None = None) -> JobClaim | None:
        """Hand one claimable job of ``queues`` (all when None) to ``worker`` and mark it running;
        None when there is none. A job is held by at most one live claim."""

    def heartbeat(self, claim: JobClaim) -> Outcome:
        """``renewed``: the worker is alive and keeps the job; else why not (nothing changed)."""

    def complete(self, claim: JobClaim, result: JSON = None) -> Outcome:
        """``completed``: the job succeeded for good; else why not (nothing changed)."""

    def fail(self, claim: JobClaim, error: JSON = None, retry: bool = True) -> Outcome:
        """``retry_scheduled`` (re-queued after the policy's backoff) or ``failed`` (for good:
        no retry asked, or attempts exhausted); else why not (nothing changed)."""

    def recover(self, stalled_after: timedelta) -> list[str]:
        """Re-queue running jobs whose worker gave no heartbeat for ``stalled_after``; their ids."""

    def get(self, job_id: str) -> Job | None: ...

    def list(self, queue: str | None = None, status: JobStatus | None = None) -> list[Job]:
        """Jobs in enqueue order, optionally of one queue and one status."""


class QueueDatabase(Protocol):
    label: str

    def open(self, policy: QueuePolicy = DEFAULT_POLICY) -> QueueStore:
        """A new store with its own connection, on this database's schema, under ``policy``."""

    def drop(self) -> None: ...


@runtime_checkable
class QueueBackend(Protocol):
    name: str
    queue_promises: QueuePromises

    def describe(self) -> str: ...

    def provision(self) -> QueueDatabase:
        """A fresh, empty database (or schema) with the queue's own schema applied."""

    def close(self) -> None: ...


def is_queue_backend(obj: object) -> bool:
    """Whether ``obj`` is a queue-profile backend (it declares ``queue_promises``)."""
    return isinstance(getattr(obj, "queue_promises", None), QueuePromises) and hasattr(obj, "provision")
