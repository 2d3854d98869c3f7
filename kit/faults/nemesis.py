"""The stress nemesis: a fault schedule drawn from one seed, delivered to workers on time.

:func:`plan_faults` turns (seed, duration, enabled kinds, worker slots, lease)
into a list of :class:`Fault` records, entirely and only from the seed: the same
arguments give the same schedule on any machine. :class:`Nemesis` delivers each
fault to its target's mailbox at its planned offset; the target applies it at
its next matching operation. Interleavings are real, but *what* is injected,
*where* and *when* is the seed's, and every delivery is recorded in the history.

Fault kinds (CONTRACT.md section 5):

* ``crash`` -- the worker vanishes between operations (after a claim, or just
  before its commit/completion), holding its claims; it restarts later as a new
  incarnation.
* ``kill`` -- the worker's server session is killed at the k-th statement of an
  operation (inside its transaction); the worker is dead from then on.
* ``pause`` -- the worker stops for 1.3-2x the lease, at one of four points:
  while deciding (``plan``), right before the store call (``before``), at the
  k-th point of the operation (``inside``: a statement, its commit, or the
  moment the commit returned), or right after the operation's first commit
  returned (``after_commit``); then it carries on, a zombie. An operation that
  spans two transactions is paused between them by the last two.
* ``skew`` -- the worker's own clock is off by hours for a while.
* ``duplicate`` -- the operation is sent twice at once on two connections.
* ``lost_ack`` -- the operation commits and the worker sees an error; it retries once.
* ``drop`` -- the connection is closed under the k-th statement; the worker reconnects.
"""

from __future__ import annotations

import enum
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "ALL_FAULTS",
    "FAULT_OPS",
    "KIND_WEIGHTS",
    "Fault",
    "FaultKind",
    "Nemesis",
    "parse_faults",
    "plan_faults",
]


class FaultKind(str, enum.Enum):
    CRASH = "crash"
    KILL = "kill"
    PAUSE = "pause"
    SKEW = "skew"
    DUPLICATE = "duplicate"
    LOST_ACK = "lost_ack"
    DROP = "drop"


ALL_FAULTS: tuple[FaultKind, ...] = tuple(FaultKind)

#: The operations of each role a fault can land on, with their weights.
FAULT_OPS: Mapping[str, Sequence[tuple[str, float]]] = {
    "decider": (("commit", 0.7), ("claim", 0.3)),
    "worker": (("complete", 0.8), ("claim", 0.2)),
    "timers": (("fire", 1.0),),
    "client": (("start", 0.5), ("signal", 0.5)),
}

_ROLES: Mapping[FaultKind, tuple[str, ...]] = {
    FaultKind.CRASH: ("decider", "worker", "timers"),
    FaultKind.KILL: ("decider", "worker", "timers"),
    FaultKind.PAUSE: ("decider", "worker", "timers"),
    FaultKind.SKEW: ("decider", "worker"),
    FaultKind.DUPLICATE: ("decider", "worker", "timers", "client"),
    FaultKind.LOST_ACK: ("decider", "worker", "timers", "client"),
    FaultKind.DROP: ("decider", "worker", "timers", "client"),
}

_PAUSE_POINTS = ("before", "inside", "after_commit")

#: How often each kind is drawn, relative to the others. A process pause at an arbitrary
#: point is the fault that exposes the most fence bugs (Jepsen's experience too), so it
#: comes three times as often; a skew only matters combined with a pause.
KIND_WEIGHTS: Mapping[FaultKind, float] = {
    FaultKind.CRASH: 1.0, FaultKind.KILL: 1.0, FaultKind.PAUSE: 3.0, FaultKind.SKEW: 0.5,
    FaultKind.DUPLICATE: 1.0, FaultKind.LOST_ACK: 1.0, FaultKind.DROP: 1.0,
}


@dataclass(frozen=True)
class Fault:
    """One planned fault: ``kind`` for ``target`` (a worker slot) at ``at_s`` seconds into the run."""

    at_s: float
    kind: FaultKind
    target: str
    op: str = ""
    """The operation it lands on (``commit``, ``complete``, ``claim``, ``fire``, ``start``, ``signal``)."""
    point: str = ""
    """For pauses: ``plan``, ``before``, ``inside`` or ``after_commit``."""
    k: int = 0
    """For kill / drop: the statement it strikes; for inside pauses: the point (statements, the
    commit and the moment after it all count); 1 = the first."""
    seconds: float = 0.0
    """Pause length, skew duration, or a crashed worker's downtime."""
    skew_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if v not in ("", 0, 0.0)}
        data["kind"] = self.kind.value
        data["at_s"] = round(self.at_s, 3)
        return data

    def describe(self) -> str:
        parts = [f"{self.kind.value} {self.target}"]
        if self.op:
            parts.append(f"on {self.op}")
        if self.point:
            parts.append(f"at {self.point}" + (f" #{self.k}" if self.point == "inside" else ""))
        elif self.k:
            parts.append(f"at statement #{self.k}")
        if self.kind is FaultKind.SKEW:
            parts.append(f"{self.skew_s / 3600:+.1f} h for {self.seconds:.1f} s")
        elif self.seconds:
            parts.append(f"for {self.seconds:.2f} s")
        return " ".join(parts)


