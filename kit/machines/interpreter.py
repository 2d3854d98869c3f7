"""The one interpreter: apply each step to the adapter and to the reference engine, compare.

A step is a plain JSON record (see :mod:`kit.machines.steps`). After each step
the interpreter compares the two results, then the state of every run the step
touched (:mod:`kit.machines.touched`), then checks CONTRACT.md section 6 on
the adapter's state of those runs; :meth:`Interpreter.finish`, called after
the last step of an example or a replay, compares each tenant's whole
observable state and checks the invariants on it, so a write to a run no step
touched is seen within the example. ``full_compare`` compares the whole state
after every step instead (what the machines did before). The first difference
raises :class:`Divergence`. Interleavings come from steps: a
paused transaction is a context held open across a step, a crash is a
session killed at a counted statement, a race runs on real threads and must
be explained by some sequential order of the same operations on the
reference engine (a linearizability check).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kit.connections import COMMIT_POINT
from kit.contract import (
    Backend,
    Capability,
    ClockMode,
    Decision,
    DefinitionRef,
    KitError,
    MigrationSpec,
    NewEvent,
    NewTimer,
    Outcome,
    RunStatus,
    Snapshot,
    StorageError,
)
from kit.contract import validation as v
from kit.contract.deep_json import nested
from kit.contract.json_exact import json_difference, json_equal
from kit.contract.protocol import iter_pages
from kit.faults import InjectedFault
from kit.inspect import observable_state, run_state, runs_state
from kit.machines import progress
from kit.machines.invariants import acknowledged_violations, violations
from kit.machines.normalize import normalize
from kit.machines.reach import ReachSteps
from kit.machines.side import CLOCK_WORKER, WORKERS, Side, body_of, ms
from kit.machines.steps import describe
from kit.machines.touched import defined_versions, named_runs, touched
from kit.migrate import Migration
from kit.reference import MemoryBackend

__all__ = ["Divergence", "Interpreter", "StepRecord", "deadlines", "inner_failure_unit", "operation", "verify_schema"]

RACE_TIMEOUT_S = 60.0
PARK_S = 30.0
"""A safety net only: B never waits on A's locks before B's first locking statement."""


#: Arguments the contract refuses before anything is stored (``refused`` steps name them by label, so a
#: step list stays plain JSON even for values JSON cannot carry).
_REFUSED: dict[str, Any] = {
    "nan": float("nan"), "infinity": float("inf"), "int_key": {1: "int key"}, "bytes": b"bytes",
    "set": {"set": {1}}, "tuple": ("tuple",),
    "too_deep": nested(v.MAX_JSON_DEPTH + 1), "nul_in_payload": {"k": ["a\x00b"]},
    "surrogate_in_payload_key": {"a\ud800b": 1},
}
_TENANT_OF = WORKERS
"""worker -> tenant: whose runs a step names."""
#: Names probed in every definition listing besides the names defined: LIKE patterns that match "wf".
_LISTING_PROBES = ("w_", "w%")


class Divergence(AssertionError):
    """The adapter and the reference engine disagree, or an invariant broke."""

    def __init__(self, index: int, step: dict[str, Any], kind: str, message: str,
                 adapter: Any = None, reference: Any = None) -> None:
        super().__init__(f"step {index} ({describe(step)}): {message}")
        self.index, self.step, self.kind, self.message = index, step, kind, message
        self.adapter, self.reference = adapter, reference
        progress.diverged()

    def to_json(self) -> dict[str, Any]:
        return {"step": self.index, "kind": self.kind, "message": self.message,
                "adapter": self.adapter, "reference": self.reference}


@dataclass
class StepRecord:
    index: int
    step: dict[str, Any]
    outcome: Any

    def narration(self) -> str:
        return f"{self.index:3d}. {describe(self.step)} -> {_short(self.outcome)}"


def _short(value: Any, limit: int = 160) -> str:
    import json

    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class _Run:
    """What one side returned for a step (already normalised) and the raw results."""

    outcome: Any
    raw: Any = None
    after: Callable[[], None] | None = None


@dataclass
class Interpreter(ReachSteps):
    """Steps on ``backend`` (in ``database`` if given: the caller then owns and drops it).

    After each step the runs it touched are compared, and :meth:`finish` compares the whole state: call it
    after the last step. With ``full_compare`` the whole state is compared after every step."""

    backend: Backend
    narrate: Callable[[str], None] | None = None
    database: Any = None
    records: list[StepRecord] = field(default_factory=list)
    full_compare: bool = False

    def __post_init__(self) -> None:
        self.capabilities = self.backend.capabilities
        self._owns_database = self.database is None
        self.adapter = Side("adapter", self.database if self.database is not None else self.backend.provision())
        self._ref_db = MemoryBackend().provision()
        self.reference = Side("reference", self._ref_db)
        self._seen: dict[str, dict[str, Any]] = {}
        """tenant -> run id -> the adapter's state of the run when last compared (what invariants compare with)."""
        self._commits: dict[tuple[str, str], int] = {}
        self._acked: set[tuple[str, str, str]] = set()
        self._definitions: set[str] = set()
        self._versions: set[tuple[str, str]] = set()
        progress.example_started()

    @property
    def steps(self) -> list[dict[str, Any]]:
        return [r.step for r in self.records]

    def close(self) -> None:
        for side in (self.adapter, self.reference):
            side.close()
        if self._owns_database:
            self.adapter.database.drop()

    # ==================================================================
    # applying a step
    # ==================================================================
    def apply(self, step: dict[str, Any]) -> StepRecord:
        index = len(self.records)
        record = StepRecord(index, step, None)
        self.records.append(record)
        progress.step_applied()
        handler = getattr(self, f"_do_{step['op']}", None)
        if handler is None:
            raise ValueError(f"unknown step op {step['op']!r}: see kit.machines.steps")
        base = self._ref_db.state.tables  # published states are never written in place: what the step began with
        adapter_out, reference_out = handler(index, step)
        record.outcome = adapter_out
        if self.narrate is not None:
            self.narrate(record.narration())
        difference = json_difference(adapter_out, reference_out, ("the adapter has", "the reference"))
        if difference is not None:
            raise Divergence(index, step, "outcome",
                             f"the adapter answered {_short(adapter_out)}, the reference {_short(reference_out)} "
                             f"(first difference {difference})",
                             adapter_out, reference_out)
        if self.full_compare:
            self._compare_whole(index, step)
        else:
            self._compare_touched(index, step, base)
        return record

    def finish(self) -> None:
        """The end of an example (or of a replay): compare the whole state and check the invariants on it;
        a difference raises :class:`Divergence` at the last step, saying it showed at the end."""
        if self.records and not self.full_compare:
            last = self.records[-1]
            self._compare_whole(last.index, last.step, at_end=True)

    # -- running one operation on both sides ---------------------------------
    def _call(self, side: Side, fn: Callable[[Side], Any], index: int, step: dict[str, Any]) -> Any:
        try:
            return fn(side)
        except KitError as exc:
            return exc
        except Exception as exc:
            if side is self.reference:
                raise
            self._blame_the_step(fn, index, step, exc)
            raise Divergence(index, step, "error", f"the adapter raised {type(exc).__name__}: {exc}") from exc

    def _blame_the_step(self, fn: Callable[[Side], Any], index: int, step: dict[str, Any], exc: Exception) -> None:
        """Raise ConfigurationError when the reference engine cannot apply the step either: the step is
        malformed (a hand-edited bundle), and the adapter is not to blame."""
        try:
            fn(self.reference)
        except KitError:
            return
        except Exception as ref_exc:  # noqa: BLE001 - the step itself is broken
            from kit.contract.errors import ConfigurationError

            raise ConfigurationError(
                f"step {index} ({step.get('op')!r}) cannot be applied on either side "
                f"({type(ref_exc).__name__}: {ref_exc}): the step is malformed; fix it or re-save the bundle"
            ) from exc

    def _both(self, index: int, step: dict[str, Any], fn: Callable[[Side], Any],
              remember: Callable[[Side, Any], None] | None = None) -> tuple[Any, Any]:
        results = []
        for side in (self.adapter, self.reference):
            raw = self._call(side, fn, index, step)
            if remember is not None and not isinstance(raw, BaseException):
                remember(side, raw)
            results.append(normalize(raw))
        self._count(step, results[1])
        return results[0], results[1]

    def _count(self, step: dict[str, Any], reference_outcome: Any) -> None:
        """Track acknowledged writes and committed decisions (from the reference's verdict)."""
        op, worker = step["op"], step.get("worker", CLOCK_WORKER)
        tenant = self.reference.workers[worker].tenant if worker in self.reference.workers else ""
        if op == "commit" and reference_outcome == Outcome.COMMITTED.value:
            key = (tenant, step["run"])
            self._commits[key] = self._commits.get(key, 0) + 1
        if op == "start" and isinstance(reference_outcome, dict) and reference_outcome.get("created"):
            self._acked.add((tenant, "run", reference_outcome["run"]))
        if op == "signal" and isinstance(reference_outcome, dict) and reference_outcome.get("outcome") == "committed":
            self._acked.add((tenant, "signal", f"{step['run']}\x1f{step['key']}"))

    # -- the operations -------------------------------------------------------
    @staticmethod
    def _operation(step: dict[str, Any]) -> tuple[Callable[[Side], Any], Callable[[Side, Any], None] | None]:
        """The store call a step stands for, and what the worker remembers of its result."""
        op, w = step["op"], step.get("worker", CLOCK_WORKER)
        source = step.get("claim_of", w)  # duplicate delivery: another connection sends the same claim
        which = step.get("claim", "latest")
        lease = timedelta(seconds=step.get("lease_s", 30))

        def needs_claim(fn: Callable[[Side, Any], Any]) -> Callable[[Side], Any]:
            def call(side: Side) -> Any:
                claim = side.run_claim(source, step["run"], which)
                return "no claim held" if claim is None else fn(side, claim)
            return call

        def needs_command(fn: Callable[[Side, Any], Any]) -> Callable[[Side], Any]:
            def call(side: Side) -> Any:
                claim = side.command_claim(source, step["run"], step["key"], which)
                return "no claim held" if claim is None else fn(side, claim)
            return call

        if op == "define":
            body = body_of(step["body"])
            digest = Side.definition_digest(step.get("digest_of", step["body"]))
            return (lambda s: s.store(w).ensure_definition(step["name"], step.get("version", "1"), digest, body)), None
        if op == "start":
            ref = DefinitionRef(step.get("def", "wf"), "1", Side.definition_digest(step.get("body", "v1")))
            return (lambda s: s.store(w).start_run(step["run"], ref, step.get("input"), step.get("idem"))), None
        if op == "signal":
            return (lambda s: s.store(w).send_signal(step["run"], step.get("name", "sig"), step.get("payload"), step["key"])), None
        if op == "cancel":
            return (lambda s: s.store(w).request_cancel(step["run"], step.get("reason"))), None
        if op == "claim_runs":
            return ((lambda s: s.store(w).claim_runs(w, lease, step.get("limit", 1))),
                    lambda s, claims: s.remember_run_claims(w, claims))
        if op == "renew":
            return needs_claim(lambda s, c: s.store(w).renew_run_claim(c, lease)), None
        if op == "release":
            return needs_claim(lambda s, c: s.store(w).release_run_claim(c)), None
        if op == "load":
            def remember_snapshot(s: Side, result: Any) -> None:
                if isinstance(result, Snapshot):
                    s.workers[w].snapshots[step["run"]] = result
            return needs_claim(lambda s, c: s.store(w).load_claimed(c)), remember_snapshot
        if op == "commit":
            def commit(s: Side, c: Any) -> Any:
                offset = {"claim": 0, "stale": -1, "ahead": 1}[step.get("revision", "claim")]
                return s.store(w).commit_decision(c, c.revision + offset, s.decision(w, step["run"], step["decision"]))
            return needs_claim(commit), None
        if op == "claim_commands":
            return ((lambda s: s.store(w).claim_commands(w, lease, step.get("limit", 1), step.get("queues"))),
                    lambda s, claims: s.remember_command_claims(w, claims))
        if op == "heartbeat":
            return needs_command(lambda s, c: s.store(w).heartbeat_command(c, lease)), None
        if op == "complete":
            return needs_command(lambda s, c: s.store(w).complete_command(c, step.get("result"))), None
        if op == "fail":
            retry = ms(step["retry_after_ms"]) if step.get("retry_after_ms") is not None else None
            return needs_command(lambda s, c: s.store(w).fail_command(c, step.get("error"), retry, step.get("retryable", True))), None
        if op == "fire_timers":
            return (lambda s: s.store(w).fire_due_timers(step.get("limit", 10))), None
        if op == "list_page":
            return (lambda s: [r.run_id for r in s.store(w).list_runs(after=step.get("after"), limit=step.get("limit", 2))]), None
        raise ValueError(f"step op {op!r} is not a single store operation")

    def _single(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        if step["op"] == "define":
            self._definitions.add(step["name"])
            self._versions.add((step["name"], step.get("version", "1")))
        fn, remember = self._operation(step)
        return self._both(index, step, fn, remember)

    _do_define = _do_start = _do_signal = _do_cancel = _single
    _do_claim_runs = _do_renew = _do_release = _do_load = _do_commit = _single
    _do_claim_commands = _do_heartbeat = _do_complete = _do_fail = _do_fire_timers = _do_list_page = _single

    # -- time ---------------------------------------------------------------
    def _do_advance(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        delta = timedelta(microseconds=int(step["us"]))
        return self._both(index, step, lambda s: s.store(CLOCK_WORKER).advance_test_clock(delta).isoformat())

    def _do_advance_to(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """Land exactly on (or one microsecond around) a lease expiry, timer or wake time."""
        now = self.reference.store(CLOCK_WORKER).now()
        targets = sorted(t for t in self._deadlines(step["target"], step.get("run"))
                         if t + timedelta(microseconds=step.get("offset_us", 0)) > now)
        if not targets:
            return "no such deadline ahead", "no such deadline ahead"
        at: datetime = targets[step.get("which", 0) % len(targets)] + timedelta(microseconds=step.get("offset_us", 0))

        def set_clock(side: Side) -> str:
            side.store(CLOCK_WORKER).set_test_clock(at)
            return at.isoformat()

        return self._both(index, step, set_clock)

    def _deadlines(self, target: str, only_run: str | None = None) -> list[datetime]:
        return deadlines(self.reference, target, only_run)

    # -- faults -------------------------------------------------------------
    def _do_crash(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        for side in (self.adapter, self.reference):
            side.crash(step["worker"])
        return "crashed", "crashed"

    def _do_skew(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        # The store never sees a worker's clock: a skewed worker shows only in what it does
        # next (renewing or committing with claims it wrongly believes live).
        outcome = f"{step['worker']} clock off by {step['hours']} h"
        return outcome, outcome

    def _do_crash_during(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """The worker's session dies before statement #at of the inner operation."""
        inner, w = step["inner"], step["inner"]["worker"]
        fn, remember = self._operation(inner)
        worker = self.adapter.workers[w]
        store = self.adapter.store(w)
        kill = Capability.KILL_SESSION in self.capabilities
        if not kill and Capability.STATEMENT_FAULTS not in self.capabilities:
            return "skipped: no statement_faults", "skipped: no statement_faults"
        action = (lambda _statement: self.adapter.database.kill_session(store)) if kill else None
        worker.faults.fail_at(int(step["at"]), action=action)
        try:
            raw = self._call(self.adapter, fn, index, step)
        finally:
            fired = worker.faults.fired
            worker.faults.disarm()
        if fired is None:  # the operation finished before the fault point: it simply ran
            if not isinstance(raw, BaseException) and remember:
                remember(self.adapter, raw)
            ref = self._call(self.reference, fn, index, step)
            if not isinstance(ref, BaseException) and remember:
                remember(self.reference, ref)
            self._count(inner, normalize(ref))
            return normalize(raw), normalize(ref)
        if not isinstance(raw, StorageError):
            raise Divergence(index, step, "fault",
                             f"the operation returned {_short(normalize(raw))} although its session died before "
                             f"{fired[:60]!r}", normalize(raw), "crashed")
        self.adapter.crash(w)
        self.reference.crash(w)
        return "crashed", "crashed"

    def _do_lost_ack(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """The inner operation commits, the client sees an error, and retries it once."""
        inner, w = step["inner"], step["inner"]["worker"]
        fn, remember = self._operation(inner)
        worker = self.adapter.workers[w]
        self.adapter.store(w)  # (re)open first: opening commits too, and must not take the fault
        worker.faults.lose_ack()
        try:
            first = self._call(self.adapter, fn, index, step)
        finally:
            lost = worker.faults.fired is not None
            worker.faults.disarm()
        ref_first = self._call(self.reference, fn, index, step)
        if not lost:  # refused before committing: an ordinary answer
            if not isinstance(first, BaseException) and remember:
                remember(self.adapter, first)
            if not isinstance(ref_first, BaseException) and remember:
                remember(self.reference, ref_first)
            self._count(inner, normalize(ref_first))
            return normalize(first), normalize(ref_first)
        self._count(inner, normalize(ref_first))
        retried = self._both(index, inner, fn, remember)
        return {"ack": "lost", "retry": retried[0]}, {"ack": "lost", "retry": retried[1]}

    # -- interleavings ------------------------------------------------------
    def _do_paused_claim(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """`holder` claims inside a transaction and pauses; `other` must skip its rows, not wait."""
        holder, other = step["holder"], step["other"]
        if not all(c in self.capabilities for c in (Capability.SKIP_LOCKED, Capability.UNIT_OF_WORK)):
            # A store that serialises writers cannot pause one claimer while another claims;
            # the step does nothing on either side, so a bundle from another backend still replays.
            return "skipped: no skip_locked", "skipped: no skip_locked"
        lease = timedelta(seconds=step.get("lease_s", 30))
        limits = step.get("limit", 1), step.get("other_limit", 1)
        held_store, other_store = self.adapter.store(holder), self.adapter.store(other)
        unit = held_store.transaction()
        unit.__enter__()
        try:
            held = self._call(self.adapter, lambda s: held_store.claim_runs(holder, lease, limits[0]), index, step)
            box: list[Any] = []
            thread = threading.Thread(
                target=lambda: box.append(self._call(self.adapter, lambda s: other_store.claim_runs(other, lease, limits[1]), index, step)),
                daemon=True,
            )
            thread.start()
            thread.join(RACE_TIMEOUT_S)
            blocked = thread.is_alive()
        except BaseException as exc:
            unit.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if blocked:  # let the waiter finish before anything closes its connection
            unit.__exit__(_Blocked, _Blocked(), None)
            thread.join(RACE_TIMEOUT_S)
            raise Divergence(index, step, "blocked", f"{other}'s claim waited for {holder}'s open transaction instead of skipping its rows")
        unit.__exit__(None, None, None)
        adapter_raw = [held, box[0]]
        ref_held = self.reference.store(holder).claim_runs(holder, lease, limits[0])
        ref_other = self.reference.store(other).claim_runs(other, lease, limits[1])
        for side, pair in ((self.adapter, adapter_raw), (self.reference, [ref_held, ref_other])):
            for who, result in zip((holder, other), pair):
                if isinstance(result, list):
                    side.remember_run_claims(who, result)
        return normalize(adapter_raw), normalize([ref_held, ref_other])

    def _do_race(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """Operations from different workers at once; some sequential order must explain the results."""
        ops = step["ops"]
        calls = [self._operation(op) for op in ops]
        barrier = threading.Barrier(len(ops))
        raws: list[Any] = [None] * len(ops)

        def run(i: int) -> None:
            barrier.wait(RACE_TIMEOUT_S)
            try:
                raws[i] = self._call(self.adapter, calls[i][0], index, step)
            except Divergence as exc:
                raws[i] = exc

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(ops))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(RACE_TIMEOUT_S)
        if any(t.is_alive() for t in threads):
            raise Divergence(index, step, "blocked", "a racing operation never finished (deadlock or lock wait)")
        for raw in raws:
            if isinstance(raw, Divergence):
                raise raw
        adapter_out = [normalize(r) for r in raws]
        saved = self._ref_db.state.tables
        for order in itertools.permutations(range(len(ops))):
            self._ref_db.state.tables = saved
            ref_raws: list[Any] = [None] * len(ops)
            for i in order:
                ref_raws[i] = self._call(self.reference, calls[i][0], index, step)
            if json_equal([normalize(r) for r in ref_raws], adapter_out):
                break
        else:
            self._ref_db.state.tables = saved
            ref_raws = [self._call(self.reference, call[0], index, step) for call in calls]
            return adapter_out, [normalize(r) for r in ref_raws]
        for i, (op, (_, remember)) in enumerate(zip(ops, calls)):
            for side, raw in ((self.adapter, raws[i]), (self.reference, ref_raws[i])):
                if step.get("release_claims") and isinstance(raw, list):
                    # Give back what the race claimed, so the state after the step does not
                    # depend on which thread won (the machine's next steps must not either).
                    for claim in raw:
                        side.store(op["worker"]).release_run_claim(claim)
                elif remember is not None and not isinstance(raw, BaseException):
                    remember(side, raw)
            self._count(op, normalize(ref_raws[i]))
            if op["op"] == "define":
                self._definitions.add(op["name"])
        return adapter_out, adapter_out

    def _do_clock_probe(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """Inside one transaction the database clock must keep moving (never a transaction-start time).

        Between the two reads the host waits until twice the declared clock resolution
        has passed on its own monotonic clock: waiting for a tick, not betting on timing.
        """
        resolution = self.capabilities.clock_resolution_us

        def probe(side: Side) -> list[str]:
            store = side.database.open(side.workers[CLOCK_WORKER].tenant, clock=ClockMode.DATABASE)
            try:
                with store.transaction():
                    first = store.now()
                    _wait_us(2 * max(resolution, 1))
                    second = store.now()
                host = datetime.now(UTC)
            finally:
                store.close()
            moving = "clock moves inside a transaction" if second > first else "clock frozen inside a transaction"
            # the server's current time: within an hour of this host's (a wrong zone or a frozen clock is not)
            server = "clock reads server time" if abs(second - host) < timedelta(hours=1) else \
                f"clock is {second - host} off this host's"
            return [moving, server]

        if Capability.DATABASE_CLOCK not in self.capabilities:
            return "skipped: no database_clock", "skipped: no database_clock"
        return self._both(index, step, probe)

    def _do_interleave(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """A runs up to its COMMIT and parks there until B reaches point ``at``; then both finish.

        ``at`` is ``start`` (B's first statement) or ``first_lock`` (B's first locking or
        writing statement: every plain read B does before locking has happened while A's
        writes were uncommitted). A always commits first, so the reference runs A then B.
        A store that locks more than rows (one writer at a time, or the reference's single
        lock) cannot pause A while B reads; the step does nothing there, on both sides.
        """
        if not all(c in self.capabilities for c in (Capability.SKIP_LOCKED, Capability.STATEMENT_FAULTS)):
            return "skipped: no row-level locking", "skipped: no row-level locking"
        first, second = step["ops"]
        (fn_a, remember_a), (fn_b, remember_b) = self._operation(first), self._operation(second)
        worker_a, worker_b = self.adapter.workers[first["worker"]], self.adapter.workers[second["worker"]]
        self.adapter.store(first["worker"])
        self.adapter.store(second["worker"])
        reached, parked = threading.Event(), threading.Event()
        worker_a.faults.park_commit(reached, PARK_S, parked)
        worker_b.faults.notify_at(str(step.get("at", "first_lock")), reached)
        raws: list[Any] = [None, None]

        def run(i: int, fn: Callable[[Side], Any]) -> None:
            if i == 1:  # B starts once A is parked at its commit (or finished without one)
                parked.wait(RACE_TIMEOUT_S)
            try:
                raws[i] = self._call(self.adapter, fn, index, step)
            except Divergence as exc:
                raws[i] = exc
            finally:
                if i == 0:
                    parked.set()
                else:  # B ended without reaching ``at`` (e.g. refused before any statement): A need not wait PARK_S
                    reached.set()

        thread_a = threading.Thread(target=run, args=(0, fn_a), daemon=True)
        thread_a.start()
        thread_b = threading.Thread(target=run, args=(1, fn_b), daemon=True)
        thread_b.start()
        for t in (thread_a, thread_b):
            t.join(RACE_TIMEOUT_S)
        worker_a.faults.disarm()
        worker_b.faults.disarm()
        if thread_a.is_alive() or thread_b.is_alive():
            raise Divergence(index, step, "blocked", "an interleaved operation never finished (deadlock or lock wait)")
        for raw in raws:
            if isinstance(raw, Divergence):
                raise raw
        ref = [self._call(self.reference, fn_a, index, step), self._call(self.reference, fn_b, index, step)]
        for side, pair in ((self.adapter, raws), (self.reference, ref)):
            for raw, remember in zip(pair, (remember_a, remember_b)):
                if remember is not None and not isinstance(raw, BaseException):
                    remember(side, raw)
        for op, raw in zip((first, second), ref):
            self._count(op, normalize(raw))
            if op["op"] == "define":
                self._definitions.add(op["name"])
        return [normalize(r) for r in raws], [normalize(r) for r in ref]

    # -- schema and units of work ---------------------------------------------
    def _do_verify_schema(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        return self._both(index, step, lambda side: verify_schema(side, bool(step.get("tamper"))))

    def _do_uow_inner_failure(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """A unit of work whose inner block fails while the outer swallows it must roll back whole."""
        if Capability.UNIT_OF_WORK not in self.capabilities:
            return "skipped: no unit_of_work", "skipped: no unit_of_work"
        return self._both(index, step, lambda side: inner_failure_unit(side, step["worker"], step["run"], step.get("input")))

    def _do_unit(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """A unit of work with after-commit callbacks, a nested block, a claim and a fenced commit inside.

        ``mode`` says how it ends: ``commit`` (everything lands, callbacks run once, in registration
        order, only after the outermost commit), ``outer_fails`` (the nested block succeeded, then the
        outer block raises: nothing lands, no callback runs) or ``commit_fails`` (the COMMIT itself
        fails: nothing lands, no callback runs). On the way, ``lock_run`` is tried outside the unit
        (refused) and inside it (the run), and another connection reads the run while the unit is
        open (it must not see the unit's writes).
        """
        mode, w, run = step.get("mode", "commit"), step["worker"], step["run"]
        if Capability.UNIT_OF_WORK not in self.capabilities:
            return "skipped: no unit_of_work", "skipped: no unit_of_work"
        if mode == "commit_fails" and Capability.STATEMENT_FAULTS not in self.capabilities:
            return "skipped: no statement_faults", "skipped: no statement_faults"
        concurrent = Capability.CONCURRENT_CONNECTIONS in self.capabilities
        ref = DefinitionRef("wf", "1", Side.definition_digest("v1"))
        lease = timedelta(seconds=step.get("lease_s", 30))

        def unit(side: Side) -> Any:
            calls: list[str] = []
            armed: list[bool] = []

            def fail_commit(statement: str) -> None:
                if armed and statement == COMMIT_POINT:
                    raise InjectedFault("injected fault at COMMIT")

            own = mode == "commit_fails"
            store = side.database.open(side.workers[w].tenant, clock=ClockMode.TEST,
                                       statement_hook=fail_commit) if own else side.store(w)
            seen: dict[str, Any] = {}
            reader = side.reader(w)  # opened before the unit: opening a store may itself need to write
            try:
                try:
                    seen["lock_outside"] = normalize(store.lock_run(run))
                except KitError as exc:
                    seen["lock_outside"] = normalize(exc)
                armed.append(True)
                try:
                    with store.transaction() as outer:
                        outer.on_commit(lambda: calls.append("outer-1"))
                        with store.transaction() as inner:
                            inner.on_commit(lambda: calls.append("inner"))
                            seen["start"] = normalize(store.start_run(run, ref, step.get("input"), f"unit-{run}"))
                        seen["locked"] = normalize(store.lock_run(run))
                        if concurrent:
                            seen["seen_by_others"] = self._read_beside(reader, run, index, step)
                        claims = store.claim_runs(w, lease, 1)
                        seen["claims"] = normalize(claims)
                        if claims:
                            decision = Decision(RunStatus.BLOCKED, events=(NewEvent("step", "unit"),))
                            seen["commit"] = normalize(store.commit_decision(claims[0], claims[0].revision, decision))
                        seen["signal"] = normalize(store.send_signal(run, "sig", step.get("payload"), "unit"))
                        outer.on_commit(lambda: calls.append("outer-2"))
                        seen["callbacks_inside"] = list(calls)
                        if mode == "outer_fails":
                            raise _InnerFailure()
                    seen["end"] = "committed"
                except _InnerFailure:
                    seen["end"] = "rolled back"
                except KitError as exc:
                    seen["end"] = normalize(exc)
            finally:
                if own:
                    store.close()
            seen["callbacks"] = calls
            return seen

        outcome = self._both(index, step, unit)
        ref = outcome[1]
        if isinstance(ref, dict) and ref.get("end") == "committed" and ref.get("commit") == Outcome.COMMITTED.value:
            key = (self.reference.workers[w].tenant, ref["claims"][0]["run"])
            self._commits[key] = self._commits.get(key, 0) + 1
        return outcome

    def _read_beside(self, reader: Any, run: str, index: int, step: dict[str, Any]) -> Any:
        """The run as another connection sees it while a unit is open (on a thread: it must not wait)."""
        box: list[Any] = []

        def read() -> None:
            try:
                box.append(normalize(reader.get_run(run)))
            except KitError as exc:
                box.append(normalize(exc))

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        thread.join(RACE_TIMEOUT_S)
        if thread.is_alive():
            raise Divergence(index, step, "blocked", "a reader on another connection waited for an open unit of work")
        return box[0] if box else "reader failed"

    def _do_read_back(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """A run read back through the protocol's individual reads (not ``export_state``): the run, a page of
        its history, its commands, signals and timers, and the runs in one status, compared with the reference."""
        w, run = step.get("worker", CLOCK_WORKER), step["run"]

        def read(side: Side) -> Any:
            store = side.store(w)
            status = RunStatus(step["status"]) if step.get("status") else None
            page = store.get_history(run, step.get("after_seq", 0), step.get("limit"))
            return {
                "run": run_state(store, run),
                "page": [[e.seq, e.kind, e.payload] for e in page],
                "in_status": [r.run_id for r in store.list_runs(status=status, limit=50)],
                "commands": [[c.operation_key, c.status.value, c.result, c.error] for c in store.list_commands(run)],
            }

        return self._both(index, step, read)

    def _do_schema_drift(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """The code's migrations drift from the database's: ``newer_schema`` (the code lacks the last applied
        file), ``pending`` (the code has a file never applied), ``again`` (migrate() on an up-to-date schema)."""
        variant = step["variant"]

        def drift(side: Side) -> Any:
            migrations: list[MigrationSpec] = list(side.store(CLOCK_WORKER).migrations)
            if variant == "again":
                return side.store(CLOCK_WORKER).migrate()
            if variant == "newer_schema":
                migrations = migrations[:-1]
            else:
                last = migrations[-1]
                migrations.append(Migration(last.version + 1, "never_applied", "SELECT 1"))
            store = side.database.open(side.workers[CLOCK_WORKER].tenant, clock=ClockMode.TEST, migrations=migrations)
            try:
                store.verify_schema()
                return "schema verified"
            finally:
                store.close()

        return self._both(index, step, drift)

    def _do_refused(self, index: int, step: dict[str, Any]) -> tuple[Any, Any]:
        """A call the contract refuses up front (``what``): an empty or over-long key, a value that is not
        JSON, a naive timestamp, the test clock driven on a database-clock store. Nothing may change."""
        what, w, run = step["what"], step.get("worker", CLOCK_WORKER), step.get("run", "r0")
        ref = DefinitionRef("wf", "1", Side.definition_digest("v1"))
        if what == "test_clock_on_database_clock" and Capability.DATABASE_CLOCK not in self.capabilities:
            return "skipped: no database_clock", "skipped: no database_clock"

        def call(side: Side) -> Any:
            store = side.store(w)
            if what == "empty_run_id":
                return store.start_run("", ref)
            if what == "long_run_id":
                return store.start_run("r" * (v.MAX_RUN_ID + 1), ref)
            if what == "long_idempotency_key":
                return store.start_run(run, ref, None, "k" * (v.MAX_KEY + 1))
            if what == "empty_dedup_key":
                return store.send_signal(run, "sig", None, "")
            if what == "naive_fire_at":
                claim = side.run_claim(w, run, "latest")
                if claim is None:
                    return "no claim held"
                decision = Decision(RunStatus.BLOCKED, timers=(NewTimer("naive", fire_at=datetime(2031, 1, 1)),))
                return store.commit_decision(claim, claim.revision, decision)
            if what == "nul_in_run_id":
                return store.start_run("a\x00b", ref)
            if what == "surrogate_in_dedup_key":
                return store.send_signal(run, "sig", None, "a\ud800b")
            if what == "nul_in_cancel_reason":
                return store.request_cancel(run, "a\x00b")
            if what == "test_clock_on_database_clock":
                clocked = side.database.open(side.workers[w].tenant, clock=ClockMode.DATABASE)
                try:
                    return clocked.advance_test_clock(timedelta(seconds=1))
                finally:
                    clocked.close()
            return store.start_run(run, ref, _REFUSED[what])

        return self._both(index, step, call)

    # ==================================================================
    # state comparison and invariants
    # ==================================================================
    def _state(self, side: Side) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for tenant, worker in side.tenants().items():
            store = _observer(side, worker)
            state[tenant] = observable_state(store)
            self._definition_state(store, tenant, state)
        return state

    def _definition_state(self, store: Any, tenant: str, state: dict[str, Any]) -> None:
        """The definitions the steps named, each version, and each name's listing (into ``state``)."""
        defs = {}
        for name in sorted(self._definitions):
            d = store.get_definition(name, "1")
            defs[name] = None if d is None else d.digest
        state[f"{tenant}#definitions"] = defs
        if self._versions:
            versions = {}
            for name, version in sorted(self._versions):
                d = store.get_definition(name, version)
                versions[f"{name}\x1f{version}"] = None if d is None else [d.digest, d.body.hex()]
            state[f"{tenant}#versions"] = versions
            names = sorted({name for name, _ in self._versions} | self._definitions | set(_LISTING_PROBES))
            state[f"{tenant}#listed"] = {name: [[d.version, d.digest, d.body.hex()]
                                                for d in store.list_definition_versions(name)] for name in names}

    def _compare_whole(self, index: int, step: dict[str, Any], at_end: bool = False) -> None:
        """Each tenant's whole state, adapter against reference, and the invariants on the adapter's."""
        where = "at the end of the example, the whole state: " if at_end else ""
        try:
            adapter_state = self._state(self.adapter)
        except KitError as exc:
            raise Divergence(index, step, "state", f"{where}reading the adapter's state failed: {exc!r}") from exc
        reference_state = self._state(self.reference)
        now = self.reference.store(CLOCK_WORKER).now()
        runs_only = {k: v for k, v in adapter_state.items() if "#" not in k}
        broken = violations(self._seen or None, runs_only, now, self._commits, self._acked)
        if broken:
            raise Divergence(index, step, "invariant", where + "; ".join(broken))
        difference = json_difference(adapter_state, reference_state, ("adapter has", "reference has"), "")
        if difference is not None:
            raise Divergence(index, step, "state", where + difference, None, None)
        self._seen = {tenant: dict(runs) for tenant, runs in runs_only.items()}

    def _touched_state(self, side: Side, keys: set[tuple[str, str]], definitions: set[str],
                       defined: set[tuple[str, str, str]]) -> dict[str, Any]:
        """The state of the runs ``keys`` names ((tenant, run id); a missing run left out) per tenant, as
        ``export_state(run_ids=...)`` or the reads show it; all definitions of the tenants ``definitions``
        names; and the versions ``defined`` names ((tenant, name, version), a define that changed nothing on
        the reference) with their names' listings."""
        state: dict[str, Any] = {}
        for tenant, worker in side.tenants().items():
            store = _observer(side, worker)
            wanted = [run for (t, run) in keys if t == tenant]
            state[tenant] = runs_state(store, wanted) if wanted else {}
            if tenant in definitions:
                self._definition_state(store, tenant, state)
            mine = sorted((name, version) for (t, name, version) in defined if t == tenant)
            if mine:
                found = {}
                for name, version in mine:
                    d = store.get_definition(name, version)
                    found[f"{name}\x1f{version}"] = None if d is None else [d.digest, d.body.hex()]
                    found[f"{name} listed"] = [[d.version, d.digest, d.body.hex()]
                                               for d in store.list_definition_versions(name)]
                state[f"{tenant}#defined"] = found
        return state

    def _compare_touched(self, index: int, step: dict[str, Any], base: Any) -> None:
        """The runs the step touched (:mod:`kit.machines.touched`), adapter against reference, and the
        invariants on the adapter's state of them (acknowledged writes against every run last seen)."""
        changed = touched(base, self._ref_db.state.tables)
        if changed.schema:
            self._compare_whole(index, step)
            return
        tenants = self.reference.tenants()
        keys = {key for key in changed.runs if key[0] in tenants} | named_runs(step, _TENANT_OF)
        definitions = set(changed.definitions)
        defined = {(tenant, name, version) for (tenant, name, version) in defined_versions(step, _TENANT_OF)
                   if tenant not in definitions}
        try:
            adapter_state = self._touched_state(self.adapter, keys, definitions, defined)
        except KitError as exc:
            raise Divergence(index, step, "state", f"reading the adapter's state failed: {exc!r}") from exc
        reference_state = self._touched_state(self.reference, keys, definitions, defined)
        now = self.reference.store(CLOCK_WORKER).now()
        before = {t: {run: self._seen[t][run] for (k, run) in keys if k == t and run in self._seen.get(t, {})}
                  for t in tenants}
        runs_only = {t: adapter_state[t] for t in tenants}
        broken = violations(before, runs_only, now, self._commits, set())
        for (t, run) in keys:
            seen = self._seen.setdefault(t, {})
            if run in runs_only[t]:
                seen[run] = runs_only[t][run]
            else:
                seen.pop(run, None)
        broken += acknowledged_violations(self._seen, self._acked)
        if broken:
            raise Divergence(index, step, "invariant", "; ".join(broken))
        difference = json_difference(adapter_state, reference_state, ("adapter has", "reference has"), "")
        if difference is not None:
            raise Divergence(index, step, "state", difference, None, None)


def deadlines(side: Side, target: str, only_run: str | None = None) -> list[datetime]:
    """Every lease expiry, wake time, scheduled timer or command deadline ``side`` shows (``target``)."""
    found: list[datetime] = []
    for worker in side.tenants().values():
        store = _observer(side, worker)
        for run in iter_pages(store):
            if only_run is not None and run.run_id != only_run:
                continue
            if target == "lease" and run.status is RunStatus.RUNNING and run.claim_expires_at:
                found.append(run.claim_expires_at)
            if target == "wake" and run.wake_at is not None and not run.status.terminal:
                found.append(run.wake_at)
            if target == "timer":
                found.extend(t.fire_at for t in store.list_timers(run.run_id) if t.status.value == "scheduled")
            if target == "command":
                for c in store.list_commands(run.run_id):
                    if c.status.value == "claimed" and c.claim_expires_at:
                        found.append(c.claim_expires_at)
                    elif c.status.value == "pending":
                        found.append(c.not_before)
    return found


def verify_schema(side: Side, tamper: bool) -> str:
    """``verify_schema()`` on ``side``'s database, against its migrations or (``tamper``) a changed last file."""
    migrations: list[MigrationSpec] = list(side.store(CLOCK_WORKER).migrations)
    if tamper:  # the last applied file changes after applying: its checksum differs
        last = migrations[-1]
        migrations[-1] = Migration(last.version, last.name, last.sql + "\n-- changed after applying\n")
    store = side.database.open(side.workers[CLOCK_WORKER].tenant, clock=side.clock, migrations=migrations)
    try:
        store.verify_schema()
        return "schema verified"
    finally:
        store.close()


def inner_failure_unit(side: Side, worker: str, run: str, payload: Any = None) -> str:
    """One unit of work on ``side``: start ``run``, then an inner block signals it and fails; the outer block
    swallows the failure and finishes ("committed" if the store let it)."""
    ref = DefinitionRef("wf", "1", Side.definition_digest("v1"))
    store = side.store(worker)
    with store.transaction():
        store.start_run(run, ref, payload)
        try:
            with store.transaction():
                store.send_signal(run, "sig", None, "uow")
                raise _InnerFailure()
        except _InnerFailure:
            pass
    return "committed"


class _InnerFailure(Exception):
    pass


class _Blocked(Exception):
    """Rolls back a paused claimer whose peer could not get past it."""


def _wait_us(us: int) -> None:
    """Return once ``us`` microseconds have passed on the host's monotonic clock (sleeping, not spinning)."""
    import time

    deadline = time.monotonic_ns() + us * 1000
    while (left := deadline - time.monotonic_ns()) > 0:
        time.sleep(left / 1e9)


def _observer(side: Side, worker: str) -> Any:
    return side.observer(side.workers[worker].tenant)


operation = Interpreter._operation
"""The store call a step stands for and what its worker remembers of the result (on any side)."""
