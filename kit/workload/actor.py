"""A stress worker: one thread, successive lives, one store per tenant, a mailbox of faults.

Guarantees:

* Every store call goes through :meth:`Actor.call`, which records it in the
  history (invoke, then ok / fail / info) and applies the fault meant for it,
  if one is waiting; the fault's application (and whether it fired) is recorded
  too. A worker's life is a *process* of the history: ``d0.1`` is decider slot
  0's first life; a crash ends it and, after a downtime, ``d0.2`` begins.
* A crashed or killed life never acts again: its stores are closed (the server
  rolls back whatever was open) and its name is kept in :attr:`Context.dead`.
* A worker believes a lease live by its *own*, possibly skewed, clock; it only
  uses that belief to decide whether to renew before writing. The store alone
  decides whether the claim is live.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

from kit.clock import system_now
from kit.connections import COMMITTED_POINT
from kit.contract import Capability, ClockMode, ConnectionLost, KitError, Storage
from kit.faults import LostAcknowledgement
from kit.faults.nemesis import Fault, FaultKind
from kit.faults.points import StressFaults, can_drop, drop_connection
from kit.workload.config import Context
from kit.workload.history import INFO, OK, classify

__all__ = ["Actor", "Crashed", "Judge", "outcome_judge"]

T = TypeVar("T")
Judge = Callable[[Any], tuple[str, Any]]
"""Turns an operation's result into its history completion: (``ok`` or ``fail``, the value shown)."""

IDLE_MIN_S, IDLE_MAX_S = 0.001, 0.05
MAILBOX = 4


class Crashed(Exception):
    """This life of the worker is over (a crash fault, or its session was killed)."""

    def __init__(self, how: str, fault: Fault | None) -> None:
        super().__init__(how)
        self.how, self.fault = how, fault

    @property
    def downtime(self) -> float:
        return self.fault.seconds if self.fault is not None else 0.5


