"""The reference queue: in memory, one lock, obviously correct. It makes every queue promise.

Its state is a list of job records per database, shared by every store opened
on that database (so concurrency checks have something to race on) and guarded
by one lock, on a test clock the kit advances.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TypeAlias

from kit.contract.entities import JSON
from kit.contract.errors import ClockModeError, InvalidArgument
from kit.contract.outcomes import Outcome
from kit.queue.entities import DEFAULT_POLICY, Enqueued, Job, JobClaim, JobStatus, QueuePolicy
from kit.queue.promises import QueuePromise, QueuePromises

__all__ = ["MemoryQueueBackend", "MemoryQueueDatabase", "MemoryQueueStore"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class _Record:
    job: Job
    generation: int = 0
    last_beat: datetime = EPOCH


_Records: TypeAlias = "list[_Record]"
_Jobs: TypeAlias = "list[Job]"
_Ids: TypeAlias = "list[str]"


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.clock = EPOCH
        self.jobs: dict[str, _Record] = {}
        self.ids = itertools.count(1)


class MemoryQueueStore:
    """One store on a :class:`MemoryQueueDatabase`; seeded-bug queues subclass it."""

    def __init__(self, state: _State, policy: QueuePolicy) -> None:
        self._state = state
        self.policy = policy

    # -- clock ------------------------------------------------------------
    def close(self) -> None:
        pass

    def now(self) -> datetime:
        return self._state.clock

    def advance_clock(self, by: timedelta) -> datetime:
        if by < timedelta(0):
            raise ClockModeError("the test clock only moves forward: pass a positive timedelta")
        with self._state.lock:
            self._state.clock += by
            return self._state.clock

    # -- jobs -------------------------------------------------------------
    def enqueue(
        self, queue: str, task: str, payload: JSON = None, *, key: str | None = None,
        lock: str | None = None, delay: timedelta | None = None,
    ) -> Enqueued:
        if not queue or not task:
            raise InvalidArgument("queue and task must be non-empty strings")
        with self._state.lock:
            if key is not None:
                for record in self._state.jobs.values():
                    if record.job.key == key and record.job.status is JobStatus.QUEUED:
                        return Enqueued(self._copy(record.job), created=False)
            job_id = str(next(self._state.ids))
            run_after = self.now() + delay if delay else None
            job = Job(job_id, queue, task, copy.deepcopy(payload), JobStatus.QUEUED, 0, key, lock, run_after)
            self._state.jobs[job_id] = _Record(job)
            return Enqueued(self._copy(job), created=True)

    def claim(self, worker: str, queues: Sequence[str] | None = None) -> JobClaim | None:
        with self._state.lock:
            for record in self._claimable(queues):
                record.generation += 1
                record.last_beat = self.now()
                record.job = replace(record.job, status=JobStatus.RUNNING, worker=worker)
                job = record.job
                return JobClaim(job.job_id, worker, job.queue, job.task, copy.deepcopy(job.payload),
                                job.attempts + 1, str(record.generation))
            return None

    def heartbeat(self, claim: JobClaim) -> Outcome:
        with self._state.lock:
            record, refused = self._current(claim)
            if record is None:
                return refused
            record.last_beat = self.now()
            return Outcome.RENEWED

    def complete(self, claim: JobClaim, result: JSON = None) -> Outcome:
        with self._state.lock:
            record, refused = self._current(claim)
            if record is None:
                return refused
            record.job = replace(record.job, status=JobStatus.SUCCEEDED, attempts=record.job.attempts + 1,
                                 worker=None)
            return Outcome.COMPLETED

    def fail(self, claim: JobClaim, error: JSON = None, retry: bool = True) -> Outcome:
        with self._state.lock:
            record, refused = self._current(claim)
            if record is None:
                return refused
            attempts = record.job.attempts + 1
            if retry and attempts < self.policy.max_attempts:
                record.job = replace(record.job, status=JobStatus.QUEUED, attempts=attempts, worker=None,
                                     run_after=self.now() + self.policy.backoff)
                return Outcome.RETRY_SCHEDULED
            record.job = replace(record.job, status=JobStatus.FAILED, attempts=attempts, worker=None)
            return Outcome.FAILED

    def recover(self, stalled_after: timedelta) -> _Ids:
        with self._state.lock:
            recovered = []
            for record in self._state.jobs.values():
                if record.job.status is JobStatus.RUNNING and self.now() - record.last_beat >= stalled_after:
                    record.job = replace(record.job, status=JobStatus.QUEUED, attempts=record.job.attempts + 1,
                                         worker=None, run_after=self.now())
                    recovered.append(record.job.job_id)
            return recovered

    def get(self, job_id: str) -> Job | None:
        with self._state.lock:
            record = self._state.jobs.get(job_id)
            return self._copy(record.job) if record else None

    def list(self, queue: str | None = None, status: JobStatus | None = None) -> _Jobs:
        with self._state.lock:
            return [self._copy(r.job) for r in self._state.jobs.values()
                    if (queue is None or r.job.queue == queue) and (status is None or r.job.status is status)]

    # -- helpers (seeded bugs override these) -------------------------------
    def _claimable(self, queues: Sequence[str] | None) -> _Records:
        held = {r.job.lock for r in self._state.jobs.values()
                if r.job.status is JobStatus.RUNNING and r.job.lock is not None}
        return [
            r for r in self._state.jobs.values()
            if r.job.status is JobStatus.QUEUED
            and (queues is None or r.job.queue in queues)
            and (r.job.run_after is None or r.job.run_after <= self.now())
            and (r.job.lock is None or r.job.lock not in held)
        ]

    def _current(self, claim: JobClaim) -> tuple[_Record | None, Outcome]:
        """The record if ``claim`` is its live claim, else (None, why not)."""
        record = self._state.jobs.get(claim.job_id)
        if record is None:
            return None, Outcome.NOT_FOUND
        if record.job.status.terminal:
            return None, Outcome.TERMINAL
        if record.job.status is not JobStatus.RUNNING or record.job.worker != claim.worker \
                or str(record.generation) != claim.token:
            return None, Outcome.CLAIM_LOST
        return record, Outcome.COMMITTED

    @staticmethod
    def _copy(job: Job) -> Job:
        return replace(job, payload=copy.deepcopy(job.payload))


class MemoryQueueDatabase:
    store_class: type[MemoryQueueStore] = MemoryQueueStore

    def __init__(self, label: str, store_class: type[MemoryQueueStore] | None = None) -> None:
        self.label = label
        self._state = _State()
        if store_class is not None:
            self.store_class = store_class

    def open(self, policy: QueuePolicy = DEFAULT_POLICY) -> MemoryQueueStore:
        return self.store_class(self._state, policy)

    def drop(self) -> None:
        self._state.jobs.clear()


class MemoryQueueBackend:
    """The in-memory reference queue (``kit check kit.queue.reference:MemoryQueueBackend``)."""

    name = "memory-queue"
    queue_promises = QueuePromises.of(*QueuePromise)
    store_class: type[MemoryQueueStore] = MemoryQueueStore

    def __init__(self) -> None:
        self._count = itertools.count(1)

    def describe(self) -> str:
        return "in-memory reference queue"

    def provision(self) -> MemoryQueueDatabase:
        return MemoryQueueDatabase(f"memory-queue-{next(self._count)}", self.store_class)

    def close(self) -> None:
        pass
