"""The model-free fault machine: generated faults drive one store; only the contract's invariants judge it.

The rules build the same JSON steps as :mod:`kit.machines.machine` (worker
crashes, expired leases, stale and duplicated completions, duplicate delivery,
clock skew, killed sessions, lost acknowledgements), but only the steps of the
promise families the store declares (:func:`~kit.machines.model_free.step_families`):
a store without timers is never asked to fire one, a store without leases never
sees one expire. What workers hold is read from the store itself. Hypothesis
shrinks the step list, and a failure replays without Hypothesis.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any, ClassVar

from hypothesis import seed
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kit.contract import Backend
from kit.machines.collector import collecting_less
from kit.machines.interpreter import Divergence
from kit.machines.machine import (
    ADVANCES_US,
    COMMAND_KEYS,
    IDEMS,
    PROFILES,
    RUNS,
    SIGNAL_KEYS,
    TENANT_A,
    TIMER_KEYS,
    MachineOutcome,
    Profile,
    claims,
    decisions,
    leases,
    pinned_generation,
    pooled_database,
    runs,
    small_json,
    workers,
)
from kit.machines.model_free import MODEL_FREE, ModelFreeInterpreter, step_families

__all__ = ["fit_step", "make_model_free_machine", "run_model_free"]

_REVISIONS = st.sampled_from(("claim", "claim", "claim", "stale", "ahead"))
#: The families each deadline ``advance_to`` may land on needs.
_DEADLINES = {"lease": "leases", "timer": "timers", "command": "commands", "wake": "timers"}


#: The promise families (and capabilities) each step op needs; an op not listed every store makes.
_OP_NEEDS: dict[str, tuple[str, ...]] = {
    "define": ("definitions",), "verify_schema": ("schema_checksums",), "signal": ("signals",),
    "cancel": ("cancel_requests",), "fire_timers": ("timers",), "claim_commands": ("commands",),
    "heartbeat": ("commands", "leases"), "complete": ("commands",), "fail": ("commands",), "renew": ("leases",),
    "release": ("leases",), "uow_inner_failure": ("unit_of_work",), "advance": ("test_clock",),
    "advance_to": ("test_clock",), "lost_ack": ("statement_faults",), "race": ("concurrent_connections",),
}


def fit_step(step: dict[str, Any], families: frozenset[str]) -> dict[str, Any] | None:
    """``step`` as a store making only ``families`` may be given it, or None if it needs an op the store does
    not promise: no stale claims without generation fencing, no unexpected revisions without expected
    revisions, no blocked decisions without wake-up on input, no commands or timers in decisions without them."""
    if any(need not in families for need in _OP_NEEDS.get(step["op"], ())):
        return None
    if step["op"] == "advance_to" and _DEADLINES[step["target"]] not in families:
        return None
    if step.get("release_claims") and "leases" not in families:  # giving the claims back is a release
        return None
    fitted = dict(step)
    if "generation_fencing" not in families and fitted.get("claim") == "oldest":
        fitted["claim"] = "latest"
    if "expected_revision" not in families and "revision" in fitted:
        fitted["revision"] = "claim"
    if "decision" in fitted:
        decision = dict(fitted["decision"])
        if "commands" not in families:
            for key in ("commands", "consume_commands"):
                decision.pop(key, None)
        if "timers" not in families:
            for key in ("timers", "cancel_timers", "wake_after_ms"):
                decision.pop(key, None)
        if "wake_on_input" not in families and decision["status"] == "blocked":
            decision["status"] = "pending"
        fitted["decision"] = decision
    if "inner" in fitted:
        inner = fit_step(fitted["inner"], families)
        if inner is None:
            return None
        fitted["inner"] = inner
    if "ops" in fitted:
        ops = [fit_step(op, families) for op in fitted["ops"]]
        if any(op is None for op in ops):
            return None
        fitted["ops"] = ops
    return fitted


def _kinds(step: dict[str, Any]) -> Iterable[str]:
    """What a step exercises: its op, its inner ops, and the parts of its decision (for coverage counts)."""
    yield step["op"]
    if step["op"] == "advance_to":
        yield f"advance_to:{step['target']}"
    for key in ("commands", "timers", "cancel_timers", "wake_after_ms", "consume_commands"):
        if key in step.get("decision", {}):
            yield f"decision:{key}"
    for inner in [step["inner"]] if "inner" in step else step.get("ops", []):
        yield from _kinds(inner)


class _ModelFreeMachine(RuleBasedStateMachine):
    backend: ClassVar[Backend]
    families: ClassVar[frozenset[str]]
    failures: ClassVar[list[dict[str, Any]]]
    examples: ClassVar[list[int]]
    pool: ClassVar[list[Any]]
    kinds: ClassVar[Counter[str]]

    def __init__(self) -> None:
        super().__init__()
        type(self).examples[0] += 1
        self.interp = ModelFreeInterpreter(self.backend, database=pooled_database(self.backend, self.pool))

    def teardown(self) -> None:
        self.interp.close()

    def can(self, *families: str) -> bool:
        return all(f in self.families for f in families)

    def step(self, wanted: dict[str, Any]) -> None:
        """Apply ``wanted`` as the store's promises allow it (or not at all, if they do not)."""
        step = fit_step(wanted, self.families)
        if step is None:
            return
        type(self).kinds.update(_kinds(step))
        try:
            self.interp.apply(step)
        except Divergence as exc:
            type(self).failures.append({"steps": list(self.interp.steps), "divergence": exc.to_json(),
                                        "message": str(exc), "machine": MODEL_FREE,
                                        "example": type(self).examples[0]})
            raise

    # -- what workers hold and what exists, read from the store ---------------------
    def held_runs(self, stale: bool = False) -> list[tuple[str, str]]:
        return sorted((w, run) for w, worker in self.interp.adapter.workers.items()
                      for run, held in worker.run_claims.items() if len(held) > (1 if stale else 0))

    def held_commands(self) -> list[tuple[str, str, str]]:
        return sorted((w, run, key) for w, worker in self.interp.adapter.workers.items()
                      for (run, key) in worker.command_claims)

    def _claim_one(self, w: str) -> str | None:
        """``w`` claims one run; the first run it now holds live, if any."""
        self.step({"op": "claim_runs", "worker": w, "limit": 1})
        mine = [run for (who, run) in self.live_runs() if who == w]
        return mine[0] if mine else None

    def live_runs(self) -> list[tuple[str, str]]:
        """(worker, run) whose latest claim is the run's current claim, unexpired by the store clock."""
        side = self.interp.adapter
        now = self.interp.now()
        live = []
        for (w, run) in self.held_runs():
            claim = side.workers[w].run_claims[run][-1]
            current = side.observer(side.workers[w].tenant).get_run(run)
            if (current is not None and current.status.value == "running" and current.claim_owner == w
                    and current.claim_generation == claim.generation
                    and (current.claim_expires_at is None or current.claim_expires_at > now)):
                live.append((w, run))
        return live

    def existing_runs(self) -> list[str]:
        side = self.interp.adapter
        return sorted(r.run_id for r in side.observer("tenant-a").list_runs(limit=50))

    # Every pick draws the same things whatever the state, so the data's shape never depends on it.
    def pick_run(self, data: Any, stale: bool = False) -> tuple[str, str]:
        mode = data.draw(st.integers(0, 9), label="pick mode")
        index: int = data.draw(st.integers(0, 2**16), label="pick index")
        anything: tuple[str, str] = (data.draw(workers, label="worker"), data.draw(runs, label="run"))
        live = [] if stale else self.live_runs()
        held = self.held_runs(stale)
        if live and mode >= 3:
            return live[index % len(live)]
        if held and mode >= 1:
            return held[index % len(held)]
        return anything

    def pick_existing(self, data: Any) -> str:
        mode = data.draw(st.integers(0, 9), label="existing mode")
        index = data.draw(st.integers(0, 2**16), label="existing index")
        anything: str = data.draw(runs, label="run")
        existing = self.existing_runs()
        return existing[index % len(existing)] if existing and mode >= 2 else anything

    def pick_command(self, data: Any) -> tuple[str, str, str]:
        mode = data.draw(st.integers(0, 9), label="pick mode")
        index: int = data.draw(st.integers(0, 2**16), label="pick index")
        anything = (data.draw(workers), data.draw(runs), data.draw(st.sampled_from(COMMAND_KEYS)))
        held = self.held_commands()
        return held[index % len(held)] if held and mode >= 1 else anything

    def _revision(self, revision: str) -> str:
        return revision if self.can("expected_revision") else "claim"

    def _claim_a_command(self, w: str) -> tuple[str, str] | None:
        self.step({"op": "claim_commands", "worker": w, "limit": 1})
        mine = [(run, key) for (who, run, key) in self.held_commands() if who == w]
        if not mine:
            return None
        held = self.interp.adapter.workers[w].command_claims
        return max(mine, key=lambda rk: held[rk][-1].expires_at)

    # -- runs -----------------------------------------------------------------
    @initialize(first=runs, second=runs, idem=st.sampled_from(IDEMS), decided=st.integers(0, 4),
                delay=st.sampled_from((1, 500)))
    def some_runs(self, first: str, second: str, idem: str | None, decided: int, delay: int) -> None:
        """Every example starts with work to do: runs, and usually one blocked on a command and a timer."""
        self.step({"op": "define", "worker": "w0", "name": "wf", "body": "v1"})
        self.step({"op": "start", "worker": "w0", "run": first, "idem": idem})
        self.step({"op": "start", "worker": "w1", "run": second})
        if decided:
            self.step({"op": "claim_runs", "worker": "w0", "limit": 1})
            held = [run for (who, run) in self.held_runs() if who == "w0"]
            if held:
                self.step({"op": "commit", "worker": "w0", "run": held[0], "decision": {
                    "status": "blocked", "events": [{"kind": "step", "payload": 1}],
                    "commands": [{"key": "c0", "max_attempts": 2}], "timers": [{"key": "t0", "delay_ms": delay}]}})

    @precondition(lambda self: self.can("definitions"))
    @rule(w=workers, body=st.sampled_from(("v1", "v1", "v2")))
    def define(self, w: str, body: str) -> None:
        """A definition ensured again, sometimes with another body: the first one stays."""
        self.step({"op": "define", "worker": w, "name": "wf", "body": body})

    @precondition(lambda self: self.can("schema_checksums"))
    @rule(tamper=st.booleans())
    def verify_schema(self, tamper: bool) -> None:
        self.step({"op": "verify_schema", "tamper": tamper})

    @precondition(lambda self: self.can("unit_of_work"))
    @rule(w=workers, run=runs)
    def uow_inner_failure(self, w: str, run: str) -> None:
        """A unit of work starts a run and signals it in an inner block that fails: nothing may remain."""
        self.step({"op": "define", "worker": w, "name": "wf", "body": "v1"})
        self.step({"op": "uow_inner_failure", "worker": w, "run": run})

    @rule(w=workers, run=runs, idem=st.sampled_from(IDEMS), payload=small_json)
    def start(self, w: str, run: str, idem: str | None, payload: Any) -> None:
        self.step({"op": "define", "worker": w, "name": "wf", "body": "v1"})
        self.step({"op": "start", "worker": w, "run": run, "idem": idem, "input": payload})

    def _existing_or(self, run: str) -> str:
        """An existing run of tenant a chosen by ``run``'s position in the pool (no extra draw), else ``run``."""
        existing = self.existing_runs()
        return existing[RUNS.index(run) % len(existing)] if existing and run in RUNS else run

    @precondition(lambda self: self.can("tenancy"))
    @rule(run=runs, decision=decisions())
    def same_run_id_in_other_tenant(self, run: str, decision: dict[str, Any]) -> None:
        """Tenant b starts and decides (always with an event) a run whose id tenant a uses too, when tenant a
        has runs: nothing may cross tenants, each run's history counts from 1 in its own tenant."""
        self.step({"op": "define", "worker": "w3", "name": "wf", "body": "v1"})
        self.step({"op": "start", "worker": "w3", "run": self._existing_or(run)})
        self.step({"op": "claim_runs", "worker": "w3", "limit": 3})
        for held in sorted({r for (who, r) in self.live_runs() if who == "w3"}):
            self.step({"op": "load", "worker": "w3", "run": held})
            events = [*decision.get("events", ()), {"kind": "step", "payload": "tenant-b"}]
            self.step({"op": "commit", "worker": "w3", "run": held, "decision": {**decision, "events": events}})

    @precondition(lambda self: self.can("tenancy"))
    @rule(w=st.sampled_from(TENANT_A), run=runs, first=st.sampled_from(("a", "b")))
    def colliding_run_histories(self, w: str, run: str, first: str) -> None:
        """One run id in two tenants, each deciding with events (tenant ``first`` before the other): each
        history numbers its entries 1, 2, ... on its own, whatever the other tenant's run holds."""
        run = self._existing_or(run)
        for tenant_worker in (("w3", w) if first == "b" else (w, "w3")):
            self.step({"op": "define", "worker": tenant_worker, "name": "wf", "body": "v1"})
            self.step({"op": "start", "worker": tenant_worker, "run": run})
            self.step({"op": "claim_runs", "worker": tenant_worker, "limit": 3})
            if (tenant_worker, run) in self.live_runs():
                self.step({"op": "load", "worker": tenant_worker, "run": run})
                self.step({"op": "commit", "worker": tenant_worker, "run": run, "decision": {
                    "status": "pending", "events": [{"kind": "step", "payload": tenant_worker}]}})

    @rule(w=workers, other=workers, same_run=st.sampled_from((False, False, True)),
          key=st.sampled_from(("i0", "i1", "I0") + IDEMS[-2:]))
    def idempotent_retry(self, w: str, other: str, same_run: bool, key: str) -> None:
        """A start retried with the same idempotency key, under a fresh run id or the same one (maybe from
        another connection): the key's first run answers, never a second run for one key."""
        first = f"idem-{len(self.interp.steps)}"
        self.step({"op": "define", "worker": w, "name": "wf", "body": "v1"})
        self.step({"op": "start", "worker": w, "run": first, "idem": key})
        self.step({"op": "define", "worker": other, "name": "wf", "body": "v1"})
        self.step({"op": "start", "worker": other, "run": first if same_run else f"{first}-retry", "idem": key})

    @rule(w=workers, which=st.sampled_from(("run", "run", "idem", "signal", "signal")),
          variant=st.sampled_from((("Key", "key"), ("key", "Key"), ("s0", "S0"), ("\u00e9", "e\u0301"))))
    def case_variant_keys(self, w: str, which: str, variant: tuple[str, str]) -> None:
        """Keys differing only in case (or in Unicode normalisation) are different keys: two runs, two
        idempotency keys, two signals; each answer names the key asked for."""
        a, b = variant
        self.step({"op": "define", "worker": w, "name": "wf", "body": "v1"})
        if which == "run":
            for run in (a, b):
                self.step({"op": "start", "worker": w, "run": run})
        elif which == "idem":
            self.step({"op": "start", "worker": w, "run": "r1", "idem": a})
            self.step({"op": "start", "worker": w, "run": "r2", "idem": b})
        elif self.can("signals"):
            run = self._existing_or("r0")
            for key in (a, b):
                self.step({"op": "signal", "worker": w, "run": run, "key": key, "payload": key})

    @precondition(lambda self: self.can("signals"))
    @rule(data=st.data(), w=workers, key=st.sampled_from(SIGNAL_KEYS), payload=small_json, again=st.booleans())
    def signal(self, data: Any, w: str, key: str, payload: Any, again: bool) -> None:
        """A signal, and sometimes the same signal delivered again from another connection."""
        run = self.pick_existing(data)
        self.step({"op": "signal", "worker": w, "run": run, "key": key, "payload": payload})
        if again:
            other = data.draw(workers, label="second sender")
            self.step({"op": "signal", "worker": other, "run": run, "key": key, "payload": payload})

    @precondition(lambda self: self.can("cancel_requests"))
    @rule(data=st.data(), w=workers)
    def cancel(self, data: Any, w: str) -> None:
        self.step({"op": "cancel", "worker": w, "run": self.pick_existing(data), "reason": "stop"})

    @rule(w=workers, after=st.sampled_from((None,) + RUNS), limit=st.integers(1, 3))
    def list_page(self, w: str, after: str | None, limit: int) -> None:
        self.step({"op": "list_page", "worker": w, "after": after, "limit": limit})

    @rule(w=workers, limit=st.integers(1, 2))
    def page_through(self, w: str, limit: int) -> None:
        """list_runs page by page, each page after the last id of the one before (up to four pages): each run
        is listed once, never the cursor's own run."""
        ids = self.existing_runs() if w in TENANT_A else []
        after: str | None = None
        for _ in range(4):
            self.step({"op": "list_page", "worker": w, "after": after, "limit": limit})
            page = [r for r in ids if after is None or r > after][:limit]
            if not page:
                return
            after = page[-1]

    # -- deciders -----------------------------------------------------------------
    @rule(w=workers, limit=st.integers(1, 3), lease=leases)
    def claim_runs(self, w: str, limit: int, lease: int) -> None:
        self.step({"op": "claim_runs", "worker": w, "limit": limit, "lease_s": lease})

    @rule(data=st.data(), which=claims, decision=decisions(), revision=_REVISIONS)
    def decide(self, data: Any, which: str, decision: dict[str, Any], revision: str) -> None:
        w, run = self.pick_run(data)
        self.step({"op": "load", "worker": w, "run": run, "claim": which})
        self.step({"op": "commit", "worker": w, "run": run, "claim": which, "revision": self._revision(revision),
                   "decision": decision})

    @rule(w=workers, lease=leases, decision=decisions(), revision=_REVISIONS)
    def claim_and_decide(self, w: str, lease: int, decision: dict[str, Any], revision: str) -> None:
        """The decider's loop: claim, load, commit."""
        self.step({"op": "claim_runs", "worker": w, "limit": 1, "lease_s": lease})
        held = [run for (who, run) in self.held_runs() if who == w]
        if held:
            mine = self.interp.adapter.workers[w].run_claims
            latest = max(held, key=lambda r: mine[r][-1].generation)
            self.step({"op": "load", "worker": w, "run": latest})
            self.step({"op": "commit", "worker": w, "run": latest, "revision": self._revision(revision),
                       "decision": decision})

    @rule(data=st.data(), which=claims, op=st.sampled_from(("renew", "release", "load")), lease=leases)
    def fenced_call(self, data: Any, which: str, op: str, lease: int) -> None:
        w, run = self.pick_run(data)
        op = op if op != "renew" or self.can("leases") else "load"
        self.step({"op": op, "worker": w, "run": run, "claim": which, "lease_s": lease})

    @precondition(lambda self: self.can("leases", "test_clock"))
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

    @precondition(lambda self: self.can("leases", "test_clock"))
    @rule(data=st.data(), offset=st.sampled_from((0, 1)), same_worker=st.booleans(), decision=decisions(),
          op=st.sampled_from(("commit", "commit", "renew", "release", "load")))
    def zombie_after_takeover(self, data: Any, offset: int, same_worker: bool, decision: dict[str, Any], op: str) -> None:
        """A lease expires, the run is claimed again (maybe by the same worker), the old claim is used."""
        w, run = self.pick_run(data)
        other = data.draw(st.sampled_from(TENANT_A), label="thief")
        self.step({"op": "advance_to", "target": "lease", "run": run, "offset_us": offset})
        self.step({"op": "claim_runs", "worker": w if same_worker else other, "limit": 3})
        step: dict[str, Any] = {"op": op, "worker": w, "run": run, "claim": "oldest"}
        if op == "commit":
            step["decision"] = decision
        self.step(step)

    @precondition(lambda self: self.can("generation_fencing"))
    @rule(data=st.data(), hours=st.sampled_from((-5, 3)), decision=decisions(),
          op=st.sampled_from(("commit", "commit", "renew", "release")))
    def zombie(self, data: Any, hours: int, decision: dict[str, Any], op: str) -> None:
        """A skewed worker believes its oldest claim is still live and uses it."""
        w, run = self.pick_run(data, stale=True)
        self.step({"op": "skew", "worker": w, "hours": hours})
        op = op if op != "renew" or self.can("leases") else "commit"
        step: dict[str, Any] = {"op": op, "worker": w, "run": run, "claim": "oldest"}
        if op == "commit":
            step["decision"] = decision
        self.step(step)

    # -- command workers ----------------------------------------------------------
    @precondition(lambda self: self.can("commands"))
    @rule(w=workers, limit=st.integers(1, 2), lease=leases)
    def claim_commands(self, w: str, limit: int, lease: int) -> None:
        self.step({"op": "claim_commands", "worker": w, "limit": limit, "lease_s": lease})

    @precondition(lambda self: self.can("commands"))
    @rule(data=st.data(), which=claims, result=small_json, op=st.sampled_from(("complete", "complete", "fail", "heartbeat")),
          retryable=st.booleans(), expire=st.sampled_from((None, None, -1, 0)))
    def command_call(self, data: Any, which: str, result: Any, op: str, retryable: bool, expire: int | None) -> None:
        """A worker acts on a command with its latest or a stale claim, sometimes right at its lease's expiry."""
        w, run, key = self.pick_command(data)
        if expire is not None and self.can("leases", "test_clock"):
            self.step({"op": "advance_to", "target": "command", "run": run, "offset_us": expire})
        self.step(_command_step(op, w, run, key, result, retryable, which))

    @precondition(lambda self: self.can("commands"))
    @rule(w=workers, result=small_json, op=st.sampled_from(("complete", "complete", "fail", "heartbeat")),
          retryable=st.booleans())
    def work(self, w: str, result: Any, op: str, retryable: bool) -> None:
        """The worker's loop: claim a command, then act on it."""
        taken = self._claim_a_command(w)
        if taken is not None:
            self.step(_command_step(op, w, *taken, result, retryable))

    @precondition(lambda self: self.can("commands", "leases", "test_clock"))
    @rule(data=st.data(), thief=st.sampled_from(TENANT_A), which=claims, result=small_json)
    def steal_command(self, data: Any, thief: str, which: str, result: Any) -> None:
        """A command lease expires, another worker takes the command, the first one completes anyway."""
        w, run, key = self.pick_command(data)
        self.step({"op": "advance_to", "target": "command", "run": run, "offset_us": 0})
        self.step({"op": "claim_commands", "worker": thief, "limit": 2})
        self.step(_command_step("complete", w, run, key, result, True, which))

    # -- timers and time -----------------------------------------------------------
    @precondition(lambda self: self.can("timers"))
    @rule(w=workers, limit=st.sampled_from((1, 10)), offset=st.sampled_from((None, -1, 0)))
    def fire_timers(self, w: str, limit: int, offset: int | None) -> None:
        if offset is not None and self.can("test_clock"):
            self.step({"op": "advance_to", "target": "timer", "which": 0, "offset_us": offset})
        self.step({"op": "fire_timers", "worker": w, "limit": limit})

    @precondition(lambda self: self.can("timers", "test_clock"))
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

    @precondition(lambda self: self.can("wake_on_input", "signals"))
    @rule(w=st.sampled_from(TENANT_A), sender=workers, key=st.sampled_from(SIGNAL_KEYS), payload=small_json,
          loaded=st.booleans())
    def input_during_decision(self, w: str, sender: str, key: str, payload: Any, loaded: bool) -> None:
        """A signal lands while a decider holds the run (before or after it loads); the decider then blocks:
        the run must wake, not sleep on the signal."""
        run = self._claim_one(w)
        if run is None:
            return
        if loaded:
            self.step({"op": "load", "worker": w, "run": run})
        self.step({"op": "signal", "worker": sender, "run": run, "key": key, "payload": payload})
        self.step({"op": "commit", "worker": w, "run": run, "decision": {"status": "blocked", "consume": False}})

    @precondition(lambda self: self.can("commands"))
    @rule(w=workers, decider=workers, result=small_json, op=st.sampled_from(("fail", "complete")),
          key=st.sampled_from(COMMAND_KEYS), premature=st.booleans())
    def command_round_trip(self, w: str, decider: str, result: Any, op: str, key: str, premature: bool) -> None:
        """A decider schedules a single-attempt command (and, if ``premature``, claims the run again and consumes
        the command before it has a result, which must be refused); a worker ends it for good; whoever holds
        the run's live claim (the decider claims it if nobody does) loads it: the outcome must be in the
        snapshot."""
        run = self._claim_one(decider)
        if run is not None:
            self.step({"op": "commit", "worker": decider, "run": run, "decision": {
                "status": "pending" if premature else "blocked", "commands": [{"key": key, "max_attempts": 1}]}})
            if premature:
                again = self._claim_one(decider)
                if again is not None:
                    self.step({"op": "commit", "worker": decider, "run": again,
                               "decision": {"status": "blocked", "consume": False, "consume_commands": [key]}})
        taken = self._claim_a_command(w)
        if taken is None:
            return
        run = taken[0]
        self.step(_command_step(op, w, *taken, result, retryable=False))
        if not any(r == run for (_, r) in self.live_runs()):
            self.step({"op": "claim_runs", "worker": decider, "limit": 3})
        for holder in sorted({who for (who, r) in self.live_runs() if r == run}):
            self.step({"op": "load", "worker": holder, "run": run})

    @precondition(lambda self: self.can("commands"))
    @rule(decider=st.sampled_from(TENANT_A), w=st.sampled_from(TENANT_A), error=small_json,
          retryable=st.booleans())
    def failure_reaches_the_decider(self, decider: str, w: str, error: Any, retryable: bool) -> None:
        """A command with one attempt fails (for good, whether or not it asks for a retry); the decider claims
        the run again and loads it: the failure is in the snapshot."""
        run = self._claim_one(decider)
        if run is None:
            return
        self.step({"op": "commit", "worker": decider, "run": run, "decision": {
            "status": "blocked", "commands": [{"key": "cz", "queue": "once", "max_attempts": 1}]}})
        self.step({"op": "claim_commands", "worker": w, "limit": 3, "queues": ["once"]})
        if any((who, r, k) == (w, run, "cz") for (who, r, k) in self.held_commands()):
            self.step(_command_step("fail", w, run, "cz", error, retryable))
        self.step({"op": "claim_runs", "worker": decider, "limit": 3})
        if (decider, run) in self.live_runs():
            self.step({"op": "load", "worker": decider, "run": run})

    @precondition(lambda self: self.can("commands"))
    @rule(decider=st.sampled_from(TENANT_A), w=st.sampled_from(TENANT_A), claimed=st.booleans())
    def consume_unfinished(self, decider: str, w: str, claimed: bool) -> None:
        """A decider schedules a command, claims its run again and consumes the command before it has a
        result (pending, or claimed by a worker): refused, nothing consumed."""
        run = self._claim_one(decider)
        if run is None:
            return
        self.step({"op": "commit", "worker": decider, "run": run, "decision": {
            "status": "pending", "commands": [{"key": "cu", "queue": "eager", "max_attempts": 2}]}})
        if claimed:
            self.step({"op": "claim_commands", "worker": w, "limit": 3, "queues": ["eager"]})
        self.step({"op": "claim_runs", "worker": decider, "limit": 3})
        if (decider, run) in self.live_runs():
            self.step({"op": "commit", "worker": decider, "run": run, "decision": {
                "status": "pending", "consume": False, "consume_commands": ["cu"]}})

    @precondition(lambda self: self.can("commands", "leases", "test_clock"))
    @rule(w=st.sampled_from(TENANT_A), offset=st.sampled_from((-1, 0, 0, 1)),
          op=st.sampled_from(("complete", "complete", "fail", "heartbeat")), result=small_json)
    def command_boundary(self, w: str, offset: int, op: str, result: Any) -> None:
        """A worker acts on its command one microsecond before, at, or just after its lease expires."""
        taken = self._claim_a_command(w)
        if taken is not None:
            self.step({"op": "advance_to", "target": "command", "run": taken[0], "offset_us": offset})
            self.step(_command_step(op, w, *taken, result, True))

    @precondition(lambda self: self.can("test_clock"))
    @rule(us=st.sampled_from(ADVANCES_US))
    def advance(self, us: int) -> None:
        self.step({"op": "advance", "us": us})

    @precondition(lambda self: self.can("test_clock"))
    @rule(deadline=st.sampled_from(("lease", "timer", "command", "wake")), which=st.integers(0, 2),
          offset=st.sampled_from((-1, 0, 0, 1)))
    def advance_to(self, deadline: str, which: int, offset: int) -> None:
        self.step({"op": "advance_to", "target": deadline, "which": which, "offset_us": offset})

    # -- faults ---------------------------------------------------------------------
    @rule(w=workers)
    def crash(self, w: str) -> None:
        self.step({"op": "crash", "worker": w})

    @precondition(lambda self: self.can("statement_faults") or self.can("kill_session"))
    @rule(data=st.data(), at=st.integers(1, 14), decision=decisions(),
          kind=st.sampled_from(("commit", "commit", "commit", "complete", "signal", "claim_runs", "start")))
    def crash_during(self, data: Any, at: int, decision: dict[str, Any], kind: str) -> None:
        """The worker's session dies before one statement of an operation."""
        w, run = self.pick_run(data)
        if kind == "commit":
            self.step({"op": "load", "worker": w, "run": run})
        self.step({"op": "crash_during", "at": at, "inner": self._inner(kind, w, run, decision)})

    @precondition(lambda self: self.can("statement_faults") or self.can("kill_session"))
    @rule(w=st.sampled_from(TENANT_A), at=st.integers(2, 14), status=st.sampled_from(("blocked", "pending", "completed")),
          events=st.integers(1, 2))
    def fault_inside_decision(self, w: str, at: int, status: str, events: int) -> None:
        """A decision with events, a command and a timer (its statements spread over the whole commit) whose
        session dies before one statement of it, then the decider claims the run again and decides once more:
        a decision lands whole or not at all, whichever statement the fault hits."""
        self.step({"op": "claim_runs", "worker": w, "limit": 1})
        mine = [run for (who, run) in self.live_runs() if who == w]
        if not mine:
            return
        decision: dict[str, Any] = {"status": status, "events": [{"kind": "step", "payload": i} for i in range(events)],
                                    "commands": [{"key": "cf", "max_attempts": 2}], "timers": [{"key": "tf", "delay_ms": 5}]}
        if status == "completed":
            decision["output"] = {"done": at}
        self.step({"op": "load", "worker": w, "run": mine[0]})
        self.step({"op": "crash_during", "at": at, "inner": {"op": "commit", "worker": w, "run": mine[0],
                                                             "decision": decision}})

    @precondition(lambda self: self.can("statement_faults"))
    @rule(data=st.data(), decision=decisions(),
          kind=st.sampled_from(("commit", "commit", "commit", "complete", "signal", "claim_runs", "start", "cancel", "fail")))
    def lost_ack(self, data: Any, decision: dict[str, Any], kind: str) -> None:
        """An operation commits, its acknowledgement is lost, the client retries it once."""
        w, run = self.pick_run(data)
        self.step({"op": "lost_ack", "inner": self._inner(kind, w, run, decision)})

    @precondition(lambda self: self.can("concurrent_connections"))
    @rule(pair=st.permutations(TENANT_A), kind=st.sampled_from(("signal", "complete", "commit", "start", "claim_runs")),
          data=st.data(), key=st.sampled_from(COMMAND_KEYS), decision=decisions(), payload=small_json)
    def duplicate_at_once(self, pair: list[str], kind: str, data: Any, key: str, decision: dict[str, Any],
                          payload: Any) -> None:
        """The same request delivered twice at once from two connections: it must land once."""
        a, b = pair[0], pair[1]
        run = self.pick_existing(data)
        if kind == "claim_runs":
            self.step({"op": "race", "ops": [{"op": kind, "worker": x, "limit": 1} for x in (a, b)],
                       "release_claims": True})
            return
        if kind == "start":
            ops = [{"op": "start", "worker": x, "run": run, "idem": "race", "input": payload} for x in (a, b)]
        elif kind == "signal":
            ops = [{"op": "signal", "worker": x, "run": run, "key": "race", "payload": payload} for x in (a, b)]
        elif kind == "complete":
            ops = [{"op": "complete", "worker": x, "claim_of": a, "run": run, "key": key, "result": payload} for x in (a, b)]
        else:
            ops = [{"op": "commit", "worker": x, "claim_of": a, "run": run, "decision": decision} for x in (a, b)]
        if self._promised(kind):
            self.step({"op": "race", "ops": ops})

    def _promised(self, kind: str) -> bool:
        return {"signal": self.can("signals"), "complete": self.can("commands"), "fail": self.can("commands"),
                "cancel": self.can("cancel_requests")}.get(kind, True)

    def _inner(self, kind: str, w: str, run: str, decision: dict[str, Any]) -> dict[str, Any]:
        """The operation a fault step wraps; one the store does not promise becomes a claim."""
        kind = kind if self._promised(kind) else "claim_runs"
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


