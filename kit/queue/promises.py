"""What a queue store promises. A check needing an undeclared promise is skipped as ``not-promised``.

Every member's docstring is its specification; the queue checks and the queue
machine quote them. A store declares only what it really promises: a promise
left out is not a failure, it is a different queue.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["NOT_PROMISED", "QueuePromise", "QueuePromises"]

NOT_PROMISED = "not-promised"
"""The prefix of a skip for a promise the store does not make (typed by the reports)."""


class QueuePromise(str, enum.Enum):
    DEDUP_KEYS = "dedup_keys"
    """Enqueueing with a key while a job with that key is still waiting (queued) creates nothing
    and returns the waiting job."""

    RETRY_BACKOFF = "retry_backoff"
    """A failed attempt that asks for a retry re-queues the job, claimable no sooner than the
    policy's backoff after the failure (store clock)."""

    RETRY_LIMIT = "retry_limit"
    """When the policy's ``max_attempts`` attempts have ended, a failure asking for a retry fails the
    job for good instead."""

    DELAYED_JOBS = "delayed_jobs"
    """A job enqueued with a delay is not claimable before the delay has passed (store clock)."""

    STALLED_RECOVERY = "stalled_recovery"
    """``recover(stalled_after)`` re-queues the running jobs whose worker gave no heartbeat for
    ``stalled_after``, and only those: a worker that heartbeats keeps its job."""

    FENCED_ACKS = "fenced_acks"
    """Heartbeat, complete and fail of a claim that is no longer current (its job was recovered,
    re-claimed or finished) are refused and change nothing."""

    SERIAL_LOCKS = "serial_locks"
    """Jobs enqueued with the same lock never run at once: while one runs, the others wait."""

    CONCURRENT_CONNECTIONS = "concurrent_connections"
    """Several stores opened on one database may be used from several threads at once."""

    TEST_CLOCK = "test_clock"
    """The store runs on a clock the kit advances (``advance_clock``); else on the database clock,
    and checks that need time to pass wait for it."""


@dataclass(frozen=True)
class QueuePromises:
    """What one queue adapter declares."""

    promised: frozenset[QueuePromise] = frozenset()

    @classmethod
    def of(cls, *promises: QueuePromise) -> QueuePromises:
        return cls(frozenset(promises))

    def __contains__(self, promise: object) -> bool:
        return promise in self.promised

    def missing(self, needed: Iterable[QueuePromise]) -> list[QueuePromise]:
        return [p for p in needed if p not in self.promised]

    def without(self, *promises: QueuePromise) -> QueuePromises:
        return QueuePromises(self.promised - frozenset(promises))
