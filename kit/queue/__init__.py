"""The queue profile: a small protocol for job queues, its promises, and its reference queue.

An adapter for a job queue implements :class:`QueueBackend` (``queue_promises``,
``provision()``...) and ``kit check package.module:factory`` runs the queue
checks and the queue fault machine against it.
"""

from kit.queue.entities import DEFAULT_POLICY, Enqueued, Job, JobClaim, JobStatus, QueuePolicy
from kit.queue.promises import NOT_PROMISED, QueuePromise, QueuePromises
from kit.queue.protocol import QueueBackend, QueueDatabase, QueueStore, is_queue_backend

__all__ = [
    "DEFAULT_POLICY",
    "NOT_PROMISED",
    "Enqueued",
    "Job",
    "JobClaim",
    "JobStatus",
    "QueueBackend",
    "QueueDatabase",
    "QueuePolicy",
    "QueuePromise",
    "QueuePromises",
    "QueueStore",
    "is_queue_backend",
]
