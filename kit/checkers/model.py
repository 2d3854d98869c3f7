"""Verdicts: valid / unknown / invalid, with a minimal witness and one sentence that explains it.

Verdicts merge as Jepsen's do: ``invalid`` > ``unknown`` > ``valid``. A checker
is *sound*: it says ``invalid`` only when no execution a correct store could
produce explains the history and the final state; when the evidence cannot
decide (an outcome is unknown, a bound is missing) it says ``unknown`` or
gives the store the benefit of the doubt.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GUARANTEES", "Findings", "Status", "Verdict", "merge"]

#: CONTRACT.md section 6, one line per invariant.
GUARANTEES: dict[int, str] = {
    1: "History per run is seq 1..n, contiguous, no duplicates, append-only.",
    2: "Each revision of a run was written by exactly one committed decision.",
    3: "No stale effect: every accepted commit, completion or renewal came from the claim that was current and live.",
    4: "At most one live claim per run and per command at any instant; generations only grow.",
    5: "Exactly-once consumption; each timer fires at most once and never early.",
    6: "Dedup: one run per idempotency key, one signal per dedup key, one command and timer per operation key.",
    7: "Nothing acknowledged is lost; nothing rejected is present.",
    8: "Terminal runs never change; definitions never change.",
    9: "After faults stop and recovery drains, every run is terminal with the output its workflow determines, "
       "and no claim is held by a dead worker.",
    10: "Tenants never see each other's data.",
}


class Status(str, enum.Enum):
    VALID = "valid"
    UNKNOWN = "unknown"
    INVALID = "invalid"


_RANK = {Status.VALID: 0, Status.UNKNOWN: 1, Status.INVALID: 2}


def merge(statuses: Iterable[Status]) -> Status:
    """``invalid`` if any is, else ``unknown`` if any is, else ``valid`` (also for none)."""
    return max(statuses, key=_RANK.__getitem__, default=Status.VALID)


@dataclass(frozen=True)
class Verdict:
    """One invariant's verdict on one stress run."""

    invariant: int
    name: str
    status: Status
    explanation: str
    """One sentence: the contradiction (invalid), what could not be decided (unknown), what held (valid)."""
    witness: tuple[dict[str, Any], ...] = ()
    """The few history entries and state fragments the explanation rests on."""
    checked: int = 0
    """How many items (runs, commits, claims...) the checker examined."""
    more: int = 0
    """Further violations of the same invariant beyond the one shown."""

    @property
    def title(self) -> str:
        return f"{self.invariant}. {self.name.replace('_', ' ')}"

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "name": self.name, "status": self.status.value,
                "explanation": self.explanation, "witness": list(self.witness), "checked": self.checked,
                "more": self.more}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verdict:
        return cls(int(data["invariant"]), str(data["name"]), Status(data["status"]), str(data["explanation"]),
                   tuple(data.get("witness", ())), int(data.get("checked", 0)), int(data.get("more", 0)))


@dataclass
class Findings:
    """What one checker found: violations (sentence + witness, with a time to order them) and doubts."""

    invariant: int
    name: str
    checked: int = 0
    violations: list[tuple[float, str, tuple[dict[str, Any], ...]]] = field(default_factory=list)
    doubts: list[str] = field(default_factory=list)

    def violation(self, sentence: str, *witness: dict[str, Any], at: float = 0.0) -> None:
        self.violations.append((at, sentence, tuple(w for w in witness if w)))

    def doubt(self, sentence: str) -> None:
        self.doubts.append(sentence)

    def verdict(self, held: str) -> Verdict:
        """Invalid with the earliest violation, else unknown with the first doubt, else valid (``held``)."""
        if self.violations:
            _, sentence, witness = min(self.violations, key=lambda v: v[0])
            return Verdict(self.invariant, self.name, Status.INVALID, sentence, witness, self.checked,
                           len(self.violations) - 1)
        if self.doubts:
            return Verdict(self.invariant, self.name, Status.UNKNOWN, self.doubts[0], (), self.checked,
                           len(self.doubts) - 1)
        return Verdict(self.invariant, self.name, Status.VALID, held, (), self.checked)
