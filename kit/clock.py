"""Time at the contract's boundary: aware UTC datetimes with microsecond precision.

Stores keep time as integer microseconds since the Unix epoch (exact on every
dialect, immune to session time zones and driver tz handling); these helpers
are the only conversion. ``WorkerClock`` is a worker's own, possibly skewed,
clock: nothing in a correct store may depend on it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

__all__ = [
    "EPOCH",
    "TEST_CLOCK_START",
    "ManualClock",
    "WorkerClock",
    "ensure_utc",
    "from_micros",
    "micros",
    "system_now",
    "to_micros",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Where a fresh test clock starts: a fixed instant with a non-zero microsecond part,
#: so a store that rounds or truncates time shows it on the first comparison.
TEST_CLOCK_START = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def ensure_utc(value: datetime) -> datetime:
    """``value`` in UTC; naive datetimes are refused (they are ambiguous)."""
    if value.tzinfo is None or value.utcoffset() is None:
        from kit.contract.errors import InvalidArgument

        raise InvalidArgument(
            f"naive datetime {value.isoformat()} is ambiguous: pass an aware datetime "
            "(e.g. datetime(..., tzinfo=timezone.utc))"
        )
    return value.astimezone(UTC)


def to_micros(value: datetime) -> int:
    """Exact integer microseconds since the epoch."""
    delta = ensure_utc(value) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=int(value))


def micros(value: timedelta) -> int:
    """Exact integer microseconds in a duration."""
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds


def system_now() -> datetime:
    return from_micros(time.time_ns() // 1_000)


@dataclass
class ManualClock:
    """A clock that moves only when told to: the reference engine's test clock."""

    at: datetime = TEST_CLOCK_START
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def now(self) -> datetime:
        with self._lock:
            return self.at

    def set(self, at: datetime) -> None:
        with self._lock:
            self.at = ensure_utc(at)

    def advance(self, by: timedelta) -> datetime:
        with self._lock:
            self.at = self.at + by
            return self.at


@dataclass(frozen=True)
class WorkerClock:
    """A worker's own view of time: the real clock shifted by ``skew``.

    Workers may use it to decide *when to act* (e.g. when to renew), never to
    decide *whether a lease is live*: only the store clock decides that.
    """

    skew: timedelta = timedelta(0)

    def now(self) -> datetime:
        return system_now() + self.skew
