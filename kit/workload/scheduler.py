"""A seeded scheduler for real threads on real connections: one participant moves at a time.

Each participant (a stress actor, its duplicate sender, the store clock) is a
thread with its own database connection. It *parks* at every statement its
stores send (through the statement hook, the same seam the fault layer uses to
park a worker at a named point) and at every wait (an idle poll, a pause, a
crash's downtime), and runs only when the scheduler *grants* it: from one
park to the next is one *step*. The driver thread calls :meth:`Scheduler.step`
to pick the next participant, from a seeded RNG or from a recorded schedule.

Guarantees:

* A decision is taken only when every participant is quiescent: parked,
  finished, or *blocked* (inside a statement that waits on a lock another
  participant holds). So the eligible set, and with it the choice, depends on
  the schedule alone, not on timing.
* Blocking is detected by a short wait on the granted participant's thread,
  confirmed by a backend probe when one is given (PostgreSQL:
  ``pg_blocking_pids``; MySQL / MariaDB: the process list's lock states and
  ``SHOW ENGINE INNODB STATUS``, read live; the session is read from the
  statement's cursor on the participant's own stack); without a probe, a step
  begun at a statement and still running after the short wait, while another
  participant holds an open transaction, counts as blocked. A transaction's
  locks count as held until its commit returned (the ``COMMITTED`` point). SQLite's single write lock is modelled instead: ``BEGIN IMMEDIATE``
  is not eligible while another participant holds it, so nothing ever blocks.
* A blocked participant is looked at again after every step that ends a
  transaction; a wait that never resolves is bounded by ``stall_s`` (then
  :class:`Stalled` is raised to the driver, never a hang).
* ``choices`` is the schedule: the name chosen at each step. Replaying it
  (``schedule=``) grants the same names in the same order; a recorded name not
  eligible at its turn is skipped and counted in ``skipped`` (a faithful replay
  skips none), and the run ends when the schedule is exhausted.
* :meth:`halt` releases every participant with :class:`Halted` (raised at its
  next park), one at a time in registration order, so even the shutdown is
  deterministic; a ``ROLLBACK`` is never held.
"""

from __future__ import annotations

import random
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.connections import COMMITTED_POINT

__all__ = ["BlockProbe", "Halted", "Participant", "Scheduler", "Stalled", "StepRecord"]

BlockProbe = Callable[["Participant", Any], "bool | None"]
"""Whether a participant's statement (running on the given hooked cursor) waits on a database lock
(``None``: cannot tell)."""

RUNNING, PARKED, BLOCKED, DONE = "running", "parked", "blocked", "done"
_BEGIN = re.compile(r"^\s*(BEGIN|START\s+TRANSACTION)\b", re.IGNORECASE)
_WRITE_LOCK = re.compile(r"^\s*BEGIN\s+IMMEDIATE\b", re.IGNORECASE)
_ROLLBACK = re.compile(r"^\s*ROLLBACK\b", re.IGNORECASE)


class Halted(BaseException):
    """Raised at a participant's park when the run is over: unwind, write nothing more."""


class Stalled(RuntimeError):
    """A participant neither parked nor blocked within the bound: the run cannot go on deterministically."""


@dataclass
class Participant:
    """One thread under the scheduler's control."""

    name: str
    order: int
    state: str = RUNNING
    label: str = ""
    """What it waits to do: a statement, ``sleep``, ``begin``, ``join``..."""
    ready: Callable[[], bool] | None = None
    ident: int | None = None
    in_tx: bool = False
    write_lock: bool = False
    session: Any = None
    """The store whose statement is pending (for block probes)."""
    cursor: Any = None
    """The hooked cursor of the statement this step runs (``None``: the step began at a wait, not a
    statement); found on the participant's own stack, so block probes can name its server session."""
    since: float = 0.0
    granted: bool = False
    halted: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    wake: threading.Event = field(default_factory=threading.Event)
    """Set to let the participant go (granted or halted): only its own thread waits on it."""


@dataclass
class StepRecord:
    """One scheduling decision: who moved, from which park, and the history entries it covered."""

    index: int
    name: str
    label: str
    entries_before: int
    blocked: bool = False
    """The step's statement waited on another participant's lock."""


