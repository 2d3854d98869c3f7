"""Invariants 5, 6 and 7: exactly-once consumption, deduplication, nothing acknowledged lost.

* 5 -- no signal, command result or fired timer was consumed by two
  acknowledged decisions; every item the store shows consumed was consumed by
  some decision the history has (acknowledged or unknown), a signal at the
  revision of the decision that consumed it; no timer fired twice or before its
  ``fire_at`` (upper store-time bound of the firing); and the fault machines' check.
* 6 -- one run per (tenant, idempotency key), one signal per (run, dedup key),
  one command and one timer per (run, operation key), in the store and in what
  it answered (two ``created`` starts, two ``committed`` sends of one key).
* 7 -- everything acknowledged is present (starts with their input, signals,
  commits, completions with their result, permanent failures) and nothing
  certainly rejected is.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

from kit.checkers.evidence import Evidence, plain
from kit.checkers.groups import Groups
from kit.checkers.index import Op, store_time
from kit.checkers.model import Verdict
from kit.contract.validation import json_equal
from kit.workload.history import OK

__all__ = ["check_consumption", "check_dedup", "check_durable"]

_CONSUMED = (("consume_signals", "signal"), ("consume_commands", "command result"), ("consume_timers", "fired timer"))


def check_consumption(ev: Evidence) -> Verdict:
    """Invariant 5: each signal, command result and fired timer is consumed at most once; timers fire once, on time."""
    f = ev.findings(5, "exactly_once_consumption")
    for tenant, run_id, state in ev.state.runs():
        f.checked += 1
        ok, unknown = ev.commits(tenant, run_id)
        by_item: dict[tuple[str, str], list[Op]] = defaultdict(list)
        possible: dict[str, set[str]] = defaultdict(set)
        for op in ok + unknown:
            for field, what in _CONSUMED:
                for item in op.args.get(field, ()):
                    possible[field].add(str(item))
                    if op.type == OK:
                        by_item[(what, str(item))].append(op)
        for (what, item), ops in by_item.items():
            if len(ops) > 1:
                a, b = ops[0], ops[1]
                f.violation(f"{what} {item} of run {run_id} was consumed twice: by revision "
                            f"{int(a.args['expected_revision']) + 1} ({a.where()}) and by revision "
                            f"{int(b.args['expected_revision']) + 1} ({b.where()})", a.ref(), b.ref(), at=b.t)
        for row in state["signal_rows"]:
            sid = str(row["signal_id"])
            if plain(row["status"]) != "consumed":
                continue
            if sid not in possible["consume_signals"]:
                f.violation(f"signal {sid} ({row['dedup_key']}) of run {run_id} is consumed at revision "
                            f"{row['consumed_revision']} but no decision in the history consumed it",
                            {"state": {"tenant": tenant, "run": run_id, "signal": _json_row(row)}}, at=float("inf"))
            elif len(by_item.get(("signal", sid), ())) == 1:
                op = by_item[("signal", sid)][0]
                v = int(op.args["expected_revision"]) + 1
                if row["consumed_revision"] != v:
                    f.violation(f"signal {sid} of run {run_id} was consumed by revision {v} ({op.where()}) but "
                                f"the store says revision {row['consumed_revision']}", op.ref(),
                                {"state": {"tenant": tenant, "run": run_id, "signal": _json_row(row)}}, at=op.t)
        for row in state["command_rows"]:
            if row["consumed"] and str(row["command_id"]) not in possible["consume_commands"]:
                f.violation(f"the result of command {row['command_id']} ({row['operation_key']}) of run {run_id} is "
                            "consumed but no decision in the history consumed it",
                            {"state": {"tenant": tenant, "run": run_id, "command": _json_row(row)}}, at=float("inf"))
        for row in state["timer_rows"]:
            if plain(row["status"]) == "consumed" and str(row["timer_id"]) not in possible["consume_timers"]:
                f.violation(f"timer {row['timer_id']} ({row['operation_key']}) of run {run_id} is consumed but no "
                            "decision in the history consumed it",
                            {"state": {"tenant": tenant, "run": run_id, "timer": _json_row(row)}}, at=float("inf"))
    fired = ev.groups(2)  # a timer may fire again long after: every firing's history index, by timer
    for op in ev.history.ok("fire"):
        for item in op.value or ():
            f.checked += 1
            fired.add((op.tenant, str(item["timer"])), op.index)
            upper = ev.history.store_upper(op.end_t)
            if upper is not None and upper < int(item["fire_at_us"]):
                f.violation(f"timer {item['timer']} of run {item['run']} was fired by {op.process} (history "
                            f"#{op.index}) no later than store time {store_time(upper)}, before its fire_at "
                            f"{store_time(int(item['fire_at_us']))}", op.ref(), at=op.t)
    for (tenant, timer), (a, b) in _twice(ev, fired):
        f.violation(f"timer {timer} (tenant {tenant}) fired twice: by {a.where()} and by {b.where()}",
                    a.ref(), b.ref(), at=b.t)
    return f.verdict(f"{f.checked} runs and firings: every input consumed at most once, every timer fired once, "
                     "never early")


def _twice(ev: Evidence, groups: Groups[Any]) -> Iterator[tuple[Any, tuple[Op, Op]]]:
    """The keys added more than once, in the order first added, with the operations at their first two
    history indexes (fetched again only for those keys)."""
    for key, indexes in groups.repeated():
        yield key, (ev.history.op_at(indexes[0]), ev.history.op_at(indexes[1]))


def _json_row(row: dict[str, object]) -> dict[str, object]:
    return {k: plain(v) for k, v in row.items()
            if k not in ("input", "result", "error", "payload")}


def check_dedup(ev: Evidence) -> Verdict:
    """Invariant 6: one run per idempotency key, one signal per dedup key, one command and timer per operation key."""
    f = ev.findings(6, "deduplication")
    for tenant, runs in ev.state.tenants.items():
        held = ev.groups(1)  # cross-run uniqueness: the runs holding each idempotency key
        for run_id, state in runs.items():
            f.checked += 1
            key = state["run"].get("idempotency_key")
            if key is not None:
                held.add((key,), run_id)
        for (key,), ids in held.repeated():
            f.violation(f"tenant {tenant} holds {len(ids)} runs ({', '.join(sorted(ids)[:3])}) for the one "
                        f"idempotency key {key!r}", {"state": {"tenant": tenant, "key": key, "runs": ids}},
                        at=float("inf"))
        del held
    created = ev.groups(2)  # cross-run uniqueness: every start answered created, by key
    for op in ev.history.ok("start"):
        if isinstance(op.value, dict) and op.value.get("created"):
            created.add((op.tenant, str((op.args or {}).get("key"))), op.index)
    for (tenant, key), (a, b) in _twice(ev, created):
        f.violation(f"two starts with idempotency key {key!r} in tenant {tenant} were both answered created: "
                    f"{a.where()} and {b.where()}", a.ref(), b.ref(), at=b.t)
    del created
    committed = ev.groups(3)
    for op in ev.history.ok("signal"):
        if isinstance(op.value, dict) and op.value.get("outcome") == "committed":
            committed.add((op.tenant, str(op.run), str((op.args or {}).get("dedup"))), op.index)
    for (tenant, run_id, dedup), (a, b) in _twice(ev, committed):
        f.violation(f"two sends of signal {dedup!r} to run {run_id} were both answered committed: "
                    f"{a.where()} and {b.where()}", a.ref(), b.ref(), at=b.t)
    return f.verdict(f"{f.checked} runs: no key is stored or answered twice")


def check_durable(ev: Evidence) -> Verdict:
    """Invariant 7: every acknowledged start, signal, completion and commit is present; nothing rejected is."""
    f = ev.findings(7, "acknowledged_durable")
    for op in ev.history.ok("start"):
        f.checked += 1
        state = ev.state.run(op.tenant, str(op.run))
        if state is not None and not json_equal(state["run"]["input"], (op.args or {}).get("input")):
            f.violation(f"run {op.run} was started with input {(op.args or {}).get('input')!r} ({op.where()}) but "
                        f"holds {state['run']['input']!r}", op.ref(), at=op.t)
    for tenant, run_id, state in ev.state.runs():
        ok, _ = ev.commits(tenant, run_id)
        revision = int(state["run"]["revision"])
        for op in ok:
            f.checked += 1
            v = int(op.args["expected_revision"]) + 1
            if v > revision:
                f.violation(f"run {run_id}: the commit of revision {v} by generation {op.gen} ({op.where()}) was "
                            f"acknowledged but the run is at revision {revision}", op.ref(),
                            Evidence.run_witness(tenant, run_id, state), at=op.t)
    for (tenant, command), ops in ev.history.by_command.items():
        run_id = str(ops[0].run)
        state = ev.state.run(tenant, run_id)
        row = next((r for r in (state or {}).get("command_rows", []) if str(r["command_id"]) == command), None)
        for op in ops:
            if op.type != OK or op.f not in ("complete", "fail"):
                continue
            f.checked += 1
            want = "completed" if op.f == "complete" else ("failed" if op.value == "failed" else None)
            if want is None:
                continue
            status = plain(row["status"]) if row else None
            if status != want:
                f.violation(f"command {command} of run {run_id} was acknowledged {want} ({op.where()}) but is "
                            f"{status or 'gone'}", op.ref(), at=op.t)
            elif want == "completed" and row and not json_equal(row["result"], (op.args or {}).get("result")):
                f.violation(f"command {command} of run {run_id} was completed with "
                            f"{(op.args or {}).get('result')!r} ({op.where()}) but holds {row['result']!r}",
                            op.ref(), at=op.t)
    # every signal's sends, judged together: (history index, refused?, answer) of each send, by signal
    sends = ev.groups(3)
    for op in ev.history.by_f.get("signal", ()):
        sends.add((op.tenant, str(op.run), str((op.args or {}).get("dedup"))),
                  (op.index, op.type == "fail", str(op.value)))
    for (tenant, run_id, dedup), answers in sends:
        if all(refused for _, refused, _ in answers):
            first = answers[0][0]
            refused_answers = Counter(answer for _, _, answer in answers)
            state = ev.state.run(tenant, run_id)
            if state is not None and dedup in state["signals"]:
                op = ev.history.op_at(first)
                f.violation(f"signal {dedup!r} to run {run_id} was refused every time "
                            f"({refused_answers}) yet it is stored", op.ref(), at=op.t)
    return f.verdict(f"{f.checked} acknowledged writes: all present, nothing refused was stored")
