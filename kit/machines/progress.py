"""Live progress of a running fault machine: examples done of the budget, steps of the current example, seed.

The machines take most of a ``kit check`` run; without this the progress line would sit on one check for
the whole of it. The interpreters report here (an example starts, a step is applied, a divergence is
found) and whoever watches (``kit check``'s progress bar) is told, at most every
:data:`MIN_INTERVAL_S` seconds and on every new example. With nobody watching every call is a no-op, so
``kit replay`` and the pytest route pay nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

__all__ = [
    "MIN_INTERVAL_S", "MachineProgress", "diverged", "example_started", "running", "step_applied", "watching",
]

MIN_INTERVAL_S = 0.2
"""The watcher hears of steps at most this often (an example's start and a divergence always)."""


@dataclass(frozen=True)
class MachineProgress:
    """Where a machine run stands. ``examples`` counts every example tried, shrinking's too; ``steps`` the
    steps of the current example; once a divergence was found the run is ``shrinking`` it."""

    machine: str
    seed: int
    budget: int
    max_steps: int
    examples: int = 0
    steps: int = 0
    shrinking: bool = False

    def line(self) -> str:
        """One short line for a progress bar, e.g. ``reference machine: example 12/80, step 7, seed 5``
        (an example runs up to ``max_steps`` rules; a rule may apply more than one step)."""
        if self.shrinking:
            return (f"{self.machine} machine: shrinking a failure (tried {self.examples} examples), "
                    f"step {self.steps}, seed {self.seed}")
        return (f"{self.machine} machine: example {min(self.examples, self.budget)}/{self.budget}, "
                f"step {self.steps}, seed {self.seed}")


_lock = threading.Lock()
_watcher: Callable[[MachineProgress], None] | None = None
_state: MachineProgress | None = None
_last_told = 0.0


@contextmanager
def watching(callback: Callable[[MachineProgress], None]) -> Iterator[None]:
    """Tell ``callback`` how every machine run inside this block progresses."""
    global _watcher
    previous, _watcher = _watcher, callback
    try:
        yield
    finally:
        _watcher = previous


@contextmanager
def running(machine: str, seed: int, budget: int, max_steps: int) -> Iterator[None]:
    """One machine run (``budget`` examples of up to ``max_steps`` steps) is in progress inside this block."""
    global _state
    with _lock:
        _state = MachineProgress(machine, seed, budget, max_steps)
    _tell(force=True)
    try:
        yield
    finally:
        with _lock:
            _state = None


def example_started() -> None:
    """A new example (a fresh interpreter) starts."""
    _update(lambda s: replace(s, examples=s.examples + 1, steps=0), force=True)


def step_applied() -> None:
    """The current example applied one more step."""
    _update(lambda s: replace(s, steps=s.steps + 1), force=False)


def diverged() -> None:
    """The current example found a divergence: what follows is shrinking."""
    _update(lambda s: replace(s, shrinking=True), force=True)


def _update(change: Callable[[MachineProgress], MachineProgress], force: bool) -> None:
    global _state
    if _watcher is None or _state is None:
        return
    with _lock:
        if _state is None:
            return
        _state = change(_state)
    _tell(force)


def _tell(force: bool) -> None:
    global _last_told
    watcher, state = _watcher, _state
    if watcher is None or state is None:
        return
    now = time.monotonic()
    if not force and now - _last_told < MIN_INTERVAL_S:
        return
    _last_told = now
    watcher(state)
