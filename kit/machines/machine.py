"""The Hypothesis state machine that generates fault-laden step lists, and how to run it.

Every rule only *builds* steps and hands them to the interpreter, so what
Hypothesis shrinks is a plain step list, and what a failure saves replays
without Hypothesis. Small pools of runs and keys (including confusable ones
such as ``Key``/``key`` and ``é``/``e``+U+0301) make collisions, duplicates
and stale claims frequent.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta, timezone
from typing import Any, ClassVar

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kit.contract import Backend, Capability
from kit.contract.json_samples import INTEGER_BOUNDARIES, INTEGRAL_FLOATS, NUMBER_BOUNDARIES
from kit.machines.collector import collecting_less
from kit.machines.interpreter import Divergence, Interpreter

__all__ = ["PROFILES", "MachineOutcome", "Profile", "make_machine", "pinned_generation", "pooled_database", "run_machine"]

#: Keys that collide under case- or normalisation-insensitive comparison, or when a
#: too-short column truncates them (the long ones differ only in their last character).
LONG_RUNS = ("R" * 127 + "a", "R" * 127 + "b")
LONG_KEYS = ("L" * 254 + "a", "L" * 254 + "b")
RUNS = ("r0", "r1", "r2", "Key", "key") + LONG_RUNS
IDEMS = (None, None, "i0", "i1", "I0") + LONG_KEYS
SIGNAL_KEYS = ("s0", "s1", "S0", "\u00e9", "e\u0301") + LONG_KEYS
COMMAND_KEYS = ("c0", "c1", "C0")
TIMER_KEYS = ("t0", "t1")
EVENT_KEYS = (None, None, "e0", "e1")
TENANT_A = ("w0", "w1", "w2")
ALL_WORKERS = ("w0", "w1", "w2", "w3")
UNIT_RUNS = ("u0", "u1")
DUE_RUNS = ("p0", "p1", "p2")
#: Offsets (minutes east of UTC) for absolute instants a decision names.
ZONES = (0, 330, -480, 840, -720)
BIG_INTEGERS = (2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**64 + 1,
                -(2**64) - 1, 10**30)
ADVANCES_US = (1, 999, 1_000, 500_000, 5_000_000, 30_000_000, 3_600_000_000)

workers = st.sampled_from(TENANT_A + TENANT_A + ("w3",))
runs = st.sampled_from(RUNS)
claims = st.sampled_from(("latest", "latest", "latest", "oldest"))
leases = st.sampled_from((5, 30))
#: The first run's input in every example: each number at a boundary, and both booleans, nested once.
BOUNDARY_SHEET: dict[str, Any] = {"numbers": list(NUMBER_BOUNDARIES), "flags": [True, False]}
small_json = st.recursive(
    st.none() | st.booleans() | st.sampled_from(INTEGER_BOUNDARIES) | st.sampled_from(INTEGRAL_FLOATS) | st.sampled_from(("", "x", "\u00e9", "\U0001f600")),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(("a", "b", "")), inner, max_size=2),
    max_leaves=4,
)


@st.composite
def decisions(draw: Any) -> dict[str, Any]:
    status = draw(st.sampled_from(("blocked", "blocked", "pending", "completed", "failed", "cancelled")))
    decision: dict[str, Any] = {"status": status}
    events = draw(st.lists(st.builds(lambda k, key, p: {"kind": k, "key": key, "payload": p},
                                      st.sampled_from(("step", "note")), st.sampled_from(EVENT_KEYS), small_json), max_size=2))
    if events:
        decision["events"] = events
    if status in ("blocked", "pending") or draw(st.integers(0, 9)) == 0:
        commands = draw(st.lists(st.builds(lambda k, a, d: {"key": k, "max_attempts": a, "delay_ms": d},
                                           st.sampled_from(COMMAND_KEYS), st.sampled_from((1, 2, 3)),
                                           st.sampled_from((0, 0, 1, 500))), max_size=2))
        timers = draw(st.lists(st.builds(lambda k, d: {"key": k, "delay_ms": d},
                                         st.sampled_from(TIMER_KEYS), st.sampled_from((0, 1, 500, 30_000))), max_size=1))
        if commands:
            decision["commands"] = commands
        if timers:
            decision["timers"] = timers
    if draw(st.integers(0, 4)) == 0:
        decision["wake_after_ms"] = draw(st.sampled_from((0, 1, 1000)))
    if draw(st.integers(0, 5)) == 0:
        decision["cancel_timers"] = [draw(st.sampled_from(TIMER_KEYS))]
    if draw(st.integers(0, 9)) == 0:
        decision["consume"] = False
    if draw(st.integers(0, 7)) == 0:  # consume a command by key, finished or not (an unfinished one is refused)
        decision["consume_commands"] = [draw(st.sampled_from(COMMAND_KEYS))]
    if status in ("completed", "failed"):
        decision["output" if status == "completed" else "error"] = draw(small_json)
    return decision


@dataclass(frozen=True)
class Profile:
    name: str
    max_examples: int
    steps: int

    def settings(self, shrink: bool = True, database: ExampleDatabase | None = None) -> settings:
        """The Hypothesis settings of this profile. With an example ``database``, the failing examples it
        holds are replayed before anything is generated, and every failure found is saved into it."""
        phases = [Phase.explicit] + ([Phase.reuse] if database is not None else []) + [Phase.generate]
        phases += [Phase.shrink] if shrink else []
        return settings(
            max_examples=self.max_examples,
            stateful_step_count=self.steps,
            deadline=None,
            database=database,
            derandomize=False,  # the seed decides, whatever profile a caller loaded
            print_blob=False,
            phases=phases,
            verbosity=Verbosity.quiet,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )


PROFILES = {
    "smoke": Profile("smoke", max_examples=15, steps=20),
    "quick": Profile("quick", max_examples=80, steps=30),
    "thorough": Profile("thorough", max_examples=400, steps=80),
}


def pooled_database(backend: Backend, pool: list[Any]) -> Any:
    """One database per machine run, emptied between examples where the adapter can; else None."""
    if pool and hasattr(pool[0], "reset"):
        pool[0].reset()
        return pool[0]
    if not pool:
        database = backend.provision()
        if hasattr(database, "reset"):
            pool.append(database)
            return database
        database.drop()
    return None


class _Machine(RuleBasedStateMachine):
    backend: ClassVar[Backend]
    failures: ClassVar[list[dict[str, Any]]]
    examples: ClassVar[list[int]]
    pool: ClassVar[list[Any]]
    full_compare: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        type(self).examples[0] += 1
        self.interp = Interpreter(self.backend, database=type(self)._database(), full_compare=self.full_compare)
        self.caps = self.backend.capabilities
        self.probed = False
        self.fresh_schema_done = False
        self.deep_done = False

    @classmethod
    def _database(cls) -> Any:
        return pooled_database(cls.backend, cls.pool)

    def teardown(self) -> None:
        """The end of the example: when its steps ran to the end, the whole state is compared (a step's
        comparison reads only what it touched), and a difference fails the example like a step's would."""
        try:
            if sys.exc_info()[0] is None:  # not after a failed step, nor while Hypothesis stops an example
                self._record(self.interp.finish)
        finally:
            self.interp.close()

    def step(self, step: dict[str, Any]) -> None:
        self._record(lambda: self.interp.apply(step))

    def _record(self, action: Callable[[], Any]) -> None:
        """Run ``action``; a divergence is logged with the steps so far (the bundle to save) and re-raised."""
        try:
            action()
        except Divergence as exc:
            type(self).failures.append({"steps": list(self.interp.steps), "divergence": exc.to_json(),
                                        "message": str(exc), "example": type(self).examples[0]})
            raise

    def has(self, *caps: Capability) -> bool:
        return all(c in self.caps for c in caps)

    # What workers hold, read from the reference side (identical on both until a divergence).
    def held_runs(self, stale: bool = False) -> list[tuple[str, str]]:
        return sorted(
            (w, run) for w, worker in self.interp.reference.workers.items()
            for run, held in worker.run_claims.items() if len(held) > (1 if stale else 0)
        )

    def held_commands(self) -> list[tuple[str, str, str]]:
        return sorted(
            (w, run, key) for w, worker in self.interp.reference.workers.items()
            for (run, key) in worker.command_claims
        )

    def live_runs(self) -> list[tuple[str, str]]:
        """(worker, run) whose latest claim is still the run's current, unexpired claim."""
        ref = self.interp.reference
        now = ref.store("w0").now()
        live = []
        for (w, run) in self.held_runs():
            claim = ref.workers[w].run_claims[run][-1]
            current = ref.observer(ref.workers[w].tenant).get_run(run)
            if (current is not None and current.status.value == "running" and current.claim_owner == w
                    and current.claim_generation == claim.generation and current.claim_expires_at
                    and current.claim_expires_at > now):
                live.append((w, run))
        return live

    # Every pick draws the same things whatever the state (a mode and an index), so the
    # shape of the generated data never depends on what racing threads happened to do.
    def pick_run(self, data: Any, stale: bool = False) -> tuple[str, str]:
        """Mostly a (worker, run) the worker holds a live claim on; sometimes a stale one, or anything."""
        mode = data.draw(st.integers(0, 9), label="pick mode")
        index: int = data.draw(st.integers(0, 2**16), label="pick index")
        anything: tuple[str, str] = (data.draw(workers, label="worker"), data.draw(runs, label="run"))
        live: list[tuple[str, str]] = [] if stale else self.live_runs()
        held: list[tuple[str, str]] = self.held_runs(stale)
        if live and mode >= 3:
            return live[index % len(live)]
        if held and mode >= 1:
            return held[index % len(held)]
        return anything

    def _existing_or(self, run: str) -> str:
        """An existing run chosen by ``run``'s position in the pool (no extra draw), else ``run``."""
        existing = self.existing_runs()
        return existing[RUNS.index(run) % len(existing)] if existing and run in RUNS else run

    def existing_runs(self) -> list[str]:
        ref = self.interp.reference
        return sorted(r.run_id for r in ref.observer("tenant-a").list_runs(limit=50))

    def pick_existing(self, data: Any) -> str:
        """Mostly a run that exists (so signals, cancels and duplicates land somewhere); sometimes any."""
        mode = data.draw(st.integers(0, 9), label="existing mode")
        index = data.draw(st.integers(0, 2**16), label="existing index")
        anything: str = data.draw(runs, label="run")
        existing = self.existing_runs()
        return existing[index % len(existing)] if existing and mode >= 2 else anything

    def pick_command(self, data: Any) -> tuple[str, str, str]:
        mode = data.draw(st.integers(0, 9), label="pick mode")
        index: int = data.draw(st.integers(0, 2**16), label="pick index")
        anything: tuple[str, str, str] = (data.draw(workers), data.draw(runs), data.draw(st.sampled_from(COMMAND_KEYS)))
        held: list[tuple[str, str, str]] = self.held_commands()
        if held and mode >= 1:
            return held[index % len(held)]
        return anything

    # -- definitions and runs ----------------------------------------------
    @initialize(first=runs, second=runs, idem=st.sampled_from(IDEMS), decided=st.integers(0, 4),
                delay=st.sampled_from((1, 500)))
    def some_runs(self, first: str, second: str, idem: str | None, decided: int, delay: int) -> None:
        """Every example starts with work to do: runs (the first carrying every boundary number, so each
        example proves they round-trip), and usually one blocked on a command and a timer."""
        self.step({"op": "define", "worker": "w0", "name": "wf", "body": "v1"})
        self.step({"op": "start", "worker": "w0", "run": first, "idem": idem, "input": BOUNDARY_SHEET})
        self.step({"op": "start", "worker": "w1", "run": second})
        if decided:
            self.step({"op": "claim_runs", "worker": "w0", "limit": 1})
            decision = {"status": "blocked", "events": [{"kind": "step", "payload": 1}],
                        "commands": [{"key": "c0", "max_attempts": 2}], "timers": [{"key": "t0", "delay_ms": delay}]}
            held = [run for (who, run) in self.held_runs() if who == "w0"]
            if held:
                self.step({"op": "commit", "worker": "w0", "run": held[0], "decision": decision})

    @rule(run=runs, decision=decisions())
    def same_run_id_in_other_tenant(self, run: str, decision: dict[str, Any]) -> None:
        """Tenant b starts and decides a run whose id tenant a uses too (when it has runs): nothing may cross
        tenants."""
        self.step({"op": "define", "worker": "w3", "name": "wf", "body": "v1"})
        self.step({"op": "start", "worker": "w3", "run": self._existing_or(run)})
        self.step({"op": "claim_runs", "worker": "w3", "limit": 3})
        for held in sorted({r for (who, r) in self.live_runs() if who == "w3"}):
            self.step({"op": "load", "worker": "w3", "run": held})
            events = [*decision.get("events", ()), {"kind": "step", "payload": "tenant-b"}]
            self.step({"op": "commit", "worker": "w3", "run": held, "decision": {**decision, "events": events}})

    @rule(w=workers, body=st.sampled_from(("v1", "v1", "v2")))
    def define(self, w: str, body: str) -> None:
        self.step({"op": "define", "worker": w, "name": "wf", "body": body})

    @rule(w=workers, run=runs, idem=st.sampled_from(IDEMS), payload=small_json)
    def start(self, w: str, run: str, idem: str | None, payload: Any) -> None:
        self.step({"op": "define", "worker": w, "name": "wf", "body": "v1"})
        self.step({"op": "start", "worker": w, "run": run, "idem": idem, "input": payload})

    @rule(data=st.data(), w=workers, key=st.sampled_from(SIGNAL_KEYS), payload=small_json, again=st.booleans())
    def signal(self, data: Any, w: str, key: str, payload: Any, again: bool) -> None:
        run = self.pick_existing(data)
        self.step({"op": "signal", "worker": w, "run": run, "key": key, "payload": payload})
        if again:  # the same signal delivered twice, from another connection
            other = data.draw(workers, label="second sender")
            self.step({"op": "signal", "worker": other, "run": run, "key": key, "payload": payload})

    @rule(data=st.data(), w=workers)
    def cancel(self, data: Any, w: str) -> None:
        self.step({"op": "cancel", "worker": w, "run": self.pick_existing(data), "reason": "stop"})

    @rule(w=workers, after=st.sampled_from((None,) + RUNS), limit=st.integers(1, 3))
    def list_page(self, w: str, after: str | None, limit: int) -> None:
        self.step({"op": "list_page", "worker": w, "after": after, "limit": limit})

    # -- deciders -----------------------------------------------------------
    @rule(w=workers, limit=st.integers(1, 3), lease=leases)
    def claim_runs(self, w: str, limit: int, lease: int) -> None:
        self.step({"op": "claim_runs", "worker": w, "limit": limit, "lease_s": lease})

    @rule(data=st.data(), which=claims, decision=decisions(),
          revision=st.sampled_from(("claim", "claim", "claim", "stale", "ahead")))
    def decide(self, data: Any, which: str, decision: dict[str, Any], revision: str) -> None:
        w, run = self.pick_run(data)
        self.step({"op": "load", "worker": w, "run": run, "claim": which})
        self.step({"op": "commit", "worker": w, "run": run, "claim": which, "revision": revision, "decision": decision})

    @rule(w=workers, lease=leases, decision=decisions(),
          revision=st.sampled_from(("claim", "claim", "claim", "stale", "ahead")))
    def claim_and_decide(self, w: str, lease: int, decision: dict[str, Any], revision: str) -> None:
        """The decider's loop: claim, load, commit."""
        self.step({"op": "claim_runs", "worker": w, "limit": 1, "lease_s": lease})
        held = [run for (who, run) in self.held_runs() if who == w]
        if held:
            run = self.interp.reference.workers[w].run_claims
            latest = max(held, key=lambda r: run[r][-1].generation)
            self.step({"op": "load", "worker": w, "run": latest})
            self.step({"op": "commit", "worker": w, "run": latest, "revision": revision, "decision": decision})

    @rule(data=st.data(), which=claims, op=st.sampled_from(("renew", "release", "load")), lease=leases)
    def fenced_call(self, data: Any, which: str, op: str, lease: int) -> None:
        w, run = self.pick_run(data)
        self.step({"op": op, "worker": w, "run": run, "claim": which, "lease_s": lease})

    @rule(data=st.data(), offset=st.sampled_from((-1, 0, 0, 1)), lease=leases,
          then=st.sampled_from(("renew", "commit", "steal", "load")), decision=decisions())
    def at_lease_expiry(self, data: Any, offset: int, lease: int, then: str, decision: dict[str, Any]) -> None:
        """Land on a lease's expiry instant (or a microsecond around it) and act there."""
        w, run = self.pick_run(data)
        self.step({"op": "advance_to", "target": "lease", "run": run, "offset_us": offset})
        other = data.draw(st.sampled_from(TENANT_A), label="thief")
        if then == "steal":
            self.step({"op": "claim_runs", "worker": other, "limit": 3, "lease_s": lease})
        elif then == "commit":
            self.step({"op": "commit", "worker": w, "run": run, "decision": decision})
        else:
            self.step({"op": then, "worker": w, "run": run, "lease_s": lease})

    @rule(data=st.data(), offset=st.sampled_from((0, 1)), same_worker=st.booleans(), decision=decisions(),
          op=st.sampled_from(("commit", "commit", "renew", "release", "load")))
    def zombie_after_takeover(self, data: Any, offset: int, same_worker: bool, decision: dict[str, Any], op: str) -> None:
        """A lease expires, the run is claimed again (maybe by the same worker), the old claim is used."""
        w, run = self.pick_run(data)
        other = data.draw(st.sampled_from(TENANT_A), label="thief")
        thief = w if same_worker else other
        self.step({"op": "advance_to", "target": "lease", "run": run, "offset_us": offset})
        self.step({"op": "claim_runs", "worker": thief, "limit": 3})
        step: dict[str, Any] = {"op": op, "worker": w, "run": run, "claim": "oldest"}
        if op == "commit":
            step["decision"] = decision
        self.step(step)

    @rule(data=st.data(), hours=st.sampled_from((-5, 3)), decision=decisions(),
          op=st.sampled_from(("commit", "commit", "renew", "release")))
    def zombie(self, data: Any, hours: int, decision: dict[str, Any], op: str) -> None:
        """A skewed worker believes its oldest claim is still live and uses it."""
        w, run = self.pick_run(data, stale=True)
        self.step({"op": "skew", "worker": w, "hours": hours})
        step: dict[str, Any] = {"op": op, "worker": w, "run": run, "claim": "oldest"}
        if op == "commit":
            step["decision"] = decision
        self.step(step)

    # -- command workers ----------------------------------------------------
    @rule(w=workers, limit=st.integers(1, 2), lease=leases)
    def claim_commands(self, w: str, limit: int, lease: int) -> None:
        self.step({"op": "claim_commands", "worker": w, "limit": limit, "lease_s": lease})

    @rule(data=st.data(), which=claims, result=small_json,
          op=st.sampled_from(("complete", "complete", "fail", "heartbeat")), retryable=st.booleans(),
          expire=st.sampled_from((None, None, -1, 0)))
    def command_call(self, data: Any, which: str, result: Any, op: str, retryable: bool, expire: int | None) -> None:
        w, run, key = self.pick_command(data)
        if expire is not None:  # act exactly at (or just before) a command lease's expiry
            self.step({"op": "advance_to", "target": "command", "run": run, "offset_us": expire})
        step: dict[str, Any] = {"op": op, "worker": w, "run": run, "key": key, "claim": which}
        if op == "complete":
            step["result"] = result
        if op == "fail":
            step.update(error=result, retryable=retryable, retry_after_ms=0)
        self.step(step)

    @rule(w=workers, result=small_json, op=st.sampled_from(("complete", "complete", "fail", "heartbeat")),
          retryable=st.booleans())
    def work(self, w: str, result: Any, op: str, retryable: bool) -> None:
        """The worker's loop: claim a command, then act on it."""
        taken = self._claim_a_command(w)
        if taken is not None:
            self.step(_command_step(op, w, *taken, result, retryable))

    @rule(w=workers, decider=workers, result=small_json, op=st.sampled_from(("fail", "complete")),
          key=st.sampled_from(COMMAND_KEYS), premature=st.booleans())
    def command_round_trip(self, w: str, decider: str, result: Any, op: str, key: str, premature: bool) -> None:
        """A decider schedules a single-attempt command (and, if ``premature``, claims the run again and tries
        to consume the command before it has a result, which must be refused); a worker ends it for good (a
        permanent failure or a result); then whoever holds the run's live claim (the decider claims it if
        nobody does) loads it: the result must be in the snapshot."""
        self.step({"op": "claim_runs", "worker": decider, "limit": 1})
        mine = [run for (who, run) in self.live_runs() if who == decider]
        if mine:
            decision = {"status": "pending" if premature else "blocked",
                        "commands": [{"key": key, "max_attempts": 1}]}
            self.step({"op": "commit", "worker": decider, "run": mine[0], "decision": decision})
            if premature:
                self.step({"op": "claim_runs", "worker": decider, "limit": 1})
                again = [run for (who, run) in self.live_runs() if who == decider]
                if again:
                    eager = {"status": "blocked", "consume": False, "consume_commands": [key]}
                    self.step({"op": "commit", "worker": decider, "run": again[0], "decision": eager})
        taken = self._claim_a_command(w)
        if taken is None:
            return
        run = taken[0]
        self.step(_command_step(op, w, *taken, result, retryable=False))
        if not any(r == run for (_, r) in self.live_runs()):
            self.step({"op": "claim_runs", "worker": decider, "limit": 3})
        for holder in sorted({who for (who, r) in self.live_runs() if r == run}):
            self.step({"op": "load", "worker": holder, "run": run})

    def _claim_a_command(self, w: str) -> tuple[str, str] | None:
        """``w`` claims one command; (run, key) of the command it now holds latest, if any."""
        self.step({"op": "claim_commands", "worker": w, "limit": 1})
        mine = [(run, key) for (who, run, key) in self.held_commands() if who == w]
        if not mine:
            return None
        claims_by_key = self.interp.reference.workers[w].command_claims
        return max(mine, key=lambda rk: claims_by_key[rk][-1].expires_at)

    @rule(data=st.data(), thief=st.sampled_from(TENANT_A), which=claims, result=small_json)
    def steal_command(self, data: Any, thief: str, which: str, result: Any) -> None:
        """A command lease expires, another worker takes the command, the first one completes anyway."""
        w, run, key = self.pick_command(data)
        self.step({"op": "advance_to", "target": "command", "run": run, "offset_us": 0})
        self.step({"op": "claim_commands", "worker": thief, "limit": 2})
        self.step({"op": "complete", "worker": w, "run": run, "key": key, "claim": which, "result": result})

    @rule(w=st.sampled_from(TENANT_A), delay=st.sampled_from((1, 2, 500, 30_000)), key=st.sampled_from(TIMER_KEYS),
          firer=workers, limit=st.sampled_from((1, 10)))
    def timer_boundary(self, w: str, delay: int, key: str, firer: str, limit: int) -> None:
        """Schedule a timer, then fire one microsecond before it is due and exactly when it is."""
        self.step({"op": "claim_runs", "worker": w, "limit": 1})
        mine = [run for (who, run) in self.live_runs() if who == w]
        if mine:
            self.step({"op": "commit", "worker": w, "run": mine[0],
                       "decision": {"status": "blocked", "timers": [{"key": key, "delay_ms": delay}]}})
        self.step({"op": "advance_to", "target": "timer", "which": 0, "offset_us": -1})
        self.step({"op": "fire_timers", "worker": firer, "limit": limit})
        self.step({"op": "advance", "us": 1})
        self.step({"op": "fire_timers", "worker": firer, "limit": limit})

    @rule(w=workers, limit=st.sampled_from((1, 10)), offset=st.sampled_from((None, -1, 0)))
    def fire_timers(self, w: str, limit: int, offset: int | None) -> None:
        if offset is not None:  # land on (or a microsecond before) the next timer's fire_at
            self.step({"op": "advance_to", "target": "timer", "which": 0, "offset_us": offset})
        self.step({"op": "fire_timers", "worker": w, "limit": limit})

    # -- time ---------------------------------------------------------------
    @rule(us=st.sampled_from(ADVANCES_US))
    def advance(self, us: int) -> None:
        self.step({"op": "advance", "us": us})

    @rule(deadline=st.sampled_from(("lease", "timer", "command", "wake")), which=st.integers(0, 2),
          offset=st.sampled_from((-1, 0, 0, 1)))
    def advance_to(self, deadline: str, which: int, offset: int) -> None:
        self.step({"op": "advance_to", "target": deadline, "which": which, "offset_us": offset})

    # -- faults -------------------------------------------------------------
    @rule(w=workers)
    def crash(self, w: str) -> None:
        self.step({"op": "crash", "worker": w})

    @precondition(lambda self: self.has(Capability.STATEMENT_FAULTS) or self.has(Capability.KILL_SESSION))
    @rule(data=st.data(), at=st.integers(1, 14), decision=decisions(),
          kind=st.sampled_from(("commit", "commit", "commit", "complete", "signal", "claim_runs", "fire_timers", "start")))
    def crash_during(self, data: Any, at: int, decision: dict[str, Any], kind: str) -> None:
        w, run = self.pick_run(data)
        if kind == "commit":
            self.step({"op": "load", "worker": w, "run": run})
        self.step({"op": "crash_during", "at": at, "inner": _inner(kind, w, run, decision)})

    @precondition(lambda self: self.has(Capability.STATEMENT_FAULTS))
    @rule(data=st.data(), decision=decisions(),
          kind=st.sampled_from(("commit", "commit", "commit", "complete", "signal", "claim_runs", "start", "cancel", "fail")))
    def lost_ack(self, data: Any, decision: dict[str, Any], kind: str) -> None:
        w, run = self.pick_run(data)
        self.step({"op": "lost_ack", "inner": _inner(kind, w, run, decision)})

    @precondition(lambda self: self.has(Capability.SKIP_LOCKED, Capability.UNIT_OF_WORK, Capability.CONCURRENT_CONNECTIONS))
    @rule(pair=st.permutations(TENANT_A), limit=st.integers(1, 2), fresh=st.lists(runs, min_size=0, max_size=3))
    def paused_claim(self, pair: list[str], limit: int, fresh: list[str]) -> None:
        """One claimer pauses inside its claim transaction; the other must take other runs at once."""
        for run in fresh:
            self.step({"op": "start", "worker": pair[1], "run": run})
        self.step({"op": "paused_claim", "holder": pair[0], "other": pair[1], "limit": limit, "other_limit": 1})

    @precondition(lambda self: self.has(Capability.CONCURRENT_CONNECTIONS))
    @rule(pair=st.permutations(TENANT_A), run=runs, kind=st.sampled_from(
        ("start", "signal", "define", "complete", "commit", "claim_runs", "fire_timers")),
        key=st.sampled_from(COMMAND_KEYS), decision=decisions(), payload=small_json)
    def race(self, pair: list[str], run: str, kind: str, key: str, decision: dict[str, Any], payload: Any) -> None:
        run = run if kind == "start" else self._existing_or(run)
        """The same request from two connections at once.

        Races are state-neutral: whichever thread wins, the state afterwards is the
        same (identical requests; claims taken in a race are given back at once), so
        what the machine does next never depends on thread timing. Only the answers
        differ, and some sequential order of the same requests must explain them.
        """
        a, b = pair[0], pair[1]
        release = False
        if kind == "start":
            ops = [{"op": "start", "worker": x, "run": run, "idem": "race", "input": payload} for x in (a, b)]
        elif kind == "signal":
            ops = [{"op": "signal", "worker": x, "run": run, "key": "race", "payload": payload} for x in (a, b)]
        elif kind == "define":  # two first calls with different bodies: one row, both get it
            ops = [{"op": "define", "worker": a, "name": "raced", "body": "A"},
                   {"op": "define", "worker": b, "name": "raced", "body": "B"}]
        elif kind == "complete":  # the same completion delivered twice at once
            ops = [{"op": "complete", "worker": x, "claim_of": a, "run": run, "key": key, "result": payload} for x in (a, b)]
        elif kind == "commit":  # the same decision sent twice at once
            ops = [{"op": "commit", "worker": x, "claim_of": a, "run": run, "decision": decision} for x in (a, b)]
        elif kind == "claim_runs":
            ops = [{"op": "claim_runs", "worker": x, "limit": 1} for x in (a, b)]
            release = True
        else:
            ops = [{"op": kind, "worker": x, "limit": 1} for x in (a, b)]
        step: dict[str, Any] = {"op": "race", "ops": ops}
        if release:
            step["release_claims"] = True
        self.step(step)

    @precondition(lambda self: self.has(Capability.DATABASE_CLOCK, Capability.UNIT_OF_WORK) and not self.probed)
    @rule()
    def clock_probe(self) -> None:
        """Once per example: the database clock must move inside a transaction."""
        self.probed = True
        self.step({"op": "clock_probe"})

    # Interleavings: one rule per kind, so each gets its own share of the rule choices
    # (Hypothesis favours the first entries of a sampled_from).
    def _interleave(self, kind: str, pair: list[str], run: str, at: str, key: str, decision: dict[str, Any],
                    payload: Any, delay: int) -> None:
        """Two requests overlap at a named point: the first parks before its commit while the second runs."""
        a, b = pair[0], pair[1]
        run = run if kind == "start" else self._existing_or(run)
        if kind == "fire_timers":  # make sure something is due: a live claim blocks on two timers
            mine = [r for (who, r) in self.live_runs() if who == a]
            if mine:
                self.step({"op": "commit", "worker": a, "run": mine[0], "decision": {
                    "status": "blocked", "timers": [{"key": "t0", "delay_ms": delay}, {"key": "t1", "delay_ms": delay}]}})
            self.step({"op": "advance_to", "target": "timer", "which": 0, "offset_us": 0})
            ops = [{"op": "fire_timers", "worker": x, "limit": 1} for x in (a, b)]
        elif kind in ("claim_runs", "claim_commands"):
            ops = [{"op": kind, "worker": x, "limit": 1} for x in (a, b)]
        elif kind == "start":
            ops = [{"op": "start", "worker": x, "run": run, "idem": "overlap", "input": payload} for x in (a, b)]
        elif kind == "signal":
            ops = [{"op": "signal", "worker": x, "run": run, "key": "overlap", "payload": x} for x in (a, b)]
        elif kind == "define":
            ops = [{"op": "define", "worker": a, "name": "overlapped", "body": "A"},
                   {"op": "define", "worker": b, "name": "overlapped", "body": "B"}]
        elif kind == "complete":
            ops = [{"op": "complete", "worker": x, "claim_of": a, "run": run, "key": key, "result": x} for x in (a, b)]
        else:
            ops = [{"op": "commit", "worker": x, "claim_of": a, "run": run, "decision": decision} for x in (a, b)]
        self.step({"op": "interleave", "at": at, "ops": ops})

    _OVERLAP: ClassVar[dict[str, Any]] = {
        "pair": st.permutations(TENANT_A), "run": runs, "at": st.sampled_from(("first_lock", "start")),
        "key": st.sampled_from(COMMAND_KEYS), "decision": decisions(), "payload": small_json,
        "delay": st.sampled_from((1, 500)),
    }

    @precondition(lambda self: self.has(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED))
    @rule(**_OVERLAP)
    def interleave_fire_timers(self, **kw: Any) -> None:
        self._interleave("fire_timers", **kw)

    @precondition(lambda self: self.has(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED))
    @rule(kind=st.sampled_from(("claim_runs", "claim_commands")), **_OVERLAP)
    def interleave_claims(self, kind: str, **kw: Any) -> None:
        self._interleave(kind, **kw)

    @precondition(lambda self: self.has(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED))
    @rule(kind=st.sampled_from(("start", "define")), **_OVERLAP)
    def interleave_first_wins(self, kind: str, **kw: Any) -> None:
        self._interleave(kind, **kw)

    @precondition(lambda self: self.has(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED))
    @rule(kind=st.sampled_from(("signal", "complete", "commit")), **_OVERLAP)
    def interleave_duplicates(self, kind: str, **kw: Any) -> None:
        self._interleave(kind, **kw)

    @rule(w=st.sampled_from(TENANT_A), offset=st.sampled_from((-1, 0, 0, 1)),
          op=st.sampled_from(("complete", "complete", "fail", "heartbeat")), result=small_json)
    def command_boundary(self, w: str, offset: int, op: str, result: Any) -> None:
        """A worker acts on its command one microsecond before, at, or just after its lease expires."""
        taken = self._claim_a_command(w)
        if taken is None:
            return
        self.step({"op": "advance_to", "target": "command", "run": taken[0], "offset_us": offset})
        self.step(_command_step(op, w, *taken, result, True))

    # -- schema and units of work ---------------------------------------------
    @rule(tamper=st.booleans())
    def verify_schema(self, tamper: bool) -> None:
        self.step({"op": "verify_schema", "tamper": tamper})

    @precondition(lambda self: self.has(Capability.UNIT_OF_WORK))
    @rule(w=workers, run=runs)
    def uow_inner_failure(self, w: str, run: str) -> None:
        self.step({"op": "define", "worker": w, "name": "wf", "body": "v1"})
        self.step({"op": "uow_inner_failure", "worker": w, "run": run})


    # -- reach: rules for what the others never (or too rarely) reach ------------------------
    # Each rule below builds the setup it needs itself (a live claim, a claimed command, a due
    # timer) so the sequence it exists for happens whenever it is drawn, not by luck.
    def _claim_for(self, w: str, limit: int = 1) -> str | None:
        """``w`` claims (up to ``limit``) runs and loads one it now holds live; that run, if any."""
        self.step({"op": "claim_runs", "worker": w, "limit": limit})
        claims_by_run = self.interp.reference.workers[w].run_claims
        mine = [run for (who, run) in self.live_runs() if who == w]
        if not mine:
            return None
        run = max(mine, key=lambda r: (claims_by_run[r][-1].expires_at, claims_by_run[r][-1].generation, r))
        self.step({"op": "load", "worker": w, "run": run})
        return run

    def _input_beside(self, holder: str, other: str, kind: str) -> tuple[str, dict[str, Any]] | None:
        """A run ``holder`` holds live and has loaded, plus a waking write of ``kind`` for it by ``other``.

        For ``complete`` ``other`` holds one of the run's commands, for ``fire_timers`` one of its timers
        is due: the run first commits a pending decision scheduling both, ``other`` claims the command,
        the clock reaches the timer, and ``holder`` claims the run again.
        """
        if kind in ("complete", "fire_timers"):
            run = self._claim_for(holder)
            if run is None:
                return None
            self.step({"op": "commit", "worker": holder, "run": run, "decision": {
                "status": "pending", "commands": [{"key": "cw", "queue": "wake", "max_attempts": 3}],
                "timers": [{"key": "tw", "delay_ms": 1}]}})
            self.step({"op": "claim_commands", "worker": other, "limit": 3, "queues": ["wake"]})
            self.step({"op": "advance", "us": 1_000})
            again = self._claim_for(holder, limit=3)
            if again is None:
                return None
            run = again
        else:
            found = self._claim_for(holder)
            if found is None:
                return None
            run = found
        wake: dict[str, Any]
        if kind == "signal":
            wake = {"op": "signal", "worker": other, "run": run, "key": "wake", "payload": other}
        elif kind == "cancel":
            wake = {"op": "cancel", "worker": other, "run": run, "reason": "beside a decision"}
        elif kind == "complete":
            wake = {"op": "complete", "worker": other, "run": run, "key": "cw", "result": "done"}
        else:
            wake = {"op": "fire_timers", "worker": other, "limit": 10}
        return run, wake

    _WAKE: ClassVar[dict[str, Any]] = {
        "pair": st.permutations(TENANT_A), "kind": st.sampled_from(("signal", "complete", "fire_timers", "cancel")),
    }

    @rule(**_WAKE, events=st.booleans())
    def input_during_decision(self, pair: list[str], kind: str, events: bool) -> None:
        """Input lands (signal, completion, timer firing, cancel) between a decider's load and its blocking
        commit: the commit must leave the run runnable."""
        holder, other = pair[0], pair[1]
        found = self._input_beside(holder, other, kind)
        if found is None:
            return
        run, wake = found
        self.step(wake)
        decision: dict[str, Any] = {"status": "blocked"}
        if events:
            decision["events"] = [{"kind": "step", "payload": kind}]
        self.step({"op": "commit", "worker": holder, "run": run, "decision": decision})

    @precondition(lambda self: self.has(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED))
    @rule(**_WAKE, order=st.sampled_from(("decision_first", "wake_first")),
          at=st.sampled_from(("first_lock", "first_lock", "first_lock", "start")))
    def interleave_wake(self, pair: list[str], kind: str, order: str, at: str) -> None:
        """The lost wake-up under true concurrency: a blocking decision and a waking write on another
        connection overlap. ``decision_first``: the decision parks at its COMMIT (after its read of the run)
        while the waking write runs up to ``at``; ``wake_first``: the other way round."""
        holder, other = pair[0], pair[1]
        found = self._input_beside(holder, other, kind)
        if found is None:
            return
        run, wake = found
        commit = {"op": "commit", "worker": holder, "run": run, "decision": {"status": "blocked"}}
        ops = [commit, wake] if order == "decision_first" else [wake, commit]
        self.step({"op": "interleave", "at": at, "ops": ops})

    @precondition(lambda self: self.has(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED))
    @rule(**_WAKE)
    def wake_lands_after_the_decisions_read(self, pair: list[str], kind: str) -> None:
        """As ``interleave_wake`` with the waking write parked at its COMMIT while the blocking decision runs
        up to its first locking statement (every plain read of the run done): the write commits there, and the
        decision must still see it (a commit deciding on a read taken before its lock loses the wake-up)."""
        self.interleave_wake(pair, kind, "wake_first", "first_lock")

    @precondition(lambda self: self.has(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED))
    @rule(**_WAKE)
    def wake_beside_a_decision_both_ways(self, pair: list[str], kind: str) -> None:
        """The two lost wake-ups of ``interleave_wake``, one after the other on fresh setups: first the
        blocking decision parked at its COMMIT (its writes done, not yet visible) while the waking write runs
        up to its first locking statement, so every plain read the waking write takes first sees the run as
        it was; then the waking write parked at its COMMIT while the decision runs up to its first lock. Either
        way the run must stay runnable (a store deciding on a plain read taken before its lock, on either
        side, loses the wake-up)."""
        self.interleave_wake(pair, kind, "decision_first", "first_lock")
        self.interleave_wake(pair, kind, "wake_first", "first_lock")

    @precondition(lambda self: self.has(Capability.CONCURRENT_CONNECTIONS, Capability.STATEMENT_FAULTS, Capability.SKIP_LOCKED))
    @rule(pair=st.permutations(TENANT_A), at=st.sampled_from(("first_lock", "first_lock", "start")),
          events=st.sampled_from((0, 1, 2)), status=st.sampled_from(("blocked", "pending", "completed")))
    def overlapping_duplicate_commit(self, pair: list[str], at: str, events: int, status: str) -> None:
        """One decision delivered twice on two connections, the first copy parked at its COMMIT while the
        second runs: exactly one commits, the other gets a protocol outcome, never a raw error."""
        holder = pair[0]
        run = self._claim_for(holder)
        if run is None:
            return
        decision: dict[str, Any] = {"status": status,
                                    "events": [{"kind": "step", "payload": i} for i in range(events)]}
        ops = [{"op": "commit", "worker": x, "claim_of": holder, "run": run, "decision": decision} for x in pair[:2]]
        self.step({"op": "interleave", "at": at, "ops": ops})

    @rule(w=st.sampled_from(TENANT_A), other=st.sampled_from(TENANT_A),
          status=st.sampled_from(("completed", "failed", "cancelled")),
          then=st.sampled_from(("cancel", "cancel", "signal", "complete", "fire_timers", "start", "commit")))
    def terminal_then_input(self, w: str, other: str, status: str, then: str) -> None:
        """A run closes (its outstanding command claimed by a worker, a timer due), then input arrives:
        cancel, a signal, the command's completion, the timer, a start of the same id, a late commit."""
        run = self._claim_for(w)
        if run is None:
            return
        self.step({"op": "commit", "worker": w, "run": run, "decision": {
            "status": "pending", "commands": [{"key": "ct", "queue": "closing", "max_attempts": 2}],
            "timers": [{"key": "tt", "delay_ms": 1}]}})
        self.step({"op": "claim_commands", "worker": other, "limit": 1, "queues": ["closing"]})
        self.step({"op": "advance", "us": 1_000})
        again = self._claim_for(w, limit=3)
        if again is None:
            return
        closing: dict[str, Any] = {"status": status, "events": [{"kind": "step", "payload": status}]}
        if status == "completed":
            closing["output"] = {"ok": True}
        if status == "failed":
            closing["error"] = "boom"
        self.step({"op": "commit", "worker": w, "run": again, "decision": closing})
        if then == "cancel":
            self.step({"op": "cancel", "worker": other, "run": again, "reason": "too late"})
        elif then == "signal":
            self.step({"op": "signal", "worker": other, "run": again, "key": "late", "payload": 1})
        elif then == "complete":
            self.step({"op": "complete", "worker": other, "run": again, "key": "ct", "result": "late"})
        elif then == "fire_timers":
            self.step({"op": "fire_timers", "worker": other, "limit": 10})
        elif then == "start":
            self.step({"op": "start", "worker": other, "run": again})
        else:
            self.step({"op": "commit", "worker": w, "run": again, "decision": {"status": "blocked"}})

    @rule(decider=st.sampled_from(TENANT_A), w=st.sampled_from(TENANT_A), attempts=st.sampled_from((1, 2, 3)),
          retry_ms=st.sampled_from((0, 0, 1, 500)), error=small_json,
          last=st.sampled_from(("fail", "fail", "heartbeat", "complete")))
    def exhaust_attempts(self, decider: str, w: str, attempts: int, retry_ms: int, error: Any, last: str) -> None:
        """A command fails (retryably) on every attempt until its attempts run out: then it has failed for
        good, the run wakes, and the failure is in the decider's next snapshot; a late call then is refused."""
        run = self._claim_for(decider)
        if run is None:
            return
        self.step({"op": "commit", "worker": decider, "run": run, "decision": {
            "status": "blocked", "commands": [{"key": "cx", "queue": "retry", "max_attempts": attempts}]}})
        for _ in range(attempts):
            self.step({"op": "claim_commands", "worker": w, "limit": 3, "queues": ["retry"]})
            self.step({"op": "fail", "worker": w, "run": run, "key": "cx", "error": error, "retryable": True,
                       "retry_after_ms": retry_ms})
            if retry_ms:  # the retry is due at once otherwise
                self.step({"op": "advance_to", "target": "command", "run": run, "offset_us": 0})
        self.step(_command_step(last, w, run, "cx", error, True))
        self.step({"op": "claim_commands", "worker": w, "limit": 1, "queues": ["retry"]})
        self._claim_for(decider, limit=3)

    @rule(decider=st.sampled_from(TENANT_A), w=workers, queue=st.sampled_from(("q1", "q2", "default")),
          queues=st.sampled_from((("q1",), ("q2",), ("q1", "q2"), ("default",), ())), limit=st.integers(1, 3))
    def queued_commands(self, decider: str, w: str, queue: str, queues: tuple[str, ...], limit: int) -> None:
        """Commands go to named queues; a worker claiming with a queue filter gets only those queues'
        commands (an empty filter claims nothing)."""
        run = self._claim_for(decider)
        if run is not None:
            self.step({"op": "commit", "worker": decider, "run": run, "decision": {"status": "blocked", "commands": [
                {"key": "cq", "queue": queue, "max_attempts": 2}, {"key": "cr", "queue": "q2", "max_attempts": 2}]}})
        self.step({"op": "claim_commands", "worker": w, "limit": limit, "queues": list(queues)})

    @precondition(lambda self: self.has(Capability.UNIT_OF_WORK))
    @rule(w=st.sampled_from(TENANT_A), run=st.sampled_from(UNIT_RUNS),
          mode=st.sampled_from(("commit", "commit", "outer_fails", "commit_fails")), payload=small_json)
    def unit_of_work(self, w: str, run: str, mode: str, payload: Any) -> None:
        """A unit of work with after-commit callbacks, a nested block that succeeds, lock_run, a claim and a
        fenced commit inside; it commits, fails after its nested block, or fails at COMMIT."""
        self.step({"op": "define", "worker": w, "name": "wf", "body": "v1"})
        self.step({"op": "unit", "worker": w, "run": run, "mode": mode, "input": payload, "payload": payload})

    @rule(w=st.sampled_from(TENANT_A), delta_us=st.sampled_from((1, 999_999, 1_000_001, 30_000_000)),
          zone=st.sampled_from(ZONES), what=st.sampled_from(("wake_pending", "wake_blocked", "fire_at")),
          late=st.sampled_from((-1, 0)))
    def absolute_times(self, w: str, delta_us: int, zone: int, what: str, late: int) -> None:
        """A decision names absolute instants (microseconds, a non-UTC offset): a pending run's wake time,
        a blocked run's deadline, a timer's fire_at. Nothing happens a microsecond early, all of it on time."""
        run = self._claim_for(w)
        if run is None:
            return
        now = self.interp.reference.store("w0").now()
        at = (now + timedelta(microseconds=delta_us)).astimezone(timezone(timedelta(minutes=zone)))
        text = at.isoformat(timespec="microseconds")
        decision: dict[str, Any] = {"status": "pending" if what == "wake_pending" else "blocked"}
        if what == "fire_at":
            decision["timers"] = [{"key": "ta", "fire_at": text}]
        else:
            decision["wake_at"] = text
        self.step({"op": "commit", "worker": w, "run": run, "decision": decision})
        target = "timer" if what == "fire_at" else "wake"
        self.step({"op": "advance_to", "target": target, "run": run, "offset_us": late})
        self.step({"op": "fire_timers" if what == "fire_at" else "claim_runs", "worker": w, "limit": 10})
        if late:  # a microsecond early: nothing happened; now it is due
            self.step({"op": "advance", "us": 1})
            self.step({"op": "fire_timers" if what == "fire_at" else "claim_runs", "worker": w, "limit": 10})

    @rule(w=st.sampled_from(TENANT_A), run=runs, value=st.sampled_from(BIG_INTEGERS),
          where=st.sampled_from(("start", "signal", "output", "result")))
    def big_numbers(self, w: str, run: str, value: int, where: str) -> None:
        """A big integer (at and around 2^53, 2^63, 2^64, and beyond) as the whole payload round-trips exactly."""
        if where == "start":
            self.step({"op": "define", "worker": w, "name": "wf", "body": "v1"})
            self.step({"op": "start", "worker": w, "run": run, "idem": None, "input": value})
        elif where == "signal":
            self.step({"op": "signal", "worker": w, "run": self._existing_or(run), "key": "big", "payload": value})
        elif where == "output":
            held = self._claim_for(w)
            if held is not None:
                self.step({"op": "commit", "worker": w, "run": held, "decision": {"status": "completed", "output": value}})
        else:
            taken = self._claim_a_command(w)
            if taken is not None:
                self.step(_command_step("complete", w, *taken, value, True))

    @rule(w=workers, name=st.sampled_from(("wf", "WF", "wf ", "d\u00e9f")), version=st.sampled_from(("1", "2", "1 ")),
          body=st.sampled_from(("v1", "v2")), wrong_digest=st.sampled_from((False, False, False, True)))
    def definition_versions(self, w: str, name: str, version: str, body: str, wrong_digest: bool) -> None:
        """Definitions by byte-exact name and version, bodies round-tripping, a digest that is not the body's
        refused."""
        step: dict[str, Any] = {"op": "define", "worker": w, "name": name, "version": version, "body": body}
        if wrong_digest:
            step["digest_of"] = "v1" if body == "v2" else "v2"
        self.step(step)

    @rule(data=st.data(), after=st.sampled_from((0, 0, 1, 2)), limit=st.sampled_from((None, 1, 2)),
          status=st.sampled_from((None, "pending", "running", "blocked", "completed", "failed", "cancelled")))
    def read_back(self, data: Any, after: int, limit: int | None, status: str | None) -> None:
        w, run = self.pick_run(data)
        self.step({"op": "read_back", "worker": w, "run": run, "after_seq": after, "limit": limit, "status": status})

    @rule(data=st.data(), what=st.sampled_from((
        "empty_run_id", "long_run_id", "long_idempotency_key", "empty_dedup_key", "naive_fire_at",
        "test_clock_on_database_clock", "nan", "infinity", "int_key", "bytes", "set", "tuple", "too_deep",
        "nul_in_payload", "surrogate_in_payload_key", "nul_in_run_id", "surrogate_in_dedup_key", "nul_in_cancel_reason")))
    def refused_arguments(self, data: Any, what: str) -> None:
        """A call the contract refuses before anything is stored (an empty, over-long or unstorable key, a
        value that is not JSON or nests deeper than the limit, unstorable text in a payload or a cancel
        reason): both stores refuse it, nothing changes."""
        w, run = self.pick_run(data)
        self.step({"op": "refused", "worker": w, "run": run, "what": what})

    @rule(w=st.sampled_from(TENANT_A), lease=leases, what=st.sampled_from(("run", "command")))
    def renew_at_once(self, w: str, lease: int, what: str) -> None:
        """A lease renewed (or a command heartbeat sent) at the very instant it was taken, for the same length:
        the UPDATE writes exactly the stored values and must still answer renewed (a store judging by
        changed-row counts answers claim_lost)."""
        if what == "run":
            self.step({"op": "claim_runs", "worker": w, "limit": 1, "lease_s": lease})
            claims_by_run = self.interp.reference.workers[w].run_claims
            mine = [run for (who, run) in self.live_runs() if who == w]
            if mine:
                run = max(mine, key=lambda r: (claims_by_run[r][-1].expires_at, r))
                self.step({"op": "renew", "worker": w, "run": run, "lease_s": lease})
            return
        self.step({"op": "claim_commands", "worker": w, "limit": 1, "lease_s": lease})
        mine_commands = [(run, key) for (who, run, key) in self.held_commands() if who == w]
        if mine_commands:
            by_key = self.interp.reference.workers[w].command_claims
            run, key = max(mine_commands, key=lambda rk: (by_key[rk][-1].expires_at, rk))
            self.step({"op": "heartbeat", "worker": w, "run": run, "key": key, "lease_s": lease})

    @precondition(lambda self: self.has(Capability.SKIP_LOCKED, Capability.UNIT_OF_WORK, Capability.CONCURRENT_CONNECTIONS))
    @rule(pair=st.permutations(TENANT_A), limit=st.integers(1, 2))
    def paused_claim_among_due_runs(self, pair: list[str], limit: int) -> None:
        """Several runs are due (fresh ones started, every lease run out); one claimer pauses inside its claim
        transaction and the other must take another due run at once (a claim that locks more rows than it
        takes, for want of an index, leaves it nothing)."""
        for run in DUE_RUNS:
            self.step({"op": "start", "worker": pair[1], "run": run, "idem": run})
        self.step({"op": "advance", "us": 30_000_001})
        self.step({"op": "paused_claim", "holder": pair[0], "other": pair[1], "limit": limit, "other_limit": 1})

    @rule(decider=st.sampled_from(TENANT_A), w=st.sampled_from(TENANT_A), claimed=st.booleans())
    def consume_unfinished(self, decider: str, w: str, claimed: bool) -> None:
        """A decider schedules a command, claims its run again and consumes the command before it has a
        result (pending, or claimed by a worker): the commit must be refused and change nothing."""
        run = self._claim_for(decider)
        if run is None:
            return
        self.step({"op": "commit", "worker": decider, "run": run, "decision": {
            "status": "pending", "commands": [{"key": "cu", "queue": "eager", "max_attempts": 2}]}})
        if claimed:
            self.step({"op": "claim_commands", "worker": w, "limit": 3, "queues": ["eager"]})
        self.step({"op": "claim_runs", "worker": decider, "limit": 3})
        if (decider, run) in self.live_runs():
            self.step({"op": "commit", "worker": decider, "run": run, "decision": {
                "status": "blocked", "consume": False, "consume_commands": ["cu"]}})

    @rule(w=workers, limit=st.integers(1, 2))
    def page_through(self, w: str, limit: int) -> None:
        """list_runs page by page, each page after the last id of the one before (up to four pages)."""
        ids = self.existing_runs() if w in TENANT_A else []
        after: str | None = None
        for _ in range(4):
            self.step({"op": "list_page", "worker": w, "after": after, "limit": limit})
            page = [r for r in ids if after is None or r > after][:limit]
            if not page:
                return
            after = page[-1]

    @rule(w=st.sampled_from(TENANT_A), revision=st.sampled_from(("stale", "ahead")), decision=decisions())
    def wrong_revision(self, w: str, revision: str, decision: dict[str, Any]) -> None:
        """A decider holding a live claim commits a decision made on another revision than the run's: the
        commit must answer revision_mismatch and change nothing."""
        run = self._claim_for(w)
        if run is not None:
            self.step({"op": "commit", "worker": w, "run": run, "revision": revision, "decision": decision})

    # -- weight: a second entry for the rare sequences that matter most ------------------------
    # Hypothesis draws a rule uniformly among the enabled ones (and disables a random share of rules per
    # example), so a sequence built by one rule among ~50 may be missing from a whole seed's examples; each
    # rule below gives one of them a second, independently enabled entry.
    @rule(w=st.sampled_from(TENANT_A), other=st.sampled_from(TENANT_A),
          status=st.sampled_from(("completed", "failed", "cancelled")),
          then=st.sampled_from(("cancel", "signal")))
    def input_after_close(self, w: str, other: str, status: str, then: str) -> None:
        """As ``terminal_then_input``, with a cancel or a signal after the run closed."""
        self.terminal_then_input(w, other, status, then)

    @precondition(lambda self: self.has(Capability.UNIT_OF_WORK))
    @rule(w=st.sampled_from(TENANT_A), run=st.sampled_from(UNIT_RUNS),
          mode=st.sampled_from(("outer_fails", "commit_fails")), payload=small_json)
    def failing_unit_of_work(self, w: str, run: str, mode: str, payload: Any) -> None:
        """As ``unit_of_work``, ending in a failure: after its nested block succeeded, or at COMMIT."""
        self.unit_of_work(w, run, mode, payload)

    @rule(decider=st.sampled_from(TENANT_A), w=st.sampled_from(TENANT_A), attempts=st.sampled_from((1, 2)),
          retry_ms=st.sampled_from((0, 1)), error=small_json, last=st.sampled_from(("fail", "complete")))
    def attempts_run_out(self, decider: str, w: str, attempts: int, retry_ms: int, error: Any, last: str) -> None:
        """As ``exhaust_attempts``, with few attempts."""
        self.exhaust_attempts(decider, w, attempts, retry_ms, error, last)

    @rule(pair=st.permutations(TENANT_A), kind=st.sampled_from(("signal", "complete", "fire_timers", "cancel")),
          events=st.booleans())
    def wake_between_load_and_commit(self, pair: list[str], kind: str, events: bool) -> None:
        """As ``input_during_decision``."""
        self.input_during_decision(pair, kind, events)

    @precondition(lambda self: self.has(Capability.STATEMENT_FAULTS) or self.has(Capability.KILL_SESSION))
    @rule(w=st.sampled_from(TENANT_A), at=st.integers(2, 14), status=st.sampled_from(("blocked", "pending", "completed")),
          events=st.integers(1, 2))
    def crash_inside_decision(self, w: str, at: int, status: str, events: int) -> None:
        """A decision with events, a command and a timer (statements spread over the whole commit) whose
        session dies before statement ``at``: the decision lands whole or not at all."""
        run = self._claim_for(w)
        if run is None:
            return
        decision: dict[str, Any] = {"status": status, "events": [{"kind": "step", "payload": i} for i in range(events)],
                                    "commands": [{"key": "cf", "max_attempts": 2}], "timers": [{"key": "tf", "delay_ms": 5}]}
        if status == "completed":
            decision["output"] = {"done": at}
        self.step({"op": "crash_during", "at": at, "inner": {"op": "commit", "worker": w, "run": run, "decision": decision}})

    @rule(w=st.sampled_from(TENANT_A), offset=st.sampled_from((0, 0, 1)), op=st.sampled_from(("complete", "fail",
                                                                                               "heartbeat")))
    def command_call_after_expiry(self, w: str, offset: int, op: str) -> None:
        """A worker acts on its command exactly when (or just after) its lease expired, nobody having
        reclaimed it: refused, changing nothing."""
        self.command_boundary(w, offset, op, {"late": offset})

    @rule(variant=st.sampled_from(("newer_schema", "pending", "again", "absent", "concurrent_migrate",
                                   "failed_migration")))
    def schema_drift(self, variant: str) -> None:
        """The code's migrations drift from the database's; or (once per example, it provisions a database)
        a database never migrated: verify fails closed as absent, racing first migrations apply each file
        once, a migration failing half-way is not recorded and reruns."""
        if variant in ("newer_schema", "pending", "again"):
            self.step({"op": "schema_drift", "variant": variant})
        elif not self.fresh_schema_done:
            self.fresh_schema_done = True
            self.step({"op": "fresh_schema", "variant": variant})
        else:
            self.step({"op": "schema_drift", "variant": "again"})

    @rule(data=st.data(), what=st.sampled_from(("start", "signal", "commit", "complete", "fail", "load", "read_back")),
          w=st.sampled_from(TENANT_A), run=runs)
    def poked_values(self, data: Any, what: str, w: str, run: str) -> None:
        """A write or a read, after which the caller scribbles over every object it handed in or got back
        (input, event, output, signal, result, error payloads; runs, history, snapshots, claims): nothing
        stored may change, not even a terminal run's."""
        payload = {"tag": what, "list": [1, {"n": 1}], "obj": {"inner": ["x"]}}
        if what == "start":
            self.step({"op": "define", "worker": w, "name": "wf", "body": "v1"})
            self.step({"op": "poke", "inner": {"op": "start", "worker": w, "run": run, "idem": None, "input": payload}})
        elif what == "signal":
            self.step({"op": "poke", "inner": {"op": "signal", "worker": w, "run": self.pick_existing(data),
                                               "key": "poked", "payload": payload}})
        elif what == "read_back":
            self.step({"op": "poke", "inner": {"op": "read_back", "worker": w, "run": self.pick_existing(data)}})
        elif what in ("commit", "load"):
            held = self._claim_for(w)
            if held is None:
                return
            if what == "load":
                self.step({"op": "poke", "inner": {"op": "load", "worker": w, "run": held}})
                return
            status = data.draw(st.sampled_from(("completed", "failed", "pending")), label="status")
            decision: dict[str, Any] = {"status": status, "events": [{"kind": "step", "payload": payload}]}
            if status == "pending":
                decision["commands"] = [{"key": "cp", "input": payload, "max_attempts": 2}]
            else:
                decision["output" if status == "completed" else "error"] = payload
            self.step({"op": "poke", "inner": {"op": "commit", "worker": w, "run": held, "decision": decision}})
        else:
            taken = self._claim_a_command(w)
            if taken is not None:
                self.step({"op": "poke", "inner": _command_step(what, w, *taken, payload, True)})

    @precondition(lambda self: not self.deep_done)
    @rule(w=st.sampled_from(TENANT_A))
    def deep_payload(self, w: str) -> None:
        """Once per example: a payload nested exactly to the depth limit is stored and reads back whole through
        every read, from a shallow and from a deep call stack."""
        self.deep_done = True
        self.step({"op": "deep_payload", "worker": w})

    @precondition(lambda self: self.has(Capability.UNIT_OF_WORK))
    @rule(pair=st.permutations(TENANT_A), what=st.sampled_from(("start", "signal")), run=runs)
    def beside_unit(self, pair: list[str], what: str, run: str) -> None:
        """A write through a second store on the thread holding another store's open unit of work (before
        and after the unit's own write): refused with a TransientError, or there after the unit commits."""
        self.step({"op": "beside_unit", "worker": pair[0], "other": pair[1], "what": what,
                   "run": self._existing_or(run) if what == "signal" else run})


