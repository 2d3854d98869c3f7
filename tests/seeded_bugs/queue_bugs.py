"""Seeded-bug queues: the reference queue with one deliberate breakage each.

Every bug names the queue checks that must kill it and the machine invariant
(``kind`` of the violation) that must catch it and replay; ``machine_kind`` is None
for a race, which the machine's ``claim_race`` step (claims from several threads at
once) catches but a replay need not reproduce.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from kit.contract.entities import JSON
from kit.queue import Enqueued, JobClaim, JobStatus
from kit.queue.reference import MemoryQueueBackend, MemoryQueueStore, _Record

__all__ = ["QUEUE_BUGS", "QueueBug"]


class _DedupIgnored(MemoryQueueStore):
    """enqueue stores the key but never looks for a waiting job holding it."""

    def enqueue(self, queue: str, task: str, payload: JSON = None, *, key: str | None = None,
                lock: str | None = None, delay: timedelta | None = None) -> Enqueued:
        made = super().enqueue(queue, task, payload, lock=lock, delay=delay)
        with self._state.lock:
            record = self._state.jobs[made.job.job_id]
            record.job = replace(record.job, key=key)
            return Enqueued(self._copy(record.job), created=True)


class _DoubleDelivery(MemoryQueueStore):
    """claim also hands out running jobs (it forgot the status filter)."""

    def _claimable(self, queues: Sequence[str] | None) -> list[_Record]:
        return [r for r in self._state.jobs.values()
                if r.job.status in (JobStatus.QUEUED, JobStatus.RUNNING)
                and (queues is None or r.job.queue in queues)
                and (r.job.run_after is None or r.job.run_after <= self.now())]


class _StaleAckAccepted(MemoryQueueStore):
    """complete, fail and heartbeat accept any claim on an unfinished job (no worker, no generation)."""

    def _current(self, claim: JobClaim) -> tuple[_Record | None, object]:  # type: ignore[override]
        record, refused = super()._current(claim)
        if record is None and refused.value == "claim_lost":
            return self._state.jobs[claim.job_id], refused
        return record, refused


class _RecoverTakesLive(MemoryQueueStore):
    """recover re-queues every running job, heartbeat or not."""

    def recover(self, stalled_after: timedelta) -> list[str]:
        return super().recover(timedelta(0))


class _RetryIgnoresBackoff(MemoryQueueStore):
    """a retried job is claimable at once."""

    def fail(self, claim: JobClaim, error: JSON = None, retry: bool = True) -> object:  # type: ignore[override]
        answer = super().fail(claim, error, retry)
        with self._state.lock:
            record = self._state.jobs[claim.job_id]
            if record.job.status is JobStatus.QUEUED:
                record.job = replace(record.job, run_after=None)
        return answer


class _RacyClaim(MemoryQueueStore):
    """claim reads a candidate under the lock, lets go, and marks it running afterwards."""

    def claim(self, worker: str, queues: Sequence[str] | None = None) -> JobClaim | None:
        with self._state.lock:
            candidates = self._claimable(queues)
        if not candidates:
            return None
        record = candidates[0]
        time.sleep(0.002)  # the window a real store has between its SELECT and its UPDATE
        with self._state.lock:
            record.generation += 1
            record.last_beat = self.now()
            record.job = replace(record.job, status=JobStatus.RUNNING, worker=worker)
            job = record.job
            return JobClaim(job.job_id, worker, job.queue, job.task, job.payload, job.attempts + 1,
                            str(record.generation))


@dataclass(frozen=True)
class QueueBug:
    name: str
    store_class: type[MemoryQueueStore]
    caught_by: tuple[str, ...]
    """Queue checks (``queue.<name>``) of which at least one must fail."""
    machine_kind: str | None
    """The invariant the queue machine must report and its replay reproduce (None: a thread race)."""

    def make_backend(self) -> MemoryQueueBackend:
        backend = type(f"Bug_{self.name}", (MemoryQueueBackend,), {"store_class": self.store_class})()
        backend.name = f"memory-queue-bug-{self.name}"
        return backend


QUEUE_BUGS: tuple[QueueBug, ...] = (
    QueueBug("dedup_ignored", _DedupIgnored, ("queue.keyed_enqueue_deduplicates",), "dedup_broken"),
    QueueBug("double_delivery", _DoubleDelivery,
             ("queue.claim_holds_the_job_exclusively", "queue.concurrent_claimers_never_share_a_job"),
             "double_claim"),
    QueueBug("stale_ack_accepted", _StaleAckAccepted,
             ("queue.stale_worker_cannot_complete", "queue.stale_worker_cannot_complete_a_requeued_job"),
             "stale_effect"),
    QueueBug("recover_takes_live", _RecoverTakesLive, ("queue.heartbeating_worker_keeps_its_job",),
             "live_recovered"),
    QueueBug("retry_ignores_backoff", _RetryIgnoresBackoff, ("queue.retry_waits_for_the_backoff",),
             "claimed_early"),
    QueueBug("racy_claim", _RacyClaim, ("queue.concurrent_claimers_never_share_a_job",), None),
)