def _command_step(op: str, w: str, run: str, key: str, result: Any, retryable: bool,
                  which: str = "latest") -> dict[str, Any]:
    step: dict[str, Any] = {"op": op, "worker": w, "run": run, "key": key, "claim": which}
    if op == "complete":
        step["result"] = result
    if op == "fail":
        step.update(error=result, retryable=retryable, retry_after_ms=0)
    return step


def make_model_free_machine(backend: Backend, families: frozenset[str]) -> type[_ModelFreeMachine]:
    """A model-free machine class bound to ``backend``, its step families and its own failure log."""
    return type("ModelFreeMachine", (_ModelFreeMachine,), {
        "backend": backend, "families": families, "failures": [], "examples": [0], "pool": [], "kinds": Counter(),
    })


def run_model_free(backend: Backend, profile: str | Profile = "quick", seed_value: int = 0, shrink: bool = True,
                   allowed: Iterable[str] | None = None, example_db: ExampleDatabase | None = None) -> MachineOutcome:
    """Run the model-free machine against ``backend`` with the steps its promises allow (and ``allowed``, if
    given, permits); the failure (if any) is the last, shrunk step list. ``extra`` holds the machine's name,
    the step families it used and how often each kind of step ran."""
    chosen = PROFILES[profile] if isinstance(profile, str) else profile
    families = step_families(backend, allowed)
    machine = make_model_free_machine(backend, families)
    seed(seed_value)(machine)
    started = time.monotonic()
    outcome = MachineOutcome(getattr(backend, "name", "?"), chosen.name, seed_value, 0, 0.0)
    try:
        with pinned_generation(), collecting_less():  # one seed, one scenario, whatever modules are loaded
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
    outcome.extra = {"machine": MODEL_FREE, "families": sorted(families), "kinds": dict(machine.kinds)}
    return outcome
