"""Run deciders, command workers and timer loops as threads of this process.

Each loop opens its own store (stores are not thread-safe), verifies the
schema before polling, and polls; when idle it backs off (1 ms doubling to a
cap) and in-process :class:`Bell` rings cut that wait short. Bells only save
latency: every component also works alone, in another process, on another
host, because all coordination goes through the store. A storage fault ends
one poll (a lost connection is reopened); the lease machinery recovers.
"""

from __future__ import annotations

import contextlib
import threading
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
    """A generation counter idle pollers wait on: ``ring`` wakes them early, nothing more."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0

    def ring(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def mark(self) -> int:
        with self._cond:
            return self._generation

    def wait(self, since: int, timeout: float) -> bool:
        """Wait until a ring after ``since`` or ``timeout`` s; return whether it rang."""
        with self._cond:
            return self._cond.wait_for(lambda: self._generation != since, timeout)


@dataclass(frozen=True)
class RuntimeConfig:
    decision_lease: timedelta = timedelta(seconds=30)
    command_lease: timedelta = timedelta(seconds=30)
    decider_batch: int = 1
    command_batch: int = 1
    fuel: int = abi.DEFAULT_FUEL
    retry_after: timedelta = timedelta(milliseconds=10)
    idle_min_s: float = 0.001
    idle_max_s: float = 0.05
    timer_idle_max_s: float = 0.01


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
        self._bells = {"decider": Bell(), "worker": Bell(), "timers": Bell()}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._heartbeats = Heartbeats(self.open_store, self.config.command_lease, self.stats)

    def open_store(self) -> Storage:
        return self.database.open(self.tenant_id, clock=self.clock)

    def nudge(self) -> None:
        """Tell idle deciders there may be work (after ``start_run``, ``send_signal``...)."""
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
            bell.ring()
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
        return TimerLoop(store, stats=self.stats, on_fired=lambda n: self.nudge())

    def _committed(self, plan: Plan) -> None:
        if plan.commands:
            self._bells["worker"].ring()
        if plan.timers:
            self._bells["timers"].ring()

    def _serve(self, role: str, name: str) -> None:
        bell = self._bells[role]
        cap = self.config.timer_idle_max_s if role == "timers" else self.config.idle_max_s
        idle = self.config.idle_min_s
        store: Storage | None = None
        component: _Pollable | None = None
        try:
            while not self._stopping.is_set():
                mark = bell.mark()
                done = 0
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
                if done:
                    idle = self.config.idle_min_s
                    continue
                rang = bell.wait(mark, idle)
                idle = self.config.idle_min_s if rang else min(idle * 2, cap)
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
