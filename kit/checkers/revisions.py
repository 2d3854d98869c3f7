"""Invariants 1, 2 and 8: the history, the revisions, and terminal runs.

* 1 -- each run's history is ``seq`` 1..n (the fault machines' check), its
  events are in revision order, and every history a decider loaded is still a
  prefix of the final one (append-only, compared by digest).
* 2 -- each acknowledged commit wrote revision ``expected + 1``; no revision was
  written by two acknowledged commits; every revision up to the final one is
  accounted for by an acknowledged commit or one whose outcome is unknown; and
  each acknowledged revision holds exactly the events its decision appended.
* 8 -- once a commit ended a run, the run stays as that commit left it: nothing
  later is claimed, committed, signalled or cancelled; definitions never change.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import pairwise

from kit.checkers.evidence import Evidence, plain
from kit.checkers.index import Op
from kit.checkers.model import Findings, Verdict
from kit.contract.validation import json_equal
from kit.workload.history import OK, history_digest

__all__ = ["check_history", "check_revisions", "check_terminal"]

_TERMINAL = ("completed", "failed", "cancelled")


def check_history(ev: Evidence) -> Verdict:
    """Invariant 1: history per run is seq 1..n, contiguous, no duplicates, append-only."""
    f = ev.findings(1, "history_append_only")
    for tenant, run_id, state in ev.state.runs():
        f.checked += 1
        events = state["history"]
        revisions = [int(e["revision"]) for e in events]
        for before, after in pairwise(events):
            if int(after["revision"]) < int(before["revision"]):
                f.violation(f"run {run_id}: history event seq {after['seq']} was written by revision "
                            f"{after['revision']} after seq {before['seq']} of revision {before['revision']}: "
                            "events were not appended in commit order",
                            {"state": {"tenant": tenant, "run": run_id, "events": [before, after]}})
                break
        if revisions and max(revisions) > int(state["run"]["revision"]):
            f.violation(f"run {run_id} has history events of revision {max(revisions)} although it is at "
                        f"revision {state['run']['revision']}", Evidence.run_witness(tenant, run_id, state))
        digests: dict[int, str] = {}
        for op in ev.history.run_ops(tenant, run_id, "load"):
            if op.type != OK or not isinstance(op.value, dict):
                continue
            n, seen = int(op.value["history_len"]), str(op.value["history_hash"])
            if n > len(events):
                f.violation(f"run {run_id}: {op.process} loaded {n} history events (history #{op.index}) but only "
                            f"{len(events)} remain: events were removed", op.ref(), at=op.t)
                continue
            if n not in digests:
                digests[n] = history_digest(events[:n])
            if digests[n] != seen:
                f.violation(f"run {run_id}: the first {n} history events differ from what {op.process} loaded "
                            f"(history #{op.index}): the history was rewritten, not appended to", op.ref(), at=op.t)
    return f.verdict(f"{f.checked} runs: every history is seq 1..n, in revision order, and only ever grew")


def check_revisions(ev: Evidence) -> Verdict:
    """Invariant 2: each revision was written by exactly one committed decision."""
    f = Findings(2, "one_decision_per_revision")
    for tenant, run_id, state in ev.state.runs():
        f.checked += 1
        ok, unknown = ev.commits(tenant, run_id)
        revision = int(state["run"]["revision"])
        written: dict[int, list[Op]] = defaultdict(list)
        for op in ok:
            written[int(op.args["expected_revision"]) + 1].append(op)
        for v, ops in sorted(written.items()):
            if len(ops) > 1:
                a, b = ops[0], ops[1]
                f.violation(f"run {run_id} revision {v} was committed twice: by generation {a.gen} ({a.where()}) "
                            f"and by generation {b.gen} ({b.where()})", a.ref(), b.ref(), at=b.t)
        uncovered = [v for v in range(1, revision + 1) if v not in written]
        if len(uncovered) > len(unknown):
            f.violation(f"run {run_id} is at revision {revision} but {len(ok)} commits were acknowledged and only "
                        f"{len(unknown)} have unknown outcomes: revision(s) {uncovered[:5]} were written by no "
                        "decision the history accounts for", Evidence.run_witness(tenant, run_id, state),
                        at=float("inf"))
        per_revision = Counter(int(e["revision"]) for e in state["history"])
        for v, ops in written.items():
            expected = int(ops[0].args["events"])
            if len(ops) == 1 and v <= revision and per_revision.get(v, 0) != expected:
                f.violation(f"run {run_id} revision {v} holds {per_revision.get(v, 0)} history events but the "
                            f"decision committed as revision {v} by generation {ops[0].gen} ({ops[0].where()}) "
                            f"appended {expected}", ops[0].ref(), Evidence.run_witness(tenant, run_id, state),
                            at=ops[0].t)
    return f.verdict(f"{f.checked} runs: every revision was written by exactly one acknowledged or possible commit")


def _accepted_input(op: Op) -> bool:
    """A signal or cancellation the store accepted as new (not a duplicate, not refused)."""
    if op.f == "signal":
        return isinstance(op.value, dict) and op.value.get("outcome") == "committed"
    return op.f == "cancel" and op.value == "committed"


def _terminal_commit(ev: Evidence, tenant: str, run_id: str) -> Op | None:
    ended = [o for o in ev.history.run_ops(tenant, run_id, "commit")
             if o.type == OK and isinstance(o.args, dict) and o.args.get("next_status") in _TERMINAL]
    return min(ended, key=lambda o: int(o.args["expected_revision"]), default=None)


def check_terminal(ev: Evidence) -> Verdict:
    """Invariant 8: terminal runs never change; definitions never change."""
    f = Findings(8, "terminal_immutable")
    for (tenant, run_id) in ev.history.by_run:
        end = _terminal_commit(ev, tenant, run_id)
        if end is None:
            continue
        f.checked += 1
        v, status = int(end.args["expected_revision"]) + 1, str(end.args["next_status"])
        state = ev.state.run(tenant, run_id)
        if state is not None:
            run = state["run"]
            changed = [f"{name} {plain(run[name])!r}" for name, want in (
                ("status", status), ("revision", v), ("output", end.args.get("output")),
                ("error", end.args.get("error"))) if not json_equal(plain(run[name]), want)]
            if changed:
                f.violation(f"run {run_id} ended {status} at revision {v} (generation {end.gen}, {end.where()}) "
                            f"but now has {', '.join(changed)}",
                            end.ref(), Evidence.run_witness(tenant, run_id, state, "status", "revision", "output",
                                                            "error"), at=end.t)
        for op in ev.history.by_run.get((tenant, run_id), ()):
            if op.type != OK or op is end:
                continue
            if op.f == "commit" and int(op.args["expected_revision"]) >= v:
                f.violation(f"run {run_id} ended {status} at revision {v} ({end.where()}) and was then committed "
                            f"again as revision {int(op.args['expected_revision']) + 1} by generation {op.gen} "
                            f"({op.where()})", end.ref(), op.ref(), at=op.t)
            elif op.t > end.end_t and _accepted_input(op):
                f.violation(f"run {run_id} ended {status} at revision {v} ({end.where()}) and afterwards accepted "
                            f"a {op.f} ({op.where()})", end.ref(), op.ref(), at=op.t)
        for grant in ev.history.run_grants.get((tenant, run_id), ()):
            if grant.revision is not None and grant.revision >= v:
                f.violation(f"run {run_id} ended {status} at revision {v} ({end.where()}) and was then claimed "
                            f"as generation {grant.gen} by {grant.owner}", end.ref(), grant.op.ref(), at=grant.op.t)
    for op in ev.history.ok("define"):
        f.checked += 1
        key = (op.tenant, str(op.args.get("name")), str(op.args.get("version")))
        if key not in ev.state.definitions:
            continue
        stored = ev.state.definitions[key]
        digest = (op.value or {}).get("digest")
        if stored is None or stored[0] != digest or stored[1] != digest:
            f.violation(f"definition {key[1]!r} version {key[2]!r} of tenant {op.tenant} was stored with digest "
                        f"{str(digest)[:12]}... ({op.where()}) but now has "
                        f"{'none' if stored is None else stored[0][:12] + '... and a body hashing to ' + stored[1][:12]}",
                        op.ref(), at=op.t)
    return f.verdict(f"{f.checked} ended runs and definitions: none changed afterwards")
