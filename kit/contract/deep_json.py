"""Payloads nested to a given depth, and calls made from a deep stack (CONTRACT.md section 1, depth limit).

Shared by the suite's payload-limit checks and the fault machines' ``deep_payload``
step, so both build, read and call exactly the same way. Nothing here recurses:
a payload at the depth limit must be built and measured from any caller stack.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["SPARE_FRAMES", "from_deep_stack", "nested", "nesting_of"]

T = TypeVar("T")

#: Frames left to a call made "from a deep stack": far fewer than a payload at the depth limit has levels.
SPARE_FRAMES = 200


def nested(depth: int, bottom: Any = "bottom") -> Any:
    """``depth`` levels of alternating objects and arrays around ``bottom`` (built without recursion)."""
    value = bottom
    for i in range(depth):
        value = [value] if i % 2 else {"d": value}
    return value


def nesting_of(value: Any) -> tuple[int, Any]:
    """(depth, innermost value) of a value built by :func:`nested`, read without recursion."""
    depth = 0
    while True:
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        elif isinstance(value, dict) and list(value) == ["d"]:
            value = value["d"]
        else:
            return depth, value
        depth += 1


def from_deep_stack(fn: Callable[[], T], spare: int = SPARE_FRAMES) -> T:
    """``fn()`` called with only ``spare`` frames left below the interpreter's recursion limit."""
    frame, used = sys._getframe(), 0
    while frame is not None:
        used, frame = used + 1, frame.f_back  # type: ignore[assignment]
    target = max(sys.getrecursionlimit() - spare - used, 0)

    def descend(n: int) -> T:
        return fn() if n <= 0 else descend(n - 1)

    return descend(target)
