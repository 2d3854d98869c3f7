"""The wire protocol's value encoding (docs/wire-protocol.md, section "Values").

Every value crosses the wire as plain JSON; the few the contract needs exactly
and JSON cannot carry have one tagged form each:

* a datetime: ``{"$dt": "2030-01-02T03:04:05.678901Z"}`` (UTC, always six digits);
* a duration: ``{"$us": 1500000}`` (integer microseconds);
* an integer beyond JavaScript's safe range (|n| > 2**53 - 1): ``{"$int": "123..."}``;
* bytes: ``{"$bytes": "<base64>"}``;
* a non-finite float: ``{"$float": "NaN" | "Infinity" | "-Infinity"}`` (so the
  store, not the codec, refuses it);
* an object with a key starting with ``$``: ``{"$obj": {...}}`` (its keys literal).

Entities are objects whose keys are the dataclass field names. Decoding is
driven by the type the kit expects, so a store's answer of the wrong shape is a
:class:`WireTypeError` naming the field, never a silently wrong value.
"""

from __future__ import annotations

import base64
import collections.abc
import dataclasses
import enum
import math
import re
import types
import typing
from datetime import UTC, datetime, timedelta
from typing import Any

from kit.clock import micros
from kit.contract.errors import InvalidArgument

__all__ = [
    "MAX_SAFE_INT",
    "PAYLOAD_FIELDS",
    "WireTypeError",
    "decode",
    "decode_value",
    "encode",
    "encode_payload",
    "format_dt",
    "parse_dt",
]

MAX_SAFE_INT = 2**53 - 1
"""Integers beyond this magnitude travel as ``{"$int": "..."}`` (exact in every language)."""

PAYLOAD_FIELDS = frozenset({"input", "output", "error", "payload", "result"})
"""Argument and field names that hold a JSON payload (encoded strictly: only JSON values)."""

_DT = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})Z")


class WireTypeError(ValueError):
    """A value on the wire does not have the type the protocol gives it there."""


