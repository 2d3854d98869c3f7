"""The replay determinism check: a run's history, replayed, yields exactly its recorded decisions.

For every revision ``r`` of a run, :func:`check_replay` executes the module on
the events written before ``r``, with exactly the inputs that revision
consumed (read back from its resolution events), and requires the same
events (kind, operation key, payload as JSON values), a non-terminal status
before the last revision, and the run's final status, output and error at the
last one. Any difference is reported as a problem naming the revision.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kit.contract import JSON, Event, Run
from kit.contract.validation import json_equal
from kit.runtime import abi
from kit.runtime.module import Registry, WorkflowModule
from kit.runtime.replay import CommandResult, Inputs, SignalInput, execute

__all__ = ["ReplayCheck", "check_replay", "inputs_from_events"]


@dataclass(frozen=True)
class ReplayCheck:
    """The verdict for one run: ``ok`` when every revision replays exactly."""

    run_id: str
    revisions: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def inputs_from_events(events: Iterable[Event]) -> Inputs:
    """The inputs a recorded decision consumed, rebuilt from its resolution events."""
    results: dict[str, CommandResult] = {}
    fired: dict[str, str | None] = {}
    signals: list[SignalInput] = []
    cancel, reason = False, None
    for e in events:
        p = e.payload if isinstance(e.payload, dict) else {}
        key = abi.op_key(int(p.get("op", -1))) if isinstance(p.get("op"), int) else ""
        if e.kind == "command_completed":
            results[key] = CommandResult(True, p.get("result"))
        elif e.kind == "command_failed":
            results[key] = CommandResult(False, p.get("error"))
        elif e.kind == "timer_fired":
            fired[key] = None
        elif e.kind == "signal_received":
            signals.append(SignalInput(str(p.get("name")), p.get("payload")))
        elif e.kind == "cancel_delivered":
            cancel, reason = True, p.get("reason")
    return Inputs(
        command_results=results, fired_timers=fired, signals=signals, cancel=cancel, cancel_reason=reason
    )


def _describe(kind: str, key: str | None, payload: JSON) -> str:
    return f"{kind} {key} {payload!r}"


def check_replay(
    module: WorkflowModule, run: Run, history: Sequence[Event], fuel: int = abi.DEFAULT_FUEL
) -> ReplayCheck:
    """Replay every revision of ``run`` through ``module`` (refused with DigestMismatch if it changed)."""
    Registry([module]).for_run(run)
    problems: list[str] = []
    seqs = [e.seq for e in history]
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"history seq is {seqs[:10]}..., not 1..{len(seqs)}")
    for revision in range(1, run.revision + 1):
        before = [e for e in history if e.revision < revision]
        recorded = [e for e in history if e.revision == revision]
        plan = execute(module, run.input, before, inputs_from_events(recorded), fuel)
        got = [(e.kind, e.operation_key, e.payload) for e in plan.events]
        want = [(e.kind, e.operation_key, e.payload) for e in recorded]
        same = len(got) == len(want) and all(
            g[0] == w[0] and g[1] == w[1] and json_equal(g[2], w[2]) for g, w in zip(got, want)
        )
        if not same:
            problems.append(
                f"revision {revision}: recorded [{'; '.join(_describe(*w) for w in want)}] but replay "
                f"decided [{'; '.join(_describe(*g) for g in got)}]"
            )
        last = revision == run.revision
        if not last and plan.status.terminal:
            problems.append(f"revision {revision}: replay ended the run ({plan.status.value}) but it went on")
        if (
            last
            and run.status.terminal
            and (
                plan.status is not run.status
                or not json_equal(plan.output, run.output)
                or not json_equal(plan.error, run.error)
            )
        ):
            problems.append(
                f"revision {revision}: replay ends {plan.status.value} output={plan.output!r} "
                f"error={plan.error!r}, the run is {run.status.value} output={run.output!r} error={run.error!r}"
            )
    return ReplayCheck(run.run_id, run.revision, tuple(problems))
