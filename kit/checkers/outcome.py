"""Invariants 9 and 10: every run ends as its workflow determines; tenants never see each other.

* 9 -- after the faults stopped and the workload drained, every started run is
  terminal with the output its scenario determines (:func:`kit.runtime.scenarios.verify`),
  its history replays to exactly its recorded decisions (:func:`kit.runtime.check_replay`,
  up to ``replay_limit`` runs), and no run or command is still claimed by a
  worker life that crashed. A run still open when the bounded drain ended
  while work was still progressing is ``unknown`` (give it a longer ``--drain``);
  one still open after the workload went quiet is ``invalid``.
* 10 -- every run a tenant's store claimed, fired, started or listed was started
  in that tenant; another tenant's run id is ``not_found``.
"""

from __future__ import annotations

from typing import Any

from kit.checkers.evidence import Evidence
from kit.checkers.groups import Groups
from kit.checkers.model import Findings, Verdict
from kit.contract import Command, CommandStatus, DefinitionRef, Event, Run, RunStatus
from kit.workload.history import OK

__all__ = ["check_quiescent", "check_tenancy"]


def _run(row: dict[str, Any]) -> Run:
    definition = row["definition"]
    ref = definition if isinstance(definition, DefinitionRef) else DefinitionRef(**definition)
    return Run(**{**row, "definition": ref, "status": RunStatus(row["status"])})


def _commands(rows: list[dict[str, Any]]) -> list[Command]:
    return [Command(**{**r, "status": CommandStatus(r["status"])}) for r in rows]


def check_quiescent(ev: Evidence) -> Verdict:
    """Invariant 9: after faults stop and recovery drains, every run ends as its workflow determines."""
    from kit.runtime.determinism import check_replay
    from kit.runtime.scenarios import verify

    f = Findings(9, "quiescent_outcome")
    drain = ev.history.drain
    if drain is None:
        f.doubt("the history has no record of the drain (the run stopped early): run endings cannot be judged")
        return f.verdict("")
    started: Groups[tuple[str, str]] = ev.groups(2)  # every run started, kept where the history is
    for op in ev.history.ok("start"):
        started.add((op.tenant, str(op.run)), None)
    replayed = 0
    step = max(1, len(started) // max(1, ev.replay_limit))
    for i, (tenant, run_id) in enumerate(started.sorted_keys()):
        state = ev.state.run(tenant, run_id)
        if state is None:
            continue  # invariant 7 names it
        f.checked += 1
        row = state["run"]
        status = getattr(row["status"], "value", row["status"])
        if status not in ("completed", "failed", "cancelled"):
            witness = Evidence.run_witness(tenant, run_id, state, "status", "revision", "claim_owner",
                                           "claim_generation", "claim_expires_at", "wake_at")
            if drain.get("progressing"):
                f.doubt(f"run {run_id} was still {status} when the {drain.get('seconds', '?')} s drain bound ran out "
                        "while runs were still ending: rerun with a longer --drain")
            else:
                f.violation(f"run {run_id} is still {status} at revision {row['revision']} after the faults stopped "
                            f"and the workload had been quiet for {drain.get('quiet_s', '?')} s: it never ended",
                            witness, at=float("inf"))
            continue
        scenario = ev.scenario_of(run_id)
        if scenario is not None:
            problem = verify(scenario, _run(row), _commands(state["command_rows"]))
            if problem:
                f.violation(f"{problem} (the workflow determines its end from its input alone)",
                            Evidence.run_witness(tenant, run_id, state, "status", "output", "error"), at=float("inf"))
        if ev.registry is not None and i % step == 0 and replayed < ev.replay_limit:
            replayed += 1
            run = _run(row)
            check = check_replay(ev.registry.for_run(run), run, [Event(**e) for e in state["history"]])
            if check.problems:
                f.violation(f"run {run_id}'s history does not replay to its recorded decisions: {check.problems[0]}",
                            Evidence.run_witness(tenant, run_id, state), at=float("inf"))
    for tenant, run_id, state in ev.state.runs():
        row = state["run"]
        if row["claim_owner"] in ev.history.dead and getattr(row["status"], "value", row["status"]) == "running":
            f.violation(f"run {run_id} is still claimed by {row['claim_owner']}, a worker that crashed",
                        Evidence.run_witness(tenant, run_id, state), at=float("inf"))
        for command in state["command_rows"]:
            if getattr(command["status"], "value", command["status"]) == "claimed":
                owner = command["claim_owner"]
                dead = " (a worker that crashed)" if owner in ev.history.dead else ""
                f.violation(f"command {command['command_id']} of run {run_id} is still claimed by {owner}{dead} "
                            "after the workload drained", {"state": {"tenant": tenant, "run": run_id,
                                                                     "command": command["command_id"]}},
                            at=float("inf"))
    return f.verdict(f"{f.checked} runs ended as their workflows determine ({replayed} replayed exactly); "
                     "no claim is held by a crashed worker")


def check_tenancy(ev: Evidence) -> Verdict:
    """Invariant 10: tenants never see each other's data."""
    f = Findings(10, "tenant_isolation")
    started = ev.started()
    for op in ev.history.ops:
        if op.type != OK:
            continue
        named: list[str] = []
        if op.f in ("claim_runs", "claim_commands", "fire") and isinstance(op.value, list):
            named = [str(item["run"]) for item in op.value]
        elif op.f == "start" and isinstance(op.value, dict):
            f.checked += 1
            if op.value.get("tenant") != op.tenant or op.value.get("run") != op.run:
                f.violation(f"start of run {op.run} with key {(op.args or {}).get('key')!r} through tenant "
                            f"{op.tenant}'s store returned tenant {op.value.get('tenant')}'s run {op.value.get('run')}",
                            op.ref(), at=op.t)
        elif op.f == "probe":
            f.checked += 1
            f.violation(f"a signal to run {op.run}, which exists only in another tenant, was accepted through tenant "
                        f"{op.tenant}'s store ({op.where()})", op.ref(), at=op.t)
        for run_id in named:
            f.checked += 1
            if (op.tenant, run_id) not in started:
                f.violation(f"{op.process} reached run {run_id} through tenant {op.tenant}'s store ({op.f}, history "
                            f"#{op.index}), but that run was never started in tenant {op.tenant}", op.ref(), at=op.t)
    for op in ev.history.by_f.get("probe", ()):
        if op.type == "fail" and isinstance(op.value, dict) and op.value.get("outcome") != "not_found":
            f.violation(f"a signal to run {op.run}, which exists only in another tenant, was answered "
                        f"{op.value.get('outcome')} through tenant {op.tenant}'s store: it saw the run",
                        op.ref(), at=op.t)
    for tenant, run_id, state in ev.state.runs():
        f.checked += 1
        owner = state["run"]["tenant_id"]
        if owner != tenant or (tenant, run_id) not in started:
            f.violation(f"tenant {tenant}'s store lists run {run_id} (of tenant {owner}), which was never started "
                        f"in tenant {tenant}", Evidence.run_witness(tenant, run_id, state, "tenant_id"), at=float("inf"))
    return f.verdict(f"{f.checked} answers and rows: each tenant saw only its own runs")
