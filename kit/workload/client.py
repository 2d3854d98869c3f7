"""The stress client (starts runs, sends signals, probes tenancy) and the store-clock sampler.

Runs come in *pairs*: pair ``n`` is one run of scenario ``scenarios[n % k]``
per tenant, ``<tenant>-<scenario>-<n>``, all with the same idempotency key
``<scenario>-<n>`` (each tenant must keep its own run). The client keeps
``config.runs`` runs in flight, starting the next pair as runs end. Every start
and signal is retried until the store gives a definite answer, so every run
the workload needs exists and gets its signals. Each scenario signal is sent,
then sent again later (a duplicate delivery on every run). With several
tenants, some signals are sent to another tenant's run id and must be answered
``not_found``. Delays and probes are drawn from the seed.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from kit.clock import to_micros
from kit.contract import JSON, ClockMode, Definition, SignalReceipt, Storage
from kit.runtime.module import WorkflowModule
from kit.runtime.scenarios import SCENARIOS, Scenario
from kit.workload.actor import Actor
from kit.workload.config import Context
from kit.workload.history import INFO, OK
from kit.workload.telemetry import Tracker

__all__ = ["ClientActor", "ClockSampler", "run_id_of"]

ATTEMPTS = 60
RETRY_S = 0.05


def run_id_of(tenant: str, scenario: str, n: int) -> str:
    return f"{tenant}-{scenario}-{n:06d}"


def _definer(module: WorkflowModule) -> Callable[[Storage], Definition]:
    return lambda s: s.ensure_definition(module.name, module.version, module.digest, module.wasm)


def _sender(run_id: str, name: str, payload: JSON, dedup: str) -> Callable[[Storage], SignalReceipt]:
    return lambda s: s.send_signal(run_id, name, payload, dedup)


def _receipt_value(receipt: Any) -> tuple[str, Any]:
    outcome = receipt.outcome.value
    value = {"outcome": outcome, "signal": receipt.signal.signal_id if receipt.signal is not None else None}
    return (OK if outcome in ("committed", "duplicate") else "fail"), value


def _start_value(result: Any) -> tuple[str, Any]:
    return OK, {"created": result.created, "run": result.run.run_id, "tenant": result.run.tenant_id}


class ClientActor(Actor):
    """The workload's user: see the module docstring."""

    role, letter = "client", "c"

    def __init__(self, ctx: Context, tracker: Tracker) -> None:
        super().__init__(ctx, 0)
        self.tracker = tracker
        self.rng = random.Random(f"client/{ctx.config.seed}")
        self.scenarios: list[Scenario] = [SCENARIOS[name] for name in ctx.config.scenarios]
        self.pairs = itertools.count()
        self.open: dict[tuple[str, str], float] = {}
        self.started: list[tuple[str, str, str]] = []
        """(tenant, run id, scenario) of every run acknowledged as started."""
        self.failed_starts: list[str] = []
        self._signals: list[tuple[float, int, str, str, str, JSON, int]] = []
        self._seq = itertools.count()
        self._reconciled = 0.0
        self.lock = threading.Lock()

    def _begin_life(self) -> None:
        if not self.process:
            self.life, self.process = 1, "client"
            self.ctx.recorder.info(self.process, "start", value={"slot": self.name})

    def register(self) -> None:
        """Ensure every workflow definition in every tenant (recorded: definitions never change)."""
        self._begin_life()
        for tenant in self.ctx.tenants:
            for module in self.ctx.registry:
                self.call(tenant, "define", _definer(module),
                          lambda d: (OK, {"digest": d.digest, "body_bytes": len(d.body)}),
                          value={"name": module.name, "version": module.version, "digest": module.digest})

    def step(self, tenant: str) -> int:
        if tenant != self.ctx.tenants[0]:
            return 0
        work = 0
        with self.lock:
            in_flight = sum(1 for key in self.open if not self.tracker.has_ended(*key))
        if not self.ctx.healed.is_set() and in_flight < self.ctx.config.runs:
            self._start_pair(next(self.pairs))
            work += 1
        work += self._send_due()
        if self.ctx.recorder.now() - self._reconciled > 1.0:
            self._reconcile()
        return work

    def outstanding(self) -> int:
        """Signals still to deliver (draining waits for them)."""
        return len(self._signals)

    # -- runs -----------------------------------------------------------------
    def _start_pair(self, n: int) -> None:
        scenario = self.scenarios[n % len(self.scenarios)]
        data = scenario.make_input(n)
        ref = self.ctx.registry[scenario.workflow].ref
        key = f"{scenario.name}-{n:06d}"
        for tenant in self.ctx.tenants:
            run_id = run_id_of(tenant, scenario.name, n)
            if not self._start(tenant, run_id, ref, data, key):
                continue
            now = self.ctx.recorder.now()
            with self.lock:
                self.open[(tenant, run_id)] = now
            self.started.append((tenant, run_id, scenario.name))
            for name, payload in scenario.signals(data):
                first = now + self.rng.uniform(0.0, 0.3)
                self._schedule(first, tenant, run_id, name, payload)
                self._schedule(first + self.rng.uniform(0.2, 1.0), tenant, run_id, name, payload)
            others = [t for t in self.ctx.tenants if t != tenant]
            if others and self.rng.random() < 0.25:
                self._probe(tenant, run_id_of(self.rng.choice(others), scenario.name, n))

    def _start(self, tenant: str, run_id: str, ref: Any, data: JSON, key: str) -> bool:
        for _ in range(ATTEMPTS):
            fault = self.take("start")
            kind, _ = self.deliver_once_or_twice(
                tenant, "start", lambda s: s.start_run(run_id, ref, data, idempotency_key=key), _start_value,
                fault, value={"workflow": ref.name, "key": key, "input": data}, keys={"run": run_id},
            )
            if kind == OK:
                return True
            if self.ctx.wait(RETRY_S):
                break
        self.failed_starts.append(f"{tenant}/{run_id}")
        self.ctx.error(f"client: start_run({run_id!r}) in tenant {tenant} never got a definite answer")
        return False

    def _reconcile(self) -> None:
        """Runs whose ending commit lost its acknowledgement: ask the store (not recorded: a read)."""
        self._reconciled = self.ctx.recorder.now()
        with self.lock:
            old = [key for key, t in self.open.items() if self._reconciled - t > 2.0
                   and not self.tracker.has_ended(*key)][:20]
        for tenant, run_id in old:
            try:
                run = self.store(tenant)[0].get_run(run_id)
            except Exception:  # noqa: BLE001 - the next reconciliation asks again
                self._forget(tenant, twin=False)
                return
            if run is not None and run.status.terminal:
                self.tracker.mark_ended(tenant, run_id)
        with self.lock:
            for key in [k for k in self.open if self.tracker.has_ended(*k)]:
                del self.open[key]

    # -- signals ----------------------------------------------------------------
    def _schedule(self, at: float, tenant: str, run_id: str, name: str, payload: JSON, attempt: int = 0) -> None:
        heapq.heappush(self._signals, (at, next(self._seq), tenant, run_id, name, payload, attempt))

    def _send_due(self) -> int:
        sent = 0
        while self._signals and self._signals[0][0] <= self.ctx.recorder.now() and sent < 10:
            _, _, tenant, run_id, name, payload, attempt = heapq.heappop(self._signals)
            sent += 1
            fault = self.take("signal")
            dedup = f"{name}-{run_id}"
            _, receipt = self.deliver_once_or_twice(
                tenant, "signal", _sender(run_id, name, payload, dedup), _receipt_value, fault,
                value={"name": name, "dedup": dedup, "payload": payload}, keys={"run": run_id},
            )
            if receipt is None and attempt < ATTEMPTS:  # no answer: send again (the dedup key makes it safe)
                self._schedule(self.ctx.recorder.now() + RETRY_S, tenant, run_id, name, payload, attempt + 1)
        return sent

    def _probe(self, tenant: str, foreign_run: str) -> None:
        """Another tenant's run id, seen from this tenant, must not exist (answered not_found)."""
        self.call(tenant, "probe", lambda s: s.send_signal(foreign_run, "probe", None, f"probe-{foreign_run}"),
                  _receipt_value, value={"dedup": f"probe-{foreign_run}"}, keys={"run": foreign_run})


class ClockSampler:
    """Reads the store clock every ``config.sample_s`` into the history (``f`` = ``clock``).

    Every later entry is stamped with the latest reading (``store_us``): a lower
    bound of the store time at that entry, which is what the checkers compare
    leases and due times against.
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kit-stress-clock", daemon=True)
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample(self, store: Storage) -> int:
        pending = self.ctx.recorder.invoke("clock", "now", self.ctx.tenants[0])
        try:
            us = to_micros(store.now())
        except Exception as exc:
            self.ctx.recorder.complete(pending, INFO, error=f"{type(exc).__name__}: {exc}")
            raise
        self.ctx.recorder.complete(pending, OK, us)
        self.ctx.recorder.sampled(us)
        return us

    def _loop(self) -> None:
        store: Storage | None = None
        interval = self.ctx.config.sample_s
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                store = store or self.ctx.database.open(self.ctx.tenants[0], clock=ClockMode.DATABASE)
                self.sample(store)
            except Exception:  # noqa: BLE001 - a missed sample only loosens the bounds
                self.failures += 1
                if store is not None:
                    with contextlib.suppress(Exception):
                        store.close()
                store = None
            self._stop.wait(max(0.0, interval - (time.monotonic() - started)))
        if store is not None:
            store.close()
