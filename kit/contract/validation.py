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
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from kit.clock import ensure_utc
from kit.contract.entities import JSON, Decision, RunStatus
from kit.contract.errors import InvalidArgument, InvalidDecision, StorageError
from kit.contract.json_exact import json_equal

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_KEY",
    "MAX_NAME",
    "MAX_REASON",
    "MAX_RUN_ID",
    "MAX_TENANT_ID",
    "MAX_WORKER_ID",
    "check_claim",
    "check_decision",
    "check_digest",
    "check_json",
    "check_lease",
    "check_limit",
    "check_optional_text",
    "check_queues",
    "check_text",
    "copy_json",
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
MAX_REASON = 10_000
"""A cancel reason: free text (it may be empty), with the same portability rules as every key."""
MAX_JSON_DEPTH = 512
"""How deeply a JSON payload may nest arrays and objects (a scalar is depth 0, ``[1]`` depth 1).

Deeper values are refused with :class:`InvalidArgument` before anything is
written, so nothing stored can be too deep to read back."""

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
    """Refuse text that some dialect cannot store as given (U+0000, lone surrogates)."""
    if "\x00" in value:
        raise InvalidArgument(f"{label} contains U+0000, which PostgreSQL cannot store: remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{label} contains a lone surrogate and is not valid UTF-8: encode it properly"
        ) from None


def check_optional_text(label: str, value: object, max_chars: int) -> str | None:
    """``None``, or text under the same rules as :func:`check_text` (free text may be empty)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{label} must be a str or None, got {type(value).__name__}")
    if len(value) > max_chars:
        raise InvalidArgument(
            f"{label} is {len(value)} characters long; the contract allows at most {max_chars}"
        )
    _check_portable_str(label, value)
    return value


def check_json(label: str, value: JSON) -> JSON:
    """Refuse anything that would not round-trip as the same JSON value on every dialect.

    Walks the value without recursion, so a value of any depth is judged (and one
    nesting deeper than :data:`MAX_JSON_DEPTH` refused) whatever the caller's stack.
    Only containers are visited one by one; an item's path is spelled out only when
    it is refused.
    """
    if not isinstance(value, list | dict):
        _check_leaf(label, value)
        return value
    stack: list[tuple[_Where, object, int]] = [(label, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if isinstance(item, list | dict) and depth >= MAX_JSON_DEPTH:
            raise InvalidArgument(
                f"{label} nests arrays and objects deeper than {MAX_JSON_DEPTH} levels, the contract's "
                "limit: flatten it or store the deep part as a string"
            )
        if isinstance(item, list):
            for i, v in enumerate(item):
                if type(v) not in _SCALARS:
                    stack.append(((where, i), v, depth + 1))
                elif not _fine(v):
                    _check_leaf((where, i), v)
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise InvalidArgument(
                        f"{_spell(where)} has key {k!r} of type {type(k).__name__}; JSON object keys are str"
                    )
                if not _fine(k):
                    _check_portable_str(f"{_spell(where)} key", k)
                if type(v) not in _SCALARS:
                    stack.append(((where, k), v, depth + 1))
                elif not _fine(v):
                    _check_leaf((where, k), v)
            continue
        _check_leaf(where, item)
    return value


_SCALARS = frozenset({type(None), bool, int, float, str})
"""The exact types of JSON scalars: an item of one of them is judged in place (subclasses go the long way)."""

_Where = Any
"""An item's path: the label, or (parent path, list index or object key); spelled out only for an error."""


def _fine(item: object) -> bool:
    """Whether a JSON scalar (of an exact type in :data:`_SCALARS`) is storable as it is."""
    if type(item) is float:
        return math.isfinite(item)
    if type(item) is str:
        return "\x00" not in item and item.isascii() or _utf8(item)
    return True


def _spell(where: _Where) -> str:
    steps: list[str] = []
    node = where
    while isinstance(node, tuple):
        node, step = node
        steps.append(f"[{step}]" if isinstance(step, int) else f"[{step!r}]")
    steps.append(node)
    return "".join(reversed(steps))


def _check_leaf(where: _Where, item: object) -> None:
    """Refuse a value that is no JSON container and no storable JSON scalar."""
    if item is None or isinstance(item, bool | int):
        return
    if isinstance(item, float):
        if not math.isfinite(item):
            raise InvalidArgument(f"{_spell(where)} is {item!r}; JSON has no NaN or infinity")
        return
    if isinstance(item, str):
        _check_portable_str(_spell(where), item)
        return
    raise InvalidArgument(
        f"{_spell(where)} is a {type(item).__name__}, not a JSON value: use None, bool, int, float, "
        "str, list or dict"
    )


def _utf8(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def copy_json(value: JSON) -> JSON:
    """A deep copy of a JSON value that shares no list or dict with it (no recursion: any depth).

    Each container is copied at C speed (``list(...)``/``dict(...)``) and only the containers in it are
    visited again."""
    if not isinstance(value, list | dict):
        return value
    root: list[JSON] = [value]
    work: list[tuple[list[JSON] | dict[str, JSON], int | str]] = [(root, 0)]
    push, pop = work.append, work.pop
    while work:
        parent, slot = pop()
        item = parent[slot]  # type: ignore[index]
        if isinstance(item, list):
            copied_list: list[JSON] = list(item)
            parent[slot] = copied_list  # type: ignore[index]
            for i, v in enumerate(copied_list):
                if isinstance(v, list | dict):
                    push((copied_list, i))
        else:
            copied_dict: dict[str, JSON] = dict(item)
            parent[slot] = copied_dict  # type: ignore[index]
            for k, v in copied_dict.items():
                if isinstance(v, list | dict):
                    push((copied_dict, k))
    return root[0]


def _stack_independent(fn: Callable[[object], JSON], arg: object) -> JSON:
    """``fn(arg)`` for the recursive C codec of :mod:`json`, whatever the caller's stack depth.

    The codec recurses once per nesting level against the interpreter's recursion
    limit, which the caller's own frames already use up; a value the contract allows
    could then fail or succeed depending on where it is read from. When the codec
    runs out of stack here it runs again on a fresh thread, whose stack is empty.
    """
    try:
        return fn(arg)
    except RecursionError:
        pass
    box: list[JSON] = []
    errors: list[BaseException] = []

    def fresh() -> None:
        try:
            box.append(fn(arg))
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=fresh, name="kit-json", daemon=True)
    thread.start()
    thread.join()
    if errors:
        if isinstance(errors[0], RecursionError):
            raise StorageError(
                f"a stored JSON value nests deeper than this interpreter can decode (the contract allows "
                f"{MAX_JSON_DEPTH} levels; it predates that limit): rewrite it with a flatter value"
            ) from None
        raise errors[0]
    return box[0]


def _dumps(value: object) -> JSON:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_json(value: JSON) -> str:
    """Compact JSON text for storage (after :func:`check_json`), at any caller stack depth.

    A float is always spelled as a float: Python writes ``1e+300`` for a float at
    or beyond 1e16, which a store keeping numbers as decimals (PostgreSQL's
    ``jsonb``) prints back as the integer ``1000...0``, so such floats are
    written out in full with a ``.0`` fraction that every store keeps.
    """
    text: str = _stack_independent(_dumps, value)
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
    """The JSON value of stored text; works at any caller stack depth (see :data:`MAX_JSON_DEPTH`)."""
    if text is None:
        return None
    return _stack_independent(json.loads, text)  # type: ignore[arg-type]


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
