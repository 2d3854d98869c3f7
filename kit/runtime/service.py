"""Run deciders, command workers and timer loops as threads of this process.

Each loop opens its own store (stores are not thread-safe), verifies the
schema before polling, and polls once; then it waits on its role's
:class:`Bell`, whose tokens (one per announced unit of work) make it poll again
at once, else after ``idle_min_s`` doubling to a cap while polls find nothing
(the cap bounds how late it finds work no bell announced). A ring wakes *one*
waiter per unit of work: one decider per started run, signal or finished
command, one worker per new command. The timer loop sleeps until the next
timer this process scheduled is due (its delay, measured from the commit) or
its cap. Bells only save latency and idle polls: every component also works
alone, in another process, on another host, because all coordination goes
through the store (the capped polls find work no bell announced). A storage
fault ends one poll (a lost connection is reopened); the lease machinery
recovers.
"""

from __future__ import annotations

import contextlib
import heapq
import threading
import time
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, Self

from kit.contract import ClockMode, Database, Storage
from kit.contract.errors import ConnectionLost, StorageError
from kit.runtime import abi
from kit.runtime.decider import Decider
from kit.runtime.module import Registry
from kit.runtime.replay import Plan
from kit.runtime.stats import RuntimeStats
from kit.runtime.timers import TimerLoop
from kit.runtime.worker import CommandWorker, Handler, Heartbeats

__all__ = ["Bell", "Runtime", "RuntimeConfig"]


class _Pollable(Protocol):
    def poll(self) -> int: ...


