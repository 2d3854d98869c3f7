"""The queue profile's conformance suite: checks named by queue promises, and the queue machine.

An author gets every queue check by subclassing :class:`QueueSuite` and providing
``kit_backend`` (a :class:`kit.queue.QueueBackend`), or with
``kit check package.module:factory``, which picks this suite when the factory's
object declares ``queue_promises``.
"""

from kit.conformance.queue._harness import QueueAreaChecks, elapse, promises
from kit.conformance.queue.claims import QueueClaimChecks
from kit.conformance.queue.machines import QueueMachineChecks
from kit.conformance.queue.retries import QueueRetryChecks

__all__ = [
    "QUEUE_AREAS",
    "QueueAreaChecks",
    "QueueClaimChecks",
    "QueueMachineChecks",
    "QueueRetryChecks",
    "QueueSuite",
    "elapse",
    "promises",
]

QUEUE_AREAS: tuple[type[QueueAreaChecks], ...] = (QueueClaimChecks, QueueRetryChecks, QueueMachineChecks)


class QueueSuite(*QUEUE_AREAS):  # type: ignore[misc]
    """Every queue check. Subclass it and provide the ``kit_backend`` fixture."""

    area = "queue"