class Scheduler:
    """See the module docstring."""

    def __init__(self, seed: int, *, schedule: Sequence[str] | None = None, block_s: float = 0.03,
                 stall_s: float = 20.0, probe: BlockProbe | None = None,
                 entries: Callable[[], int] = lambda: 0, session_of: Callable[[Any], Any] | None = None) -> None:
        self._cond = threading.Condition()
        self._parts: dict[str, Participant] = {}
        self._threads: dict[int, Participant] = {}
        self.rng = random.Random(f"scheduler/{seed}")
        self.replay = list(schedule) if schedule is not None else None
        self._cursor = 0
        self.skipped = 0
        self.choices: list[str] = []
        self.steps: list[StepRecord] = []
        self.block_s, self.stall_s = block_s, stall_s
        self.probe = probe
        self.session_of = session_of
        """Reads a statement's server session from its cursor, in the participant's own thread."""
        self._entries = entries
        self._tx_ended = False
        self.halting = False
        self.blocks = 0
        self.errors: list[str] = []

    # -- participant side ------------------------------------------------------------
    def register(self, name: str) -> Participant:
        """Make ``name`` a participant (running, not yet attached to a thread); called before its thread starts."""
        with self._cond:
            if name in self._parts and self._parts[name].state != DONE:
                raise ValueError(f"participant {name!r} is already registered")
            part = Participant(name, len(self._parts) if name not in self._parts else self._parts[name].order,
                               since=time.monotonic())
            self._parts[name] = part
            return part

    def get(self, name: str) -> Participant:
        with self._cond:
            return self._parts[name]

    def attach(self, part: Participant) -> None:
        """Bind ``part`` to the calling thread (its first call)."""
        with self._cond:
            part.ident = threading.get_ident()
            self._threads[part.ident] = part

    def leave(self) -> None:
        """The calling participant's thread is ending."""
        with self._cond:
            part = self._threads.pop(threading.get_ident(), None)
            if part is not None:
                part.state, part.in_tx, part.write_lock = DONE, False, False
                self._cond.notify_all()

    def current(self) -> Participant | None:
        return self._threads.get(threading.get_ident())

    def park(self, label: str, ready: Callable[[], bool] | None = None, session: Any = None,
             cursor: Any = None) -> None:
        """Wait (the calling participant) until granted; raise :class:`Halted` if the run is over.

        A thread that is not a participant passes at once (the driver's own setup calls).
        """
        part = self.current()
        if part is None:
            return
        if cursor is None:  # a wait inside a statement's hook (a pause fault): once granted, that statement
            cursor = _own_cursor(None)  # runs, and may queue on a lock, so it is probed as any statement
        with self._cond:
            if part.halted:
                raise Halted(part.name)
            part.state, part.label, part.ready, part.session, part.granted = PARKED, label, ready, session, False
            part.cursor = cursor
            part.wake.clear()
            self._cond.notify_all()  # the driver is the only waiter on the condition
        part.wake.wait()
        with self._cond:
            part.ready = None
            part.state = RUNNING
            if part.halted:
                raise Halted(part.name)

    def statement(self, statement: str, session: Any = None) -> None:
        """The statement gate: park before ``statement`` (a ``ROLLBACK`` or ``COMMITTED`` point passes)."""
        part = self.current()
        if part is None:
            return
        if statement == COMMITTED_POINT:  # the commit returned: its locks are gone (not before: a pause
            self.transaction_ended()       # at the COMMIT point still holds them)
            return
        if _ROLLBACK.match(statement):
            self.transaction_ended()
            return
        ready = None
        if _WRITE_LOCK.match(statement):
            ready = lambda: not any(p.write_lock for p in self._parts.values() if p is not part)
        cursor = _own_cursor()
        if self.session_of is not None:
            part.meta["session"] = self.session_of(cursor)
        self.park(statement, ready, session, cursor)
        with self._cond:
            if _BEGIN.match(statement):
                part.in_tx, part.write_lock = True, bool(_WRITE_LOCK.match(statement))

    def transaction_ended(self) -> None:
        """The calling participant's transaction is over (rolled back, or its connection closed)."""
        part = self.current()
        if part is None:
            return
        with self._cond:
            if part.in_tx:
                part.in_tx = part.write_lock = False
                self._tx_ended = True
                self._cond.notify_all()

    def sleep_until(self, label: str, ready: Callable[[], bool]) -> None:
        """Park until ``ready()`` holds at a decision and the participant is chosen."""
        self.park(label, ready)

    # -- driver side ---------------------------------------------------------------------
    def participants(self) -> list[Participant]:
        with self._cond:
            return sorted(self._parts.values(), key=lambda p: p.order)

    def settle(self) -> None:
        """Wait until every participant is parked, blocked or done (see the module docstring)."""
        with self._cond:
            if self._tx_ended:
                self._tx_ended = False
                now = time.monotonic()
                for part in self._parts.values():
                    if part.state == BLOCKED:
                        part.state, part.since = RUNNING, now
            started = time.monotonic()
            while True:
                running = [p for p in self._parts.values() if p.state == RUNNING]
                if not running:
                    return
                now = time.monotonic()
                for part in running:
                    if now - part.since >= self.block_s and self._blocked(part):
                        part.state = BLOCKED
                        self.blocks += 1
                        step = part.meta.get("step")
                        if step is not None:
                            self.steps[step].blocked = True
                if not any(p.state == RUNNING for p in self._parts.values()):
                    return
                if now - started > self.stall_s:
                    names = ", ".join(f"{p.name} ({p.label[:60]!r})" for p in running)
                    others = "; ".join(f"{p.name}: {p.state}{' in a transaction' if p.in_tx else ''}"
                                       f"{' holding the write lock' if p.write_lock else ''} at {p.label[:40]!r}"
                                       for p in self._parts.values() if p not in running and p.state != DONE)
                    raise Stalled(f"no progress for {self.stall_s:g} s from {names}: a lock wait that never "
                                  f"resolves, or a participant stuck outside the database, e.g. on an in-process "
                                  f"lock of the store (then use --mode free) (others: {others})")
                self._cond.wait(self.block_s / 3)

    def _blocked(self, part: Participant) -> bool:
        """Whether a running participant waits on a lock held by another (called with the lock held)."""
        cursor = part.cursor
        if cursor is None:  # the step began at a wait: Python code until its next statement
            return False
        if not any(p.in_tx for p in self._parts.values() if p is not part and p.state != DONE):
            return False
        if self.probe is not None:
            self._cond.release()
            try:
                verdict = self.probe(part, cursor)
            finally:
                self._cond.acquire()
            if verdict is not None:
                return verdict
        return True

    def eligible(self) -> list[str]:
        with self._cond:
            return [p.name for p in sorted(self._parts.values(), key=lambda p: p.order)
                    if p.state == PARKED and (p.ready is None or p.ready())]

    def waiting(self) -> list[Participant]:
        """Parked participants whose condition does not hold yet (sleepers, joiners, lock queuers)."""
        with self._cond:
            return [p for p in sorted(self._parts.values(), key=lambda p: p.order)
                    if p.state == PARKED and p.ready is not None and not p.ready()]

    def blocked(self) -> list[str]:
        with self._cond:
            return [p.name for p in self._parts.values() if p.state == BLOCKED]

    def step(self) -> str | None:
        """Settle, choose, grant; the name granted, or ``None`` (nothing eligible, or the schedule is exhausted)."""
        self.settle()
        names = self.eligible()
        if not names:
            return None
        if self.replay is None:
            choice = self.rng.choice(names)
        else:
            while True:
                if self._cursor >= len(self.replay):
                    return None
                choice = self.replay[self._cursor]
                self._cursor += 1
                if choice in names:
                    break
                self.skipped += 1
        self.grant(choice)
        return choice

    @property
    def exhausted(self) -> bool:
        return self.replay is not None and self._cursor >= len(self.replay)

    def grant(self, name: str) -> None:
        with self._cond:
            part = self._parts[name]
            self.choices.append(name)
            part.meta["step"] = len(self.steps)
            self.steps.append(StepRecord(len(self.steps), name, part.label[:200], self._entries()))
            part.granted = True
            part.state, part.since = RUNNING, time.monotonic()  # running from now: settle() waits for it
            part.wake.set()

    def force(self, name: str) -> None:
        """Wake a parked participant whose condition does not hold (the deadlock breaker); recorded as a choice.

        The driver picks ``name`` by a rule of the state, so a replay forces the same one at the same
        point; its recorded choice is consumed (or counted as skipped if it differs).
        """
        if self.replay is not None:
            if self._cursor < len(self.replay) and self.replay[self._cursor] == name:
                self._cursor += 1
            else:
                self.skipped += 1
        self.grant(name)

    def halt(self, timeout: float = 10.0) -> list[str]:
        """End every participant, one at a time in order (blocked ones last, once their lock holders
        rolled back); returns those that did not finish within ``timeout`` seconds each."""
        self.halting = True
        stuck: list[str] = []
        pending = self.participants()
        while pending:
            with self._cond:
                ready = [p for p in pending if p.state != BLOCKED] or pending
                part = ready[0]
                pending.remove(part)
                part.halted = True
                part.wake.set()
                deadline = time.monotonic() + timeout
                while part.state != DONE and time.monotonic() < deadline:
                    self._cond.wait(0.05)
                if part.state != DONE:
                    stuck.append(part.name)
        return stuck


def _own_cursor(outside: Any = True) -> Any:
    """The hooked cursor whose ``execute`` called the current thread's statement hook (``True`` for a
    wire store's call, whose statements run in another process; ``outside`` when no statement is on the
    stack). Reads the calling thread's own stack only: another thread's running frames cannot be
    walked safely."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("execute", "executemany", "execute_batch") and code.co_filename.endswith("connections.py"):
            return frame.f_locals.get("self", True)
        if code.co_name == "call" and code.co_filename.endswith(("wire/client.py", "wire\\client.py")):
            return True
        frame = frame.f_back
    return outside