def _command_step(op: str, w: str, run: str, key: str, result: Any, retryable: bool) -> dict[str, Any]:
    step: dict[str, Any] = {"op": op, "worker": w, "run": run, "key": key}
    if op == "complete":
        step["result"] = result
    if op == "fail":
        step.update(error=result, retryable=retryable, retry_after_ms=0)
    return step


def _inner(kind: str, w: str, run: str, decision: dict[str, Any]) -> dict[str, Any]:
    if kind == "commit":
        return {"op": "commit", "worker": w, "run": run, "decision": decision}
    if kind in ("complete", "fail"):
        return {"op": kind, "worker": w, "run": run, "key": "c0", "result": 1, "error": "e", "retry_after_ms": 0}
    if kind == "signal":
        return {"op": "signal", "worker": w, "run": run, "key": "s0", "payload": 1}
    if kind == "start":
        return {"op": "start", "worker": w, "run": run, "idem": "i0"}
    if kind == "cancel":
        return {"op": "cancel", "worker": w, "run": run}
    return {"op": kind, "worker": w, "limit": 2}


def make_machine(backend: Backend, full_compare: bool = False) -> type[_Machine]:
    """A state machine class bound to ``backend`` (and to its own failure log); ``full_compare``: the whole
    state after every step (see :class:`~kit.machines.interpreter.Interpreter`)."""
    return type("StorageMachine", (_Machine,), {"backend": backend, "failures": [], "examples": [0], "pool": [],
                                                "full_compare": full_compare})


