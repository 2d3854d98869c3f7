"""Argument limits shared by every store, so all of them refuse the same inputs.

The limits are part of the contract: a key that one dialect can store must be
storable by all of them. Every check raises
:class:`~kit.contract.errors.InvalidArgument` naming the argument and the fix,
before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from kit.clock import ensure_utc
from kit.contract.entities import JSON, Decision, RunStatus
from kit.contract.errors import InvalidArgument, InvalidDecision
from kit.contract.json_exact import json_equal

__all__ = [
    "MAX_KEY",
    "MAX_NAME",
    "MAX_RUN_ID",
    "MAX_TENANT_ID",
    "MAX_WORKER_ID",
    "check_claim",
    "check_decision",
    "check_digest",
    "check_json",
    "check_lease",
    "check_limit",
    "check_queues",
    "check_text",
    "decode_json",
    "digest_of",
    "encode_json",
    "json_equal",
]

MAX_TENANT_ID = 64
MAX_RUN_ID = 128
MAX_WORKER_ID = 128
MAX_KEY = 255
"""Idempotency keys, dedup keys and operation keys."""
MAX_NAME = 200
"""Definition names and versions, command, signal, queue and event-kind names."""

_HEX64 = re.compile(r"[0-9a-f]{64}")


def check_text(label: str, value: object, max_chars: int) -> str:
    """A non-empty string of at most ``max_chars`` code points, storable on every dialect."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{label} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidArgument(f"{label} must not be empty")
    if len(value) > max_chars:
        raise InvalidArgument(
            f"{label} is {len(value)} characters long; the contract allows at most {max_chars}"
        )
    _check_portable_str(label, value)
    return value


def _check_portable_str(label: str, value: str) -> None:
    if "\x00" in value:
        raise InvalidArgument(f"{label} contains U+0000, which PostgreSQL cannot store: remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{label} contains a lone surrogate and is not valid UTF-8: encode it properly"
        ) from None


def check_json(label: str, value: JSON) -> JSON:
    """Refuse anything that would not round-trip as the same JSON value on every dialect."""
    stack: list[tuple[str, object]] = [(label, value)]
    while stack:
        where, item = stack.pop()
        if item is None or isinstance(item, bool | int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidArgument(f"{where} is {item!r}; JSON has no NaN or infinity")
            continue
        if isinstance(item, str):
            _check_portable_str(where, item)
            continue
        if isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(item))
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise InvalidArgument(
                        f"{where} has key {k!r} of type {type(k).__name__}; JSON object keys are str"
                    )
                _check_portable_str(f"{where} key", k)
                stack.append((f"{where}[{k!r}]", v))
            continue
        raise InvalidArgument(
            f"{where} is a {type(item).__name__}, not a JSON value: use None, bool, int, float, "
            "str, list or dict"
        )
    return value


def encode_json(value: JSON) -> str:
    """Compact JSON text for storage (after :func:`check_json`).

    A float is always spelled as a float: Python writes ``1e+300`` for a float at
    or beyond 1e16, which a store keeping numbers as decimals (PostgreSQL's
    ``jsonb``) prints back as the integer ``1000...0``, so such floats are
    written out in full with a ``.0`` fraction that every store keeps.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text if "e+" not in text else _encode_floats_as_floats(value)


def _encode_floats_as_floats(value: JSON) -> str:
    """:func:`encode_json`'s slow path, iterative so deep values encode too."""
    out: list[str] = []
    stack: list[tuple[bool, object]] = [(False, value)]
    while stack:
        literal, item = stack.pop()
        if literal:
            out.append(str(item))
        elif isinstance(item, float):
            out.append(_float_text(item))
        elif isinstance(item, list | tuple):
            parts: list[tuple[bool, object]] = [(True, "[")]
            for i, v in enumerate(item):
                parts.extend([(True, ","), (False, v)] if i else [(False, v)])
            stack.extend(reversed([*parts, (True, "]")]))
        elif isinstance(item, dict):
            parts = [(True, "{")]
            for i, (k, v) in enumerate(item.items()):
                key = json.dumps(k, ensure_ascii=False) + ":"
                parts.extend([(True, "," + key) if i else (True, key), (False, v)])
            stack.extend(reversed([*parts, (True, "}")]))
        else:
            out.append(json.dumps(item, ensure_ascii=False))
    return "".join(out)


def _float_text(number: float) -> str:
    text = repr(number)
    return f"{Decimal(text):f}.0" if "e+" in text else text


def decode_json(text: str | bytes | None) -> JSON:
    if text is None:
        return None
    return json.loads(text)


def digest_of(body: bytes) -> str:
    """The digest a definition must carry: sha256 hex of its bytes."""
    return hashlib.sha256(body).hexdigest()


def check_digest(digest: object, body: object) -> None:
    if not isinstance(body, bytes | bytearray | memoryview):
        raise InvalidArgument(f"definition body must be bytes, got {type(body).__name__}")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise InvalidArgument("digest must be 64 lowercase hex characters (sha256 of the body)")
    if digest != digest_of(bytes(body)):
        raise InvalidArgument(
            "digest is not the sha256 of the body: pass kit.contract.digest_of(body)"
        )