def parse_faults(text: str) -> tuple[FaultKind, ...]:
    """``all``, ``none`` or a comma-separated list of fault kinds."""
    text = text.strip().lower()
    if text in ("", "all"):
        return ALL_FAULTS
    if text == "none":
        return ()
    kinds = []
    for part in text.split(","):
        try:
            kinds.append(FaultKind(part.strip()))
        except ValueError:
            from kit.contract.errors import ConfigurationError

            raise ConfigurationError(
                f"unknown fault kind {part.strip()!r}: use all, none, or a comma-separated list of "
                f"{', '.join(k.value for k in FaultKind)}"
            ) from None
    return tuple(dict.fromkeys(kinds))


def _weighted(rng: random.Random, choices: Sequence[tuple[str, float]]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def plan_faults(
    seed: int,
    duration_s: float,
    kinds: Sequence[FaultKind],
    slots: Mapping[str, Sequence[str]],
    lease_s: float,
    interval_s: float = 0.3,
    warmup_s: float = 0.3,
) -> list[Fault]:
    """The fault schedule of one run, a pure function of its arguments.

    ``slots`` maps a role (``decider``, ``worker``, ``timers``, ``client``) to
    its worker slot names. Faults come every ``interval_s`` on average (each gap
    uniform in [0.5, 1.5] x ``interval_s``) from ``warmup_s`` until ``duration_s``.
    """
    rng = random.Random(f"nemesis/{seed}")
    plan: list[Fault] = []
    kinds = list(kinds)
    at = warmup_s
    while kinds and interval_s > 0:
        at += rng.uniform(0.5, 1.5) * interval_s
        if at >= duration_s:
            break
        kind = rng.choices(kinds, weights=[KIND_WEIGHTS[k] for k in kinds])[0]
        targets = [(role, slot) for role in _ROLES[kind] for slot in slots.get(role, ())]
        if not targets:
            continue
        role, target = rng.choice(targets)
        op = _weighted(rng, FAULT_OPS[role])
        if kind is FaultKind.DUPLICATE and op == "claim":
            op = FAULT_OPS[role][0][0]
        if kind is FaultKind.CRASH:
            plan.append(Fault(at, kind, target, op, seconds=rng.uniform(0.3, 1.5)))
        elif kind is FaultKind.KILL:
            plan.append(Fault(at, kind, target, op, k=rng.randint(2, 4), seconds=rng.uniform(0.3, 1.5)))
        elif kind is FaultKind.DROP:
            plan.append(Fault(at, kind, target, op, k=rng.randint(1, 4)))
        elif kind is FaultKind.PAUSE:
            points = ("plan", *_PAUSE_POINTS) if role == "decider" and op == "commit" else _PAUSE_POINTS
            point = rng.choice(points)
            k = rng.randint(2, 8) if point == "inside" else 0
            plan.append(Fault(at, kind, target, op, point, k, rng.uniform(1.3, 2.0) * lease_s))
        elif kind is FaultKind.SKEW:
            hours = rng.uniform(1.0, 3.0) * rng.choice((-1, 1))
            plan.append(Fault(at, kind, target, seconds=rng.uniform(2.0, 6.0), skew_s=hours * 3600))
        else:
            plan.append(Fault(at, kind, target, op))
    return plan


class Nemesis:
    """Delivers a planned schedule on time, from its own thread, until stopped."""

    def __init__(
        self,
        plan: Sequence[Fault],
        deliver: Callable[[Fault], None],
        started_at: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = list(plan)
        self.delivered = 0
        self._deliver = deliver
        self._started_at = started_at
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kit-nemesis", daemon=True)

    def start(self) -> Nemesis:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Deliver nothing more (a fault already delivered may still be applied by its target)."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        for fault in self.plan:
            delay = self._started_at + fault.at_s - self._clock()
            if (delay > 0 and self._stop.wait(delay)) or self._stop.is_set():
                return
            self._deliver(fault)
            self.delivered += 1