@dataclass
class MachineOutcome:
    backend: str
    profile: str
    seed: int
    examples: int
    seconds: float
    failure: dict[str, Any] | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    first_failing_example: int | None = None
    """The example (counted from 1, replayed ones first) in which the first failure showed."""

    @property
    def ok(self) -> bool:
        return self.failure is None and self.error is None


@contextmanager
def pinned_generation() -> Iterator[None]:
    """While the machine runs, Hypothesis draws from the seed alone.

    Hypothesis (6.131 and later) makes a share of its integer, float and string
    draws from constants it finds in the source of every *local* module in
    ``sys.modules``. Which modules are loaded differs by route (``kit check``
    loads the CLI and report modules, the pytest route a user's conftest and
    adapter), so one seed generated different steps on different routes. Inside
    this block that pool is empty: the steps depend on the seed and the profile
    only. (Hypothesis offers no setting for it; a version without the pool
    needs no pinning.)
    """
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a Hypothesis without the module
        yield
        return
    original = getattr(providers, "_get_local_constants", None)
    constants = getattr(providers, "Constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if original is None or constants is None:  # pragma: no cover - a Hypothesis without the pool
        yield
        return
    empty = constants()
    providers._get_local_constants = lambda: empty
    if cache is not None:
        cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = original
        if cache is not None:
            cache.cache.clear()


def run_machine(backend: Backend, profile: str | Profile = "quick", seed_value: int = 0, shrink: bool = True,
                example_db: ExampleDatabase | None = None, full_compare: bool = False) -> MachineOutcome:
    """Run the machine against ``backend``; the failure (if any) is the last, shrunk step list. With an
    ``example_db``, the failures saved there are replayed first and new ones are saved. After each step the
    runs it touched are compared, and the whole state at the end of each example; ``full_compare``: the whole
    state after every step (slower; what finds a divergence at the very step that caused it)."""
    chosen = PROFILES[profile] if isinstance(profile, str) else profile
    machine = make_machine(backend, full_compare)
    seed(seed_value)(machine)
    started = time.monotonic()
    outcome = MachineOutcome(getattr(backend, "name", "?"), chosen.name, seed_value, 0, 0.0)
    try:
        with pinned_generation(), collecting_less():
            run_state_machine_as_test(machine, settings=chosen.settings(shrink=shrink, database=example_db))
    except Divergence:
        outcome.failure = machine.failures[-1]
    except Exception as exc:  # noqa: BLE001 - a crash of the machine itself is reported, not hidden
        outcome.failure = machine.failures[-1] if machine.failures else None
        outcome.error = None if machine.failures else f"{type(exc).__name__}: {exc}"
    finally:
        for database in machine.pool:
            database.drop()
    outcome.examples = machine.examples[0]
    outcome.seconds = time.monotonic() - started
    outcome.first_failing_example = machine.failures[0].get("example") if machine.failures else None
    return outcome