class Actor:
    """Base of the decider, command-worker, timer and client loops (see the module docstring)."""

    role: ClassVar[str] = "actor"
    letter: ClassVar[str] = "a"
    idle_max_s: ClassVar[float] = IDLE_MAX_S

    def __init__(self, ctx: Context, slot: int) -> None:
        self.ctx, self.slot = ctx, slot
        self.name = f"{self.role}-{slot}"
        self.life = 0
        self.process = ""
        self._stores: dict[tuple[str, bool], tuple[Storage, StressFaults]] = {}
        self._mailbox: collections.deque[Fault] = collections.deque()
        self._mail_lock = threading.Lock()
        self._skew_s = 0.0
        self._skew_until = 0.0
        self._retired = (0, 0)
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        """Start this worker's thread (under deterministic mode: as a participant of the scheduler)."""
        if self.ctx.det is not None:
            self._thread = self.ctx.det.run_thread(self.name, self._main)
        else:
            self._thread = threading.Thread(target=self._main, name=f"kit-stress-{self.name}", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _begin_life(self) -> None:
        self.life += 1
        self.process = f"{self.letter}{self.slot}.{self.life}"
        self.ctx.recorder.info(self.process, "start", value={"slot": self.name})

    def step(self, tenant: str) -> int:
        """One poll for ``tenant``; returns how much work it found (0: idle)."""
        raise NotImplementedError

    def _main(self) -> None:
        self._begin_life()
        idle = IDLE_MIN_S
        try:
            while not self.ctx.stopping.is_set():
                done = 0
                for tenant in self.ctx.tenants:
                    if self.ctx.stopping.is_set():
                        break
                    try:
                        done += self.step(tenant)
                    except Crashed as crash:
                        self._die(crash)
                        self.ctx.wait(crash.downtime, until=self.ctx.healed)
                        if self.ctx.stopping.is_set():
                            return
                        self._begin_life()
                    except KitError as exc:  # e.g. a store could not be opened: try again later
                        self.ctx.note(f"{self.role}: {type(exc).__name__}: {str(exc)[:80]}")
                        self._forget(tenant, twin=False)
                    except Exception:  # noqa: BLE001 - a harness bug: kept, reported, never silent
                        self.ctx.error(f"{self.process}: {traceback.format_exc()}")
                        self.ctx.wait(0.05)
                if done:
                    idle = IDLE_MIN_S
                    continue
                self.ctx.wait(idle)
                idle = min(idle * 2, self.idle_max_s)
        finally:
            self._close_all()
            if self.process not in self.ctx.dead:
                self.ctx.recorder.info(self.process, "stop")

    def _die(self, crash: Crashed) -> None:
        value: dict[str, Any] = {"how": crash.how}
        if crash.fault is not None:
            value["fault"] = crash.fault.to_json()
        with self.ctx.lock:
            self.ctx.dead.add(self.process)
        self.ctx.recorder.info(self.process, "crash", value=value)
        self._close_all()

    # -- stores ------------------------------------------------------------------
    def store(self, tenant: str, twin: bool = False) -> tuple[Storage, StressFaults]:
        """This life's store for ``tenant`` (``twin``: a second connection, for duplicate delivery)."""
        key = (tenant, twin)
        if key not in self._stores:
            hook = StressFaults(sleep=self._sleep)
            if self.ctx.det is None:
                store = self.ctx.database.open(tenant, clock=ClockMode.DATABASE, statement_hook=hook)
            else:  # every statement waits for its turn, then meets the faults
                gate = self.ctx.det.gate(hook)
                store = self.ctx.database.open(tenant, clock=ClockMode.TEST, statement_hook=gate)
                gate.store = store
            self._stores[key] = (store, hook)
        return self._stores[key]

    def _forget(self, tenant: str, twin: bool) -> None:
        pair = self._stores.pop((tenant, twin), None)
        if pair is not None:
            self._retire(pair[1])
            _close(pair[0])
            self._gone(pair[0])
            self._closed()

    def _close_all(self) -> None:
        for store, hook in self._stores.values():
            self._retire(hook)
            _close(store)
            self._gone(store)
        self._stores.clear()
        self._closed()

    def _closed(self) -> None:
        if self.ctx.det is not None:  # a closed connection holds no lock any more
            self.ctx.det.scheduler.transaction_ended()

    def _gone(self, store: Storage) -> None:
        """Deterministic mode: return once the server has ended a closed store's session.

        A server rolls back a dropped or closed session's transaction when it notices, at a time
        of its own: a statement queued on that session's locks would then resume between two
        scheduling decisions, and the next choice would depend on timing. Ending the session
        here (``kill_session`` waits until it is gone) releases its locks inside this step.
        """
        if self.ctx.det is None or getattr(store, "session_id", None) is None:
            return
        if self.ctx.can(Capability.KILL_SESSION):
            with contextlib.suppress(Exception):  # already gone is what is wanted
                self.ctx.database.kill_session(store)

    def _retire(self, hook: StressFaults) -> None:
        self._retired = (self._retired[0] + hook.committed, self._retired[1] + hook.writes)

    def transactions(self) -> tuple[int, int]:
        """(committed, of which wrote) transactions of this worker's stores, over all its lives."""
        live = list(self._stores.values())
        return (self._retired[0] + sum(h.committed for _, h in live), self._retired[1] + sum(h.writes for _, h in live))

    def _sleep(self, seconds: float) -> None:
        if self.ctx.det is not None:
            self.ctx.det.sleep(seconds, label="pause")
        else:
            self.ctx.stopping.wait(seconds)

    # -- faults --------------------------------------------------------------------
    def deliver(self, fault: Fault) -> None:
        """Called by the nemesis: a skew starts now; anything else waits for its operation."""
        self.ctx.recorder.info("nemesis", fault.kind.value, value={**fault.to_json(), "process": self.process})
        if fault.kind is FaultKind.SKEW:
            self._skew_s = fault.skew_s
            self._skew_until = self.ctx.recorder.now() + fault.seconds
            self._applied(fault, "clock", True)
            return
        with self._mail_lock:
            if len(self._mailbox) >= MAILBOX:
                self.ctx.recorder.info(self.process, "fault", value={**fault.to_json(), "applied": "dropped: mailbox full"})
                return
            self._mailbox.append(fault)

    def take(self, op: str) -> Fault | None:
        """The first waiting fault meant for operation ``op``, if any (removed from the mailbox)."""
        with self._mail_lock:
            for i, fault in enumerate(self._mailbox):
                if fault.op == op:
                    del self._mailbox[i]
                    return fault
        return None

    def heal(self) -> None:
        """The faults are over: forget waiting ones, clocks right again."""
        with self._mail_lock:
            dropped = len(self._mailbox)
            self._mailbox.clear()
        self._skew_s = 0.0
        if dropped:
            self.ctx.recorder.info(self.process, "heal", value={"dropped_faults": dropped})

    def now(self) -> datetime:
        """This worker's own clock (skewed while a skew fault lasts)."""
        skew = self._skew_s if self.ctx.recorder.now() < self._skew_until and not self.ctx.healed.is_set() else 0.0
        base = system_now() if self.ctx.det is None else self.ctx.det.now()
        return base + timedelta(seconds=skew)

    def believes_live(self, expires_at: datetime, lease: timedelta) -> bool:
        """Whether, by its own clock, more than half of the lease is left."""
        return expires_at - self.now() > lease / 2

    def _applied(self, fault: Fault, where: str, fired: bool) -> None:
        self.ctx.recorder.info(self.process, "fault", value={**fault.to_json(), "applied": where, "fired": fired})

    def _kill(self, store: Storage) -> None:
        if self.ctx.can(Capability.KILL_SESSION):
            self.ctx.database.kill_session(store)
        else:
            drop_connection(store)

    def _arm(self, fault: Fault | None, store: Storage, hook: StressFaults) -> str:
        """Arm ``fault`` on this store's hook; returns where it will strike ('' if not here)."""
        if fault is None:
            return ""
        kind = fault.kind
        droppable = can_drop(store)
        if kind is FaultKind.KILL and (self.ctx.can(Capability.KILL_SESSION) or droppable):
            hook.fail_at(fault.k, action=lambda _statement: self._kill(store))
            return f"statement #{fault.k}"
        if kind is FaultKind.DROP and droppable:
            hook.fail_at(fault.k, action=lambda _statement: drop_connection(store))
            return f"statement #{fault.k}"
        if kind is FaultKind.LOST_ACK:
            hook.lose_ack()
            return "commit acknowledgement"
        if kind is FaultKind.PAUSE and fault.point == "inside":
            hook.pause_at(fault.k, fault.seconds)
            return f"point #{fault.k}"
        if kind is FaultKind.PAUSE and fault.point == "after_commit":
            hook.pause_at(1, fault.seconds, point=COMMITTED_POINT)
            return "after the first commit"
        return ""

    # -- the one way to call the store -----------------------------------------------
    def call(
        self,
        tenant: str,
        f: str,
        fn: Callable[[Storage], T],
        judge: Judge,
        *,
        value: Any = None,
        keys: dict[str, Any] | None = None,
        fault: Fault | None = None,
        twin: bool = False,
    ) -> tuple[str, T | None]:
        """Record and run ``fn`` on this worker's store, applying ``fault``; return (kind, result).

        ``kind`` is ``ok`` / ``fail`` / ``info``; the result is ``None`` unless the call returned.
        A killed session raises :class:`Crashed`; a lost acknowledgement is retried once.
        """
        store, hook = self.store(tenant, twin)
        process = self.process + ("~dup" if twin else "")
        where = self._arm(fault, store, hook)
        if fault is not None and fault.kind is FaultKind.KILL and not where:
            self._applied(fault, "before the call (no session to kill: a crash instead)", True)
            raise Crashed(f"crashed before {f}", fault)
        if fault is not None and fault.kind is FaultKind.PAUSE and fault.point == "before":
            where = "before the call"
            self._sleep(fault.seconds)
        elif fault is not None and not where:
            self._applied(fault, f"not applicable to {type(store).__name__}", False)
        pending = self.ctx.recorder.invoke(process, f, tenant, value, **(keys or {}))
        pending.value = value
        error: KitError | None = None
        try:
            result = fn(store)
        except KitError as exc:
            error = exc
        except Exception as exc:
            self.ctx.recorder.complete(pending, INFO, error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            fired = (hook.paused_at if fault is not None and fault.kind is FaultKind.PAUSE else hook.fired) is not None
            fired = fired or where == "before the call"
            hook.disarm()
        if fault is not None and where:
            self._applied(fault, where, fired)
        if error is None:
            kind, shown = judge(result)
            self.ctx.recorder.complete(pending, kind, shown)
            return kind, result
        kind = classify(error)
        self.ctx.recorder.complete(pending, kind, error=f"{type(error).__name__}: {error}")
        if isinstance(error, ConnectionLost) or getattr(store, "_dead", None):
            self._forget(tenant, twin)
        if fault is not None and fault.kind is FaultKind.KILL and fired:
            raise Crashed(f"session killed inside {f}", fault)
        if isinstance(error, LostAcknowledgement) and fault is not None and fault.kind is FaultKind.LOST_ACK:
            return self.call(tenant, f, fn, judge, value=value, keys={**(keys or {}), "retry_of": pending.index},
                             twin=twin)
        return kind, None

    def call_twice(self, tenant: str, f: str, fn: Callable[[Storage], T], judge: Judge, **kw: Any) -> tuple[str, T | None]:
        """Deliver the same call twice at once, on two connections (duplicate delivery); return ours."""
        if self.ctx.det is not None:
            return self._call_twice_scheduled(tenant, f, fn, judge, **kw)
        box: list[tuple[str, Any]] = []
        barrier = threading.Barrier(2)

        def duplicate() -> None:
            try:
                barrier.wait(5)
                box.append(self.call(tenant, f, fn, judge, twin=True, **{k: v for k, v in kw.items() if k != "fault"}))
            except threading.BrokenBarrierError:
                self.ctx.note("a duplicate delivery lost its partner (barrier broken)")
            except Exception:  # noqa: BLE001 - a harness bug in the duplicate: kept, reported
                self.ctx.error(f"{self.process}~dup: {traceback.format_exc()}")

        thread = threading.Thread(target=duplicate, name=f"kit-stress-{self.name}-dup", daemon=True)
        thread.start()
        try:
            barrier.wait(5)
        except threading.BrokenBarrierError:
            pass
        try:
            return self.call(tenant, f, fn, judge, **kw)
        finally:
            thread.join(60)

    def _call_twice_scheduled(self, tenant: str, f: str, fn: Callable[[Storage], T], judge: Judge,
                              **kw: Any) -> tuple[str, T | None]:
        """``call_twice`` under the scheduler: the duplicate is a participant of its own, interleaved by the seed."""
        det = self.ctx.det
        assert det is not None
        name = f"{self.name}~dup"

        def duplicate() -> None:
            try:
                self.call(tenant, f, fn, judge, twin=True, **{k: v for k, v in kw.items() if k != "fault"})
            except Crashed:
                pass
            except Exception:  # noqa: BLE001 - a harness bug in the duplicate: kept, reported
                self.ctx.error(f"{self.process}~dup: {traceback.format_exc()}")

        thread = det.run_thread(name, duplicate)
        part = det.scheduler.get(name)
        thread.start()
        try:
            return self.call(tenant, f, fn, judge, **kw)
        finally:
            det.join(part)

    def deliver_once_or_twice(self, tenant: str, f: str, fn: Callable[[Storage], T], judge: Judge,
                              fault: Fault | None, **kw: Any) -> tuple[str, T | None]:
        """``call``, or ``call_twice`` when ``fault`` is a duplicate delivery."""
        if fault is not None and fault.kind is FaultKind.DUPLICATE:
            self._applied(fault, "sent twice at once", True)
            return self.call_twice(tenant, f, fn, judge, **kw)
        return self.call(tenant, f, fn, judge, fault=fault, **kw)


def outcome_judge(*ok: str) -> Judge:
    """``ok`` when the returned outcome's value is one of ``ok``, else ``fail``; shows the outcome."""
    accepted = frozenset(ok)

    def judge(outcome: Any) -> tuple[str, Any]:
        text = getattr(outcome, "value", str(outcome))
        return (OK if text in accepted else "fail"), text

    return judge


def _close(store: Any) -> None:
    with contextlib.suppress(Exception):  # a dead connection may fail to close: fine
        store.close()