# ----------------------------------------------------------------------
# scalars
# ----------------------------------------------------------------------
def format_dt(value: datetime) -> str:
    """``value`` as the wire's one datetime spelling (UTC, microseconds, ``Z``)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(
            f"naive datetime {value.isoformat()} is ambiguous: pass an aware datetime "
            "(e.g. datetime(..., tzinfo=timezone.utc))"
        )
    utc = value.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond:06d}Z"


def parse_dt(text: object, where: str = "value") -> datetime:
    """The datetime a ``$dt`` string names; anything but the exact spelling is refused."""
    if not isinstance(text, str) or not (m := _DT.fullmatch(text)):
        raise WireTypeError(f"{where}: {text!r} is not a datetime spelled YYYY-MM-DDTHH:MM:SS.ffffffZ")
    y, mo, d, h, mi, s, us = (int(g) for g in m.groups())
    try:
        return datetime(y, mo, d, h, mi, s, us, tzinfo=UTC)
    except ValueError as exc:
        raise WireTypeError(f"{where}: {text!r} is not a valid datetime ({exc})") from None


def _encode_int(value: int) -> Any:
    return value if -MAX_SAFE_INT <= value <= MAX_SAFE_INT else {"$int": str(value)}


def _encode_float(value: float) -> Any:
    """Non-integral floats as plain numbers; integral ones tagged (most JSON parsers read ``1.0`` as the
    integer 1, and the contract keeps the two apart); non-finite ones tagged so the store must refuse them."""
    if not math.isfinite(value):
        return {"$float": "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")}
    return {"$float": repr(value)} if value.is_integer() else value


_FLOAT_TEXT = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")


# ----------------------------------------------------------------------
# encoding
# ----------------------------------------------------------------------
def encode_payload(value: Any, where: str = "payload") -> Any:
    """A JSON payload for the wire; a value with no JSON form is refused as InvalidArgument.

    Tuples, sets, bytes and non-str keys have no JSON form, so they never reach a
    store (a Python store refuses them too). NaN and infinities are sent tagged so
    the store itself must refuse them. Iterative: any nesting depth, from any caller stack.
    """
    root: list[Any] = [None]
    work: list[tuple[Any, Any, Any, str]] = [(value, root, 0, where)]
    while work:
        item, parent, slot, at = work.pop()
        if item is None or isinstance(item, bool | str):
            parent[slot] = item
        elif isinstance(item, int):
            parent[slot] = _encode_int(item)
        elif isinstance(item, float):
            parent[slot] = _encode_float(item)
        elif isinstance(item, list):
            items: list[Any] = [None] * len(item)
            parent[slot] = items
            work.extend((v, items, i, f"{at}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, dict):
            fields: dict[str, Any] = {}
            for k in item:
                if not isinstance(k, str):
                    raise InvalidArgument(f"{at} has key {k!r} of type {type(k).__name__}; JSON object keys are str")
                fields[k] = None
            parent[slot] = {"$obj": fields} if any(k.startswith("$") for k in fields) else fields
            work.extend((v, fields, k, f"{at}[{k!r}]") for k, v in item.items())
        else:
            raise InvalidArgument(
                f"{at} is a {type(item).__name__}, not a JSON value: use None, bool, int, float, str, list or dict"
            )
    return root[0]


def encode(value: Any, field: str = "value") -> Any:
    """Any argument or result for the wire (entities as objects of their fields)."""
    if field in PAYLOAD_FIELDS:
        return encode_payload(value, field)
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, int):
        return _encode_int(value)
    if isinstance(value, float):
        return _encode_float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            # Sent as written so the store refuses it (the contract: naive is ambiguous).
            return {"$dt": value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond:06d}"}
        return {"$dt": format_dt(value)}
    if isinstance(value, timedelta):
        return {"$us": _encode_int(micros(value))}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [encode(v, field) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v, str(k)) for k, v in value.items()}
    raise InvalidArgument(f"{field} is a {type(value).__name__}, which has no wire encoding")


# ----------------------------------------------------------------------
# decoding
# ----------------------------------------------------------------------
def decode_value(value: Any, where: str = "value") -> Any:
    """A JSON payload from the wire, tags resolved (``$int``, ``$obj``, ``$float``); iterative, any depth."""
    root: list[Any] = [None]
    work: list[tuple[Any, Any, Any, str]] = [(value, root, 0, where)]
    while work:
        item, parent, slot, at = work.pop()
        if isinstance(item, list):
            items: list[Any] = [None] * len(item)
            parent[slot] = items
            work.extend((v, items, i, f"{at}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, dict):
            if len(item) == 1:
                (tag, inner), = item.items()
                if tag == "$int":
                    if not isinstance(inner, str) or not re.fullmatch(r"-?\d+", inner):
                        raise WireTypeError(f"{at}: $int must hold decimal digits, got {inner!r}")
                    parent[slot] = int(inner)
                    continue
                if tag == "$float":
                    if not isinstance(inner, str) or not (inner in ("NaN", "Infinity", "-Infinity")
                                                          or _FLOAT_TEXT.fullmatch(inner)):
                        raise WireTypeError(f"{at}: $float must be a decimal float literal, NaN, Infinity or -Infinity")
                    parent[slot] = float(inner.replace("Infinity", "inf"))
                    continue
                if tag == "$obj":
                    if not isinstance(inner, dict):
                        raise WireTypeError(f"{at}: $obj must hold an object")
                    item = inner
                elif tag.startswith("$"):
                    raise WireTypeError(f"{at}: unknown tag in {sorted(item)}: objects with $ keys travel as $obj")
            elif any(k.startswith("$") for k in item):
                raise WireTypeError(f"{at}: unknown tag in {sorted(item)}: objects with $ keys travel as $obj")
            fields: dict[str, Any] = dict.fromkeys(item)
            parent[slot] = fields
            work.extend((v, fields, k, f"{at}[{k!r}]") for k, v in item.items())
        else:
            parent[slot] = item
    return root[0]


def _tagged(value: Any, tag: str, where: str) -> Any:
    if not isinstance(value, dict) or set(value) != {tag}:
        raise WireTypeError(f"{where}: expected {{{tag!r}: ...}}, got {_short(value)}")
    return value[tag]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _int(value: Any, where: str) -> int:
    if isinstance(value, dict):
        _tagged(value, "$int", where)
        return int(decode_value(value, where))
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireTypeError(f"{where}: expected an integer, got {_short(value)}")
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        from kit.contract import entities

        _HINTS[cls] = typing.get_type_hints(cls, vars(entities))
    return _HINTS[cls]


def decode(value: Any, expected: Any, where: str = "result") -> Any:
    """``value`` from the wire as the Python type ``expected`` (entities, enums, lists, unions)."""
    if expected is Any:
        return decode_value(value, where)
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(expected)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return decode(value, option, where)
            except WireTypeError as exc:
                errors.append(str(exc))
        raise WireTypeError(errors[0] if len(errors) == 1 else f"{where}: {_short(value)} matches none of {options}")
    if origin is dict:
        if not isinstance(value, dict):
            raise WireTypeError(f"{where}: expected an object, got {_short(value)}")
        return value
    if origin in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, list):
            raise WireTypeError(f"{where}: expected a list, got {_short(value)}")
        inner = typing.get_args(expected)[0]
        items = [decode(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if expected is type(None):
        if value is not None:
            raise WireTypeError(f"{where}: expected null, got {_short(value)}")
        return None
    if isinstance(expected, type):
        return _decode_type(value, expected, where)
    raise WireTypeError(f"{where}: cannot decode type {expected!r}")


def _decode_type(value: Any, expected: type, where: str) -> Any:
    if issubclass(expected, enum.Enum):
        try:
            return expected(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in expected)
            raise WireTypeError(f"{where}: {_short(value)} is not one of {allowed}") from None
    if expected is bool:
        if not isinstance(value, bool):
            raise WireTypeError(f"{where}: expected true or false, got {_short(value)}")
        return value
    if expected is int:
        return _int(value, where)
    if expected is str:
        if not isinstance(value, str):
            raise WireTypeError(f"{where}: expected a string, got {_short(value)}")
        return value
    if expected is datetime:
        return parse_dt(_tagged(value, "$dt", where), where)
    if expected is timedelta:
        return timedelta(microseconds=_int(_tagged(value, "$us", where), where))
    if expected is bytes:
        text = _tagged(value, "$bytes", where)
        try:
            return base64.b64decode(text, validate=True)
        except (ValueError, TypeError):
            raise WireTypeError(f"{where}: $bytes is not base64") from None
    if dataclasses.is_dataclass(expected):
        if not isinstance(value, dict):
            raise WireTypeError(f"{where}: expected a {expected.__name__} object, got {_short(value)}")
        hints = _hints(expected)
        fields = [f for f in dataclasses.fields(expected) if f.init]
        names = {f.name for f in fields}
        unknown = sorted(set(value) - names)
        if unknown:
            raise WireTypeError(f"{where}: {expected.__name__} has no field {unknown[0]!r}")
        kwargs = {}
        for f in fields:
            if f.name not in value:
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                    continue
                raise WireTypeError(f"{where}: {expected.__name__} lacks field {f.name!r}")
            hint = Any if f.name in PAYLOAD_FIELDS else hints[f.name]
            kwargs[f.name] = decode(value[f.name], hint, f"{where}.{f.name}")
        return expected(**kwargs)
    raise WireTypeError(f"{where}: cannot decode type {expected.__name__}")
