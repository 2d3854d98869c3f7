"""The history events the decider writes, and how a recorded history is read back.

Every await of a module leaves at most two events, both keyed by its
operation id so the store's per-run uniqueness of event operation keys makes
double recording impossible:

* ``op-<n>/await`` -- the request, written when the await is first reached:
  ``command_scheduled`` ``{op, await: "command", name, input}``,
  ``timer_scheduled`` ``{op, await: "timer", millis}`` or
  ``signal_awaited`` ``{op, await: "signal", name}``.
* ``op-<n>/resolved`` -- the answer, written by the decision that consumed it:
  ``command_completed`` ``{op, result}``, ``command_failed`` ``{op, error}``,
  ``timer_fired`` ``{op}``, ``signal_received`` ``{op, name, payload}`` or
  ``cancel_delivered`` ``{op, reason, request}`` (a cancellation that pre-empted
  the await, possibly before it was ever scheduled).

A run ends with one ``end`` event: ``run_completed`` ``{output}``,
``run_failed`` ``{error}`` or ``run_cancelled`` ``{error}``. Store ids never
appear in payloads, so a history replays identically on every backend.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from kit.contract import JSON, Event
from kit.contract.validation import json_equal

__all__ = [
    "AWAIT_KINDS",
    "END_KEY",
    "END_KINDS",
    "RESOLVED_KINDS",
    "OpRecord",
    "RecordedHistory",
    "await_key",
    "canonical",
    "read_history",
    "resolved_key",
    "same_request",
]

#: Await kind ("command" / "timer" / "signal") -> the event kind of its request.
AWAIT_KINDS: dict[str, str] = {
    "command": "command_scheduled",
    "timer": "timer_scheduled",
    "signal": "signal_awaited",
}
RESOLVED_KINDS = frozenset(
    {"command_completed", "command_failed", "timer_fired", "signal_received", "cancel_delivered"}
)
END_KINDS = frozenset({"run_completed", "run_failed", "run_cancelled"})
END_KEY = "end"


def await_key(op: int) -> str:
    return f"op-{op}/await"


def resolved_key(op: int) -> str:
    return f"op-{op}/resolved"


def canonical(value: JSON) -> bytes:
    """The bytes a module sees for ``value``: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def same_request(a: JSON, b: JSON) -> bool:
    """Whether two await requests are the same (JSON values compared as values)."""
    return bool(json_equal(a, b))


@dataclass
class OpRecord:
    """What the history says about one operation id."""

    op: int
    request: dict[str, JSON] | None = None
    """``{await, ...}`` from the ``/await`` event (or from a pre-empting ``cancel_delivered``)."""
    resolution: Event | None = None


@dataclass
class RecordedHistory:
    """A history indexed for replay."""

    ops: dict[int, OpRecord] = field(default_factory=dict)
    cancel_delivered: bool = False
    ended: Event | None = None

    def record(self, op: int) -> OpRecord:
        return self.ops.setdefault(op, OpRecord(op))

    def resolved_ops(self) -> set[int]:
        return {op for op, rec in self.ops.items() if rec.resolution is not None}


def _op_of(event: Event) -> int | None:
    key = event.operation_key or ""
    if not key.startswith("op-"):
        return None
    head = key[3:].split("/", 1)[0]
    return int(head) if head.isdigit() else None


def read_history(events: Iterable[Event]) -> RecordedHistory:
    """Index ``events`` by operation id; events of other kinds are ignored (they are not ours)."""
    recorded = RecordedHistory()
    for event in events:
        if event.kind in END_KINDS:
            recorded.ended = event
            continue
        op = _op_of(event)
        if op is None:
            continue
        payload = event.payload if isinstance(event.payload, dict) else {}
        rec = recorded.record(op)
        if event.kind in AWAIT_KINDS.values():
            rec.request = {k: v for k, v in payload.items() if k != "op"}
        elif event.kind in RESOLVED_KINDS:
            rec.resolution = event
            if event.kind == "cancel_delivered":
                recorded.cancel_delivered = True
                if rec.request is None and isinstance(payload.get("request"), dict):
                    rec.request = dict(payload["request"])
    return recorded
