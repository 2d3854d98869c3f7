"""The garbage collector while a fault machine runs: fewer, cheaper collections.

A machine run allocates millions of short-lived objects (steps, states, Hypothesis
choices) on top of a large heap of long-lived ones (modules, Hypothesis' caches).
With CPython's default thresholds the full collections it triggers rescan that
heap each time: about a fifth of a quick run on SQLite went to the collector.
Inside :func:`collecting_less` what was alive before is frozen out of every scan
(``gc.freeze``) and the youngest generation is collected every 5000 allocations
instead of 700. Nothing is left uncollected: the thresholds and the frozen
objects are given back on exit, where the outermost of nested blocks ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["THRESHOLDS", "collecting_less"]

THRESHOLDS = (5000, 20, 10)
"""The collector's thresholds inside :func:`collecting_less` (CPython's defaults: 700, 10, 10)."""

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def collecting_less() -> Iterator[None]:
    """Run the block with the long-lived heap frozen out of collections and a larger young generation."""
    global _depth, _saved
    with _lock:
        _depth += 1
        if _depth == 1:
            _saved = gc.get_threshold()
            gc.collect()
            gc.freeze()
            gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                gc.unfreeze()
                _saved = None
