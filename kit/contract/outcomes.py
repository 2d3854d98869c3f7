"""Protocol outcomes: results a store returns, never raises (CONTRACT.md section 3).

An outcome is an answer, not a fault: a caller must never retry an operation
in a loop because of one. Anything but ``COMMITTED`` (or ``RENEWED``,
``COMPLETED``, ``RETRY_SCHEDULED``, ``FAILED`` where the operation says so)
means the store changed nothing.
"""

from __future__ import annotations

import enum

__all__ = ["COMMIT_PRECEDENCE", "Outcome"]


class Outcome(str, enum.Enum):
    COMMITTED = "committed"
    """The write happened."""
    CLAIM_LOST = "claim_lost"
    """The claim is not the current one (owner or generation changed) or its lease expired."""
    REVISION_MISMATCH = "revision_mismatch"
    """The run moved on since the decision was made."""
    TERMINAL = "terminal"
    """The run (or command) is closed and never changes again."""
    NOT_FOUND = "not_found"
    """No such item for this tenant."""
    RENEWED = "renewed"
    """A lease was extended."""
    COMPLETED = "completed"
    """A command completion was accepted."""
    RETRY_SCHEDULED = "retry_scheduled"
    """A command failure was accepted and another attempt is scheduled."""
    FAILED = "failed"
    """A command failure was accepted and the command failed permanently."""
    DUPLICATE = "duplicate"
    """The same request was already applied; nothing changed."""


#: The order in which ``commit_decision`` reports why it refused a decision.
COMMIT_PRECEDENCE: tuple[Outcome, ...] = (
    Outcome.NOT_FOUND,
    Outcome.TERMINAL,
    Outcome.CLAIM_LOST,
    Outcome.REVISION_MISMATCH,
    Outcome.COMMITTED,
)
