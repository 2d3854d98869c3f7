"""CONTRACT.md section 6, checked on an adapter's state after every step.

Each check compares the state after a step with the state before it (and with
what the interpreter saw acknowledged) and returns sentences explaining every
contradiction; an empty list means the invariants hold. The reference engine
comparison catches any difference; these name *which promise* broke.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kit.contract.json_exact import json_equal

__all__ = ["acknowledged_violations", "state_violations", "violations"]

State = dict[str, dict[str, Any]]
"""tenant -> run id -> run state (see kit.inspect.run_state), plus raw key lists."""


def violations(
    before: State | None,
    after: State,
    now: datetime,
    committed_decisions: dict[tuple[str, str], int],
    acknowledged: set[tuple[str, str, str]],
) -> list[str]:
    """Every invariant, with the exact count of committed decisions a model knows (invariant 2)."""
    found: list[str] = []
    for tenant, runs in after.items():
        for run_id, state in runs.items():
            if state is None:
                continue
            expected = committed_decisions.get((tenant, run_id), 0)
            if state["run"]["revision"] != expected:
                found.append(
                    f"run {run_id!r} (tenant {tenant}): revision is {state['run']['revision']} but {expected} "
                    "decisions were committed (invariant 2)"
                )
    return state_violations(before, after, now) + found + acknowledged_violations(after, acknowledged)


def state_violations(before: State | None, after: State, now: datetime) -> list[str]:
    """What the state itself (and the state before the step) contradicts, with no model of the store:
    history contiguous and append-only, keys unique, no early timer, generations only grow, terminal runs
    unchanged, consumed signals stay consumed."""
    found: list[str] = []
    for tenant, runs in after.items():
        for run_id, state in runs.items():
            if state is None:
                continue
            run = state["run"]
            where = f"run {run_id!r} (tenant {tenant})"
            seqs = [e["seq"] for e in state["history"]]
            if seqs != list(range(1, len(seqs) + 1)):
                found.append(f"{where}: history seq is {seqs}, not 1..{len(seqs)} without gaps (invariant 1)")
            for kind in ("signals", "commands", "timers"):
                keys = state["raw_keys"][kind]
                if len(keys) != len(set(keys)):
                    dup = sorted({k for k in keys if keys.count(k) > 1})
                    found.append(f"{where}: {kind} keys {dup} are stored more than once (invariant 6)")
            for timer in state["timers"].values():
                if timer["status"] != "scheduled" and timer["status"] != "cancelled" and timer["fire_at"] > now:
                    found.append(f"{where}: timer {timer['operation_key']!r} fired before its fire_at (invariant 5)")
            old = (before or {}).get(tenant, {}).get(run_id)
            if old is None:
                continue
            old_run = old["run"]
            if run["claim_generation"] < old_run["claim_generation"]:
                found.append(
                    f"{where}: claim generation went from {old_run['claim_generation']} down to "
                    f"{run['claim_generation']} (invariant 4)"
                )
            if old_run["status"] in ("completed", "failed", "cancelled") and not json_equal(_comparable(old), _comparable(state)):
                found.append(f"{where}: it was terminal ({old_run['status']}) and still changed (invariant 8)")
            if not json_equal(state["history"][: len(old["history"])], old["history"]):
                found.append(f"{where}: existing history entries were rewritten (invariant 1: append-only)")
            for key, sig in old["signals"].items():
                new = state["signals"].get(key)
                if sig["status"] == "consumed" and (new is None or new["status"] != "consumed"
                                                    or new["consumed_revision"] != sig["consumed_revision"]):
                    found.append(f"{where}: signal {key!r} was consumed, then changed (invariant 5)")
    return found


def acknowledged_violations(after: State, acknowledged: set[tuple[str, str, str]]) -> list[str]:
    """Acknowledged starts and signals (``(tenant, "run"|"signal", key)``) missing from ``after`` (invariant 7)."""
    found: list[str] = []
    for tenant, kind, key in sorted(acknowledged):
        runs = after.get(tenant, {})
        if kind == "run" and runs.get(key) is None:
            found.append(f"acknowledged start of run {key!r} (tenant {tenant}) is missing (invariant 7)")
        if kind == "signal":
            run_id, _, dedup = key.partition("\x1f")
            state = runs.get(run_id)
            if state is None or dedup not in state["signals"]:
                found.append(f"acknowledged signal {dedup!r} to run {run_id!r} is missing (invariant 7)")
    return found


def _comparable(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "raw_keys"}
