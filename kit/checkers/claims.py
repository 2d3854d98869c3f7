"""Invariants 3 and 4: no stale effect, and at most one live claim per run and per command.

Both rest on facts a correct store makes unavoidable:

* A claim reports the run's revision, so a commit by generation ``g`` that
  wrote revision ``v`` must have happened before any claim of a later
  generation, and that claim must report a revision of at least ``v``.
* A completed (or permanently failed) command is never claimable again.
* Claims carry their store times exactly (``expires_at = now + lease``); a later
  generation granted before an earlier one's expiry, while that one neither
  committed nor was released, means two live claims at once.
* Store-time bounds come from clock samples: an operation invoked when the
  store clock had provably passed its lease's latest possible expiry was stale.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise

from kit.checkers.evidence import Evidence
from kit.checkers.index import Grant, Op, store_time
from kit.checkers.model import Findings, Verdict
from kit.workload.history import OK

__all__ = ["check_no_stale_effect", "check_single_live_claim"]

_ENDS_RUN_CLAIM = ("commit", "release")
_ENDS_COMMAND_CLAIM = ("complete", "fail")


def _latest_expiry(ev: Evidence, grant: Grant, renewals: Iterable[Op], before: Op) -> int | None:
    """The latest store time ``grant``'s lease can have lasted until, as ``before`` was invoked.

    Renewals (acknowledged or unknown) invoked before ``before`` ended may have
    extended it to (their latest possible store time) + lease; ``None`` when
    such a renewal has no upper store-time bound (no later clock sample) or no recorded lease.
    """
    expiry = grant.expires_us
    for renewal in renewals:
        if renewal is before or renewal.t >= before.end_t or renewal.gen != grant.gen:
            continue
        if renewal.type not in (OK, "info", "pending"):
            continue
        upper = ev.history.store_upper(renewal.end_t)
        lease_us = (renewal.args or {}).get("lease_us") if isinstance(renewal.args, dict) else None
        if upper is None or lease_us is None:
            return None
        expiry = max(expiry, upper + int(lease_us))
    return expiry


def _expired(f: Findings, ev: Evidence, what: str, op: Op, grant: Grant | None, renewals: Sequence[Op]) -> None:
    if grant is None or op.store_lo is None:
        return
    expiry = _latest_expiry(ev, grant, renewals, op)
    if expiry is not None and op.store_lo >= expiry:
        f.violation(
            f"{what}: generation {op.gen}'s {op.f} ({op.where()}) was accepted although it was invoked at store "
            f"time {store_time(op.store_lo)} or later, after its lease had expired at {store_time(expiry)}",
            grant.op.ref(), op.ref(), at=op.t)


def check_no_stale_effect(ev: Evidence) -> Verdict:
    """Invariant 3: every accepted commit, completion or renewal came from the current, live claim."""
    f = Findings(3, "no_stale_effect")
    for (tenant, run_id), ops in ev.history.by_run.items():
        grants = ev.history.run_grants.get((tenant, run_id), [])
        first = {g.gen: g for g in reversed(grants)}
        renewals = [o for o in ops if o.f == "renew"]
        for op in ops:
            if op.type != OK or op.f not in ("commit", "renew", "release") or op.gen is None:
                continue
            f.checked += 1
            what = f"run {run_id}"
            for newer in (g for g in grants if g.gen > op.gen):
                if op.f == "commit":
                    written = int(op.args["expected_revision"]) + 1
                    if newer.revision is not None and newer.revision < written:
                        f.violation(
                            f"run {run_id} revision {written} was committed by generation {op.gen} ({op.where()}) "
                            f"after generation {newer.gen} had been granted to {newer.owner} at store time "
                            f"{store_time(newer.granted_us)} (that claim saw revision {newer.revision})",
                            newer.op.ref(), op.ref(), at=op.t)
                elif newer.op.end_t < op.t:
                    f.violation(
                        f"run {run_id}: generation {op.gen}'s {op.f} ({op.where()}) was accepted after generation "
                        f"{newer.gen} had been granted to {newer.owner} at store time {store_time(newer.granted_us)}",
                        newer.op.ref(), op.ref(), at=op.t)
            _expired(f, ev, what, op, first.get(op.gen), renewals)
    for (tenant, command), ops in ev.history.by_command.items():
        grants = ev.history.command_grants.get((tenant, command), [])
        first = {g.gen: g for g in reversed(grants)}
        beats = [o for o in ops if o.f == "heartbeat"]
        for op in ops:
            if op.type != OK or op.f not in ("complete", "fail", "heartbeat") or op.gen is None:
                continue
            f.checked += 1
            what = f"command {command} (run {op.run})"
            final = op.f == "complete" or (op.f == "fail" and op.value == "failed")
            verb = {"complete": "completed", "fail": "failed", "heartbeat": "renewed"}[op.f]
            for newer in (g for g in grants if g.gen > op.gen):
                if newer.op.end_t < op.t:
                    sentence = (f"{what} was {verb} by generation {op.gen} ({op.where()}) after generation "
                                f"{newer.gen} had been granted to {newer.owner} at store time "
                                f"{store_time(newer.granted_us)}")
                elif final and op.end_t < newer.op.t:
                    sentence = (f"{what} was granted again as generation {newer.gen} to {newer.owner} at store time "
                                f"{store_time(newer.granted_us)} after generation {op.gen} ({op.where()}) had "
                                f"{verb} it: a finished command was claimable")
                elif final:
                    sentence = (f"{what} was {verb} by generation {op.gen} ({op.where()}) while generation "
                                f"{newer.gen} was being granted to {newer.owner}, and both were accepted: in either "
                                "order one of them broke the fence")
                else:
                    continue
                f.violation(sentence, newer.op.ref(), op.ref(), at=max(op.t, newer.op.t))
            _expired(f, ev, what, op, first.get(op.gen), beats)
    return f.verdict(f"all {f.checked} accepted commits, completions, failures and renewals came from the "
                     "current, live claim")


def _ended(ops: Sequence[Op], fs: tuple[str, ...]) -> Callable[[int], bool]:
    ended = {o.gen for o in ops if o.f in fs and o.type != "fail"}
    return lambda gen: gen in ended


def _check_grants(f: Findings, what: str, grants: Sequence[Grant], ended: Callable[[int], bool]) -> None:
    by_gen: dict[int, list[Grant]] = defaultdict(list)
    for g in grants:
        by_gen[g.gen].append(g)
    for gen, same in by_gen.items():
        if len(same) > 1:
            a, b = same[0], same[1]
            f.violation(f"{what} generation {gen} was granted twice: to {a.owner} at store time "
                        f"{store_time(a.granted_us)} and to {b.owner} at {store_time(b.granted_us)}",
                        a.op.ref(), b.op.ref(), at=b.op.t)
    ordered = sorted(grants, key=lambda g: g.op.t)
    for i, later in enumerate(ordered):
        for earlier in ordered[:i]:
            if earlier.op.end_t < later.op.t and later.gen <= earlier.gen:
                f.violation(f"{what} generation went back from {earlier.gen} ({earlier.owner}) to {later.gen} "
                            f"({later.owner}) although the second claim began after the first was granted",
                            earlier.op.ref(), later.op.ref(), at=later.op.t)
    chain = sorted((same[0] for same in by_gen.values()), key=lambda g: g.gen)
    for a, b in pairwise(chain):
        if b.granted_us < a.expires_us and not ended(a.gen):
            f.violation(f"{what} generation {b.gen} was granted to {b.owner} at store time "
                        f"{store_time(b.granted_us)} while generation {a.gen} ({a.owner}, granted at "
                        f"{store_time(a.granted_us)}) held a live lease until {store_time(a.expires_us)} and had "
                        "neither committed nor been released", a.op.ref(), b.op.ref(), at=b.op.t)


def check_single_live_claim(ev: Evidence) -> Verdict:
    """Invariant 4: at most one live claim per run and per command at any instant; generations only grow."""
    f = Findings(4, "single_live_claim")
    for (tenant, run_id), grants in ev.history.run_grants.items():
        f.checked += len(grants)
        _check_grants(f, f"run {run_id}", grants, _ended(ev.history.by_run.get((tenant, run_id), []),
                                                          _ENDS_RUN_CLAIM))
        state = ev.state.run(tenant, run_id)
        top = max(g.gen for g in grants)
        if state is not None and int(state["run"]["claim_generation"]) < top:
            f.violation(f"run {run_id} ends at claim generation {state['run']['claim_generation']} although "
                        f"generation {top} was granted: generations went down",
                        Evidence.run_witness(tenant, run_id, state), at=float("inf"))
    for (tenant, command), grants in ev.history.command_grants.items():
        f.checked += len(grants)
        run_id = grants[0].run
        _check_grants(f, f"command {command} (run {run_id})", grants,
                      _ended(ev.history.by_command.get((tenant, command), []), _ENDS_COMMAND_CLAIM))
        state = ev.state.run(tenant, run_id)
        rows = [r for r in (state or {}).get("command_rows", []) if str(r["command_id"]) == command]
        top = max(g.gen for g in grants)
        if rows and int(rows[0]["claim_generation"]) < top:
            f.violation(f"command {command} (run {run_id}) ends at claim generation {rows[0]['claim_generation']} "
                        f"although generation {top} was granted: generations went down", at=float("inf"))
    return f.verdict(f"{f.checked} claims: never two live at once on one run or command, generations only grew")