class Bell:
    """Wake-up tokens pollers wait on: each ring is one unit of work and wakes one waiter.

    A ring while every poller is busy is kept as a token, so the next poller to wait polls at
    once instead of sleeping through announced work.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._tokens = 0
        self._closed = False

    def ring(self, n: int = 1) -> None:
        """Announce ``n`` units of work: wake up to ``n`` waiters."""
        if n <= 0:
            return
        with self._cond:
            self._tokens += n
            self._cond.notify(n)

    def close(self) -> None:
        """Wake every waiter for good (the runtime is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait for a ring (taking its token) or ``timeout`` s; return whether it rang."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._tokens > 0 or self._closed, timeout):
                return False
            if self._tokens > 0:
                self._tokens -= 1
            return True


class _Dues:
    """When the timers this process scheduled fall due (monotonic seconds), earliest first."""

    SLACK_S = 0.002
    """Added to each due time: the store's clock counts the delay from its commit, a hair earlier."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[float] = []

    def add(self, delay_s: float) -> None:
        with self._lock:
            heapq.heappush(self._heap, time.monotonic() + max(0.0, delay_s) + self.SLACK_S)

    def take_due(self, now: float | None = None) -> None:
        """Forget the due times passed by ``now`` (default: now; the poll about to run serves them)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._heap and self._heap[0] <= now:
                heapq.heappop(self._heap)

    def until_next(self, cap: float) -> float:
        """Seconds until the next due time, at most ``cap``."""
        with self._lock:
            if not self._heap:
                return cap
            return min(cap, max(0.0, self._heap[0] - time.monotonic()))


@dataclass(frozen=True)
class RuntimeConfig:
    decision_lease: timedelta = timedelta(seconds=30)
    command_lease: timedelta = timedelta(seconds=30)
    decider_batch: int = 1
    command_batch: int = 1
    fuel: int = abi.DEFAULT_FUEL
    retry_after: timedelta = timedelta(milliseconds=10)
    idle_min_s: float = 0.01
    """The first wait after an empty poll when no bell rings (doubling to the cap)."""
    idle_max_s: float = 0.1
    """The longest a decider or worker waits without polling (work of other processes rings no bell)."""
    timer_idle_max_s: float = 0.1
    """The longest the timer loop sleeps when no timer this process scheduled falls due sooner."""


class Runtime:
    """``deciders`` + ``workers`` + ``timer_loops`` threads on ``database`` for one tenant."""

    def __init__(
        self,
        database: Database,
        registry: Registry,
        handlers: Mapping[str, Handler],
        *,
        tenant_id: str = "default",
        clock: ClockMode = ClockMode.DATABASE,
        deciders: int = 1,
        workers: int = 1,
        timer_loops: int = 1,
        config: RuntimeConfig | None = None,
        stats: RuntimeStats | None = None,
    ) -> None:
        self.database, self.registry, self.handlers = database, registry, dict(handlers)
        self.tenant_id, self.clock, self.config = tenant_id, clock, config or RuntimeConfig()
        self.counts = {"decider": deciders, "worker": workers, "timers": timer_loops}
        self.stats = stats if stats is not None else RuntimeStats()
        self.errors: list[str] = []
        self._bells = {role: Bell() for role in self.counts}
        self._dues = _Dues()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._heartbeats = Heartbeats(self.open_store, self.config.command_lease, self.stats)

    def open_store(self) -> Storage:
        return self.database.open(self.tenant_id, clock=self.clock)

    def nudge(self) -> None:
        """Tell one idle decider there may be work (after ``start_run``, ``send_signal``...)."""
        self._bells["decider"].ring()

    def start(self) -> Self:
        """Start every loop; fails here, in the caller's thread, if the schema is not current."""
        probe = self.open_store()
        try:
            probe.verify_schema()
        finally:
            probe.close()
        for role, count in self.counts.items():
            for i in range(count):
                name = f"{role}-{i}-{uuid.uuid4().hex[:6]}"
                thread = threading.Thread(
                    target=self._serve, args=(role, name), name=f"kit-{name}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every loop after its current poll, and close their stores."""
        self._stopping.set()
        for bell in self._bells.values():
            bell.close()
        for thread in self._threads:
            thread.join(timeout)
        self._heartbeats.stop()
        self._threads.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- loops ------------------------------------------------------------
    def _component(self, role: str, name: str, store: Storage) -> _Pollable:
        cfg = self.config
        if role == "decider":
            return Decider(
                store,
                self.registry,
                worker_id=name,
                lease=cfg.decision_lease,
                batch=cfg.decider_batch,
                fuel=cfg.fuel,
                stats=self.stats,
                on_commit=self._committed,
            )
        if role == "worker":
            return CommandWorker(
                store,
                self.handlers,
                worker_id=name,
                lease=cfg.command_lease,
                batch=cfg.command_batch,
                retry_after=cfg.retry_after,
                stats=self.stats,
                heartbeats=self._heartbeats,
                on_done=self.nudge,
            )
        return TimerLoop(store, stats=self.stats, on_fired=self._bells["decider"].ring)

    def _committed(self, plan: Plan) -> None:
        self._bells["worker"].ring(len(plan.commands))  # one worker per new command
        for timer in plan.timers:  # the timer loop sleeps until the earliest is due
            self._dues.add(timer.delay.total_seconds() if timer.delay is not None else 0.0)
        if plan.timers:
            self._bells["timers"].ring()

    def _serve(self, role: str, name: str) -> None:
        bell = self._bells[role]
        timers = role == "timers"
        cap = self.config.timer_idle_max_s if timers else self.config.idle_max_s
        idle = self.config.idle_min_s
        store: Storage | None = None
        component: _Pollable | None = None
        try:
            while not self._stopping.is_set():
                done = 0
                if timers:
                    self._dues.take_due()
                try:
                    if store is None or component is None:
                        store = self.open_store()
                        store.verify_schema()
                        component = self._component(role, name, store)
                    done = component.poll()
                except ConnectionLost as exc:
                    self.stats.fault(role, f"connection lost, reopening: {exc}")
                    _close(store)
                    store, component = None, None
                except StorageError as exc:
                    self.stats.fault(role, str(exc))
                except Exception:  # noqa: BLE001 -- a bug must not kill the loop silently: kept in .errors
                    self._error(role, traceback.format_exc())
                if done:  # announced work rang the bell (its token wakes this wait at once)
                    idle = self.config.idle_min_s
                if timers:  # sleep until the next due timer (a ring: a new timer was scheduled)
                    bell.wait(self._dues.until_next(cap))
                    continue
                if not bell.wait(idle):
                    idle = min(idle * 2, cap)
        finally:
            _close(store)

    def _error(self, role: str, text: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"{role}: {text}")
        self._stopping.wait(0.05)  # a bug repeats: do not spin on it


def _close(store: Any) -> None:
    """Close ``store`` if open; a store whose connection already died may fail to close: fine."""
    if store is not None:
        with contextlib.suppress(Exception):
            store.close()
