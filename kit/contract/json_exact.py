"""Exact equality of JSON values: the one comparison every check, machine and checker uses.

Python's ``==`` is type-blind for JSON: ``True == 1``, ``1 == 1.0`` and
``10**30 == 1e30`` all hold, so a store that turns booleans into integers,
integers into floats or big integers into doubles would pass a check written
with ``==``. Here two values are equal only when

* their JSON types match: null, bool, int, float, str, array, object
  (``bool`` is never an ``int``; a ``float`` is never an ``int``, even ``1.0``);
* integers are the same integer, of any size;
* floats are the same number (``a == b``). JSON has one zero: ``-0.0`` equals
  ``0.0`` (RFC 8259 defines numbers by value and PostgreSQL's ``numeric``
  keeps no sign of zero), but a float zero must still come back a float;
* strings are the same code points;
* arrays have the same length and equal items in the same order (a ``tuple``
  is an array, as the encoder writes it);
* objects have exactly the same keys, with equal values.

Values the stores return around payloads (entities, datetimes, enums) are
compared too: a dataclass by its type and fields, an enum by identity and
anything else by its exact type and ``==``. :func:`json_difference` names the
first difference by path, with both values and their types.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from enum import Enum
from typing import Any

__all__ = ["ExactState", "assert_json_equal", "json_difference", "json_equal", "json_kind"]

_ARRAY = "array"
_OBJECT = "object"


def json_kind(value: Any) -> str:
    """The JSON type of ``value`` (``null``, ``bool``, ``int``, ``float``, ``str``, ``array``,
    ``object``), or the Python type name of anything else."""
    if value is None:
        return "null"
    if isinstance(value, Enum):
        return type(value).__qualname__
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list | tuple):
        return _ARRAY
    if isinstance(value, dict):
        return _OBJECT
    return type(value).__qualname__


def json_equal(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same JSON value (see the module's rules)."""
    return json_difference(a, b) is None


def json_difference(a: Any, b: Any, labels: tuple[str, str] = ("got", "want"), path: str = "$") -> str | None:
    """None when equal, else the first difference: its path and both values with their types.

    Iterative, so values nested deeper than the interpreter's recursion limit compare too. Paths
    are spelled only for the difference reported (the fault machines compare whole states after
    every step: formatting every path was most of the comparison).
    """
    stack: list[tuple[_Path, Any, Any]] = [((None, path), a, b)]
    while stack:
        at, x, y = stack.pop()
        if x is y:
            continue
        tx = type(x)
        if tx is type(y):  # the common case first: no JSON kind to work out
            if tx in _PLAIN:
                if x != y:
                    return _describe(_spell(at), x, y, labels)
                continue
            if tx is dict:
                if x.keys() != y.keys():
                    return _keys_differ(at, x, y, labels)
                stack.extend(((at, (_KEY, k)), x[k], y[k]) for k in reversed(list(x)))
                continue
            if tx is list:
                if len(x) != len(y):
                    return _describe(_spell(at), x, y, labels, f"{len(x)} items vs {len(y)}")
                stack.extend(((at, (_INDEX, i)), p, q) for i, p, q in zip(range(len(x) - 1, -1, -1), reversed(x), reversed(y)))
                continue
        kind = json_kind(x)
        if kind != json_kind(y) or (kind not in (_ARRAY, _OBJECT) and tx is not type(y)
                                     and not _same_leaf_kind(x, y)):
            return _describe(_spell(at), x, y, labels)
        if kind == _ARRAY:
            if len(x) != len(y):
                return _describe(_spell(at), x, y, labels, f"{len(x)} items vs {len(y)}")
            stack.extend(((at, (_INDEX, i)), p, q) for i, p, q in zip(range(len(x) - 1, -1, -1), reversed(x), reversed(y)))
        elif kind == _OBJECT:
            if x.keys() != y.keys():
                return _keys_differ(at, x, y, labels)
            stack.extend(((at, (_KEY, k)), x[k], y[k]) for k in reversed(list(x)))
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            fields = [f.name for f in dataclasses.fields(x)]
            stack.extend(((at, (_FIELD, name)), getattr(x, name), getattr(y, name)) for name in reversed(fields))
        elif x != y:
            return _describe(_spell(at), x, y, labels)
    return None


def _keys_differ(at: _Path, x: Any, y: Any, labels: tuple[str, str]) -> str:
    only_x = sorted(map(repr, x.keys() - y.keys()))
    only_y = sorted(map(repr, y.keys() - x.keys()))
    return (f"{_spell(at)}: keys differ: only the {labels[0]} value has {only_x or 'none'}, "
            f"only the {labels[1]} value has {only_y or 'none'}")


_PLAIN = frozenset({str, int, float, bool, type(None), datetime})
"""Leaf types compared by ``==`` once both sides are exactly that type (no JSON kind to tell apart)."""

_Path = tuple[Any, Any]
"""(parent path, step) with the root as (None, its text): spelled out only when reported."""


_INDEX, _KEY, _FIELD = 0, 1, 2
"""Kinds of path step: ``[i]``, ``[key!r]``, ``.name``."""


def _spell(at: _Path) -> str:
    steps: list[str] = []
    node: Any = at
    while node[0] is not None:
        node, (kind, step) = node
        steps.append(f"[{step!r}]" if kind == _KEY else f".{step}" if kind == _FIELD else f"[{step}]")
    steps.append(node[1])
    return "".join(reversed(steps))


def assert_json_equal(got: Any, want: Any, what: str = "value") -> None:
    """Raise AssertionError naming the path and both typed values unless ``got`` is exactly ``want``."""
    difference = json_difference(got, want)
    if difference is not None:
        raise AssertionError(f"{what} is not the same JSON value: {difference}")


class ExactState(dict[str, Any]):
    """A store's observable state whose ``==`` is :func:`json_equal` (``True`` is not ``1``).

    So ``observable_state(store) == before`` in a check compares exactly.
    """

    __hash__ = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, dict) and json_equal(dict(self), dict(other))

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)


def _same_leaf_kind(x: Any, y: Any) -> bool:
    """Leaves whose Python types differ but are one JSON type (a str subclass and a str)."""
    return json_kind(x) in ("int", "float", "str", "bool")


def _describe(where: str, x: Any, y: Any, labels: tuple[str, str], note: str = "") -> str:
    extra = f" ({note})" if note else ""
    return (f"{where}: {labels[0]} {_short(x)} ({json_kind(x)}), "
            f"{labels[1]} {_short(y)} ({json_kind(y)}){extra}")


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}...{text[-16:]}"
