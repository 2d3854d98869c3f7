"""The entities of the queue profile, as values (frozen dataclasses, like the workflow contract's).

A job is enqueued on a named queue, claimed by one worker at a time, and ends
``succeeded`` or ``failed``; a failed attempt may put it back in the queue after
a backoff. Timestamps are timezone-aware UTC read from the store clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from kit.contract.entities import JSON

__all__ = ["DEFAULT_POLICY", "Enqueued", "Job", "JobClaim", "JobStatus", "QueuePolicy"]


class JobStatus(str, enum.Enum):
    QUEUED = "queued"
    """Waiting to be claimed (possibly not before ``run_after``)."""
    RUNNING = "running"
    """Claimed by a worker that has not finished it."""
    SUCCEEDED = "succeeded"
    """Completed; never changes again."""
    FAILED = "failed"
    """Failed for good (no retry asked, or attempts exhausted); never changes again."""

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED)


@dataclass(frozen=True)
class Job:
    """A snapshot of one job as the store holds it."""

    job_id: str
    queue: str
    task: str
    payload: JSON
    status: JobStatus
    attempts: int
    """Attempts that ended (failed, retried or recovered); 0 until the first one ends."""
    key: str | None = None
    """The dedup key given at enqueue, if any."""
    lock: str | None = None
    """The serial lock given at enqueue, if any (jobs sharing one never run at once)."""
    run_after: datetime | None = None
    worker: str | None = None
    """The worker holding it while ``running``."""


@dataclass(frozen=True)
class JobClaim:
    """What a worker holds after a claim; passed back untouched to heartbeat, complete and fail.

    ``token`` is store-defined and opaque to the kit (a generation, a lock id...).
    """

    job_id: str
    worker: str
    queue: str
    task: str
    payload: JSON
    attempt: int
    """1 for the first run of the job, 2 for the second..."""
    token: str = ""


@dataclass(frozen=True)
class Enqueued:
    job: Job
    created: bool
    """False when a waiting job with the same key absorbed this enqueue (nothing was created)."""


@dataclass(frozen=True)
class QueuePolicy:
    """The retry policy of a queue, fixed when a store is opened.

    A failed attempt asks for a retry; the store re-queues the job ``backoff`` after the
    failure unless ``max_attempts`` attempts have then ended, in which case it fails for good.
    """

    max_attempts: int = 3
    backoff: timedelta = timedelta(seconds=1)


DEFAULT_POLICY = QueuePolicy()
"""The policy a store is opened with when none is given: 3 attempts, 1 s apart."""