def check_lease(lease: object) -> int:
    """A positive duration; returns it in microseconds."""
    if not isinstance(lease, timedelta):
        raise InvalidArgument(f"lease must be a timedelta, got {type(lease).__name__}")
    from kit.clock import micros

    us = micros(lease)
    if us <= 0:
        raise InvalidArgument(f"lease must be positive, got {lease}")
    return us


def check_limit(limit: object, label: str = "limit") -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidArgument(f"{label} must be a positive int, got {limit!r}")
    return limit


def check_claim(worker_id: object, lease: object, limit: object) -> tuple[int, int]:
    """The arguments every claim takes; returns (lease in microseconds, limit)."""
    check_text("worker_id", worker_id, MAX_WORKER_ID)
    return check_lease(lease), check_limit(limit)


def check_queues(queues: Sequence[str] | None) -> list[str] | None:
    """None (every queue) or a list of valid queue names; an empty list claims nothing."""
    return None if queues is None else [check_text("queue", q, MAX_NAME) for q in queues]


def check_nonnegative(label: str, value: object) -> int:
    if not isinstance(value, timedelta):
        raise InvalidArgument(f"{label} must be a timedelta, got {type(value).__name__}")
    from kit.clock import micros

    us = micros(value)
    if us < 0:
        raise InvalidArgument(f"{label} must not be negative, got {value}")
    return us


def _unique_ids(label: str, ids: Sequence[str]) -> None:
    if not isinstance(ids, tuple | list):
        raise InvalidDecision(f"{label} must be a tuple of ids")
    for i in ids:
        if not isinstance(i, str) or not i:
            raise InvalidDecision(f"{label} holds {i!r}; ids are non-empty str")
    if len(set(ids)) != len(ids):
        raise InvalidDecision(f"{label} names the same id twice: list each once")


def check_decision(decision: object) -> Decision:
    """Refuse a malformed decision before anything is written."""
    if not isinstance(decision, Decision):
        raise InvalidDecision(f"expected a Decision, got {type(decision).__name__}")
    d = decision
    if not isinstance(d.next_status, RunStatus) or d.next_status is RunStatus.RUNNING:
        raise InvalidDecision(
            f"next_status {d.next_status!r} is not allowed: use pending, blocked or a terminal status"
        )
    if d.next_status.terminal and (d.commands or d.timers):
        raise InvalidDecision(
            "a terminal decision cannot schedule commands or timers: drop them or choose "
            "pending/blocked"
        )
    if d.wake_at is not None and d.wake_after is not None:
        raise InvalidDecision("give wake_at or wake_after, not both")
    if d.wake_at is not None:
        if not isinstance(d.wake_at, datetime):
            raise InvalidDecision("wake_at must be a datetime")
        ensure_utc(d.wake_at)
    if d.wake_after is not None:
        check_nonnegative("wake_after", d.wake_after)
    seen_event_keys: set[str] = set()
    for i, e in enumerate(d.events):
        check_text(f"events[{i}].kind", e.kind, MAX_NAME)
        check_json(f"events[{i}].payload", e.payload)
        if e.operation_key is not None:
            check_text(f"events[{i}].operation_key", e.operation_key, MAX_KEY)
            if e.operation_key in seen_event_keys:
                raise InvalidDecision(
                    f"events[{i}] repeats operation key {e.operation_key!r} within one decision"
                )
            seen_event_keys.add(e.operation_key)
    for i, c in enumerate(d.commands):
        check_text(f"commands[{i}].operation_key", c.operation_key, MAX_KEY)
        check_text(f"commands[{i}].name", c.name, MAX_NAME)
        check_text(f"commands[{i}].queue", c.queue, MAX_NAME)
        check_json(f"commands[{i}].input", c.input)
        if not isinstance(c.max_attempts, int) or isinstance(c.max_attempts, bool) or c.max_attempts < 1:
            raise InvalidDecision(f"commands[{i}].max_attempts must be an int >= 1")
        check_nonnegative(f"commands[{i}].delay", c.delay)
    for i, t in enumerate(d.timers):
        check_text(f"timers[{i}].operation_key", t.operation_key, MAX_KEY)
        if (t.delay is None) == (t.fire_at is None):
            raise InvalidDecision(f"timers[{i}] needs exactly one of delay or fire_at")
        if t.delay is not None:
            check_nonnegative(f"timers[{i}].delay", t.delay)
        if t.fire_at is not None:
            ensure_utc(t.fire_at)
    for label in ("consume_signals", "consume_commands", "consume_timers", "cancel_timers"):
        _unique_ids(label, getattr(d, label))
    if set(d.consume_timers) & set(d.cancel_timers):
        raise InvalidDecision("a timer cannot be both consumed and cancelled by one decision")
    check_json("output", d.output)
    check_json("error", d.error)
    return d
