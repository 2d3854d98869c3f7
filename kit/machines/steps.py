"""The step language: plain JSON records, and how each reads aloud.

A step is ``{"op": ..., ...}``. Workers are ``w0``..``w2`` (tenant a) and
``w3`` (tenant b); runs, keys and claims are named by natural keys, never by
store ids, so one step list replays unchanged on any backend. ``claim`` picks
the worker's ``latest`` or ``oldest`` (stale) claim on a run; ``claim_of``
sends another worker's claim (duplicate delivery from a second connection).

========================  =====================================================
op                        meaning
========================  =====================================================
define                    ensure_definition(name, "1", body label)
start                     start_run(run, input, idem)
signal / cancel           send_signal(run, key, payload) / request_cancel(run)
claim_runs                claim_runs(worker, lease_s, limit)
renew / release / load    fenced calls with the worker's claim on ``run``
commit                    commit_decision with ``decision`` (consumes the
                          worker's last snapshot; ``revision``: claim | stale | ahead)
claim_commands            claim_commands(worker, lease_s, limit)
heartbeat/complete/fail   fenced command calls with the claim on (run, key)
fire_timers               fire_due_timers(limit)
list_page                 list_runs(after, limit)
advance                   move the test clock by ``us`` microseconds
advance_to                land on a deadline (lease | timer | command | wake),
                          ``offset_us`` -1, 0 or +1 around it
crash                     the worker's process dies (it may come back as a zombie)
crash_during              the worker's session dies before statement ``at`` of ``inner``
lost_ack                  ``inner`` commits, the client sees an error and retries once
skew                      the worker's own clock is off by ``hours``
paused_claim              ``holder`` claims inside an open transaction; ``other``
                          claims meanwhile and must skip, not block
interleave                ``ops`` [A, B]: A parks at its COMMIT until B reaches point
                          ``at`` (start | first_lock); A's effects land first
race                      ``ops`` from different workers run at once on threads; with
                          ``release_claims`` the claims they took are given back after
clock_probe               the database clock read twice in one transaction must move,
                          and be the server's time (within an hour of the host's)
verify_schema             verify_schema(), optionally against a ``tamper``-ed file
uow_inner_failure         a unit of work whose inner block fails, swallowed outside
unit                      a unit of work with after-commit callbacks, a nested block,
                          lock_run, a claim and a commit inside; ``mode``: commit |
                          outer_fails | commit_fails (its COMMIT fails)
read_back                 a run through the individual reads (get_run, a history page,
                          list_commands/signals/timers, list_runs by status)
schema_drift              verify against code one file behind (``newer_schema``) or
                          ahead (``pending``), or migrate() again (``again``)
refused                   a call refused up front (``what``: empty or over-long key,
                          non-JSON or too deep value, U+0000 or a lone surrogate in a
                          payload, key or cancel reason, naive timestamp, test clock on
                          database clock)
poke                      ``inner`` (a write, a load or ``read_back``), then the caller
                          scribbles over every object it gave and got back
deep_payload              a payload nested to the depth limit written and read back from
                          a shallow and a deep stack (in a tenant no worker reads)
beside_unit               ``worker`` holds a unit of work open; ``other`` writes
                          (``what``: start | signal to ``run``) beside it on the thread
fresh_schema              in a database provisioned for the step, never migrated:
                          ``variant`` absent | concurrent_migrate | failed_migration
========================  =====================================================
"""

from __future__ import annotations

from typing import Any

__all__ = ["OPS", "REQUIRED", "describe", "step_problem"]


class _Key(str):
    """A run id that narrates itself shortened (see ``_k``)."""

    def __repr__(self) -> str:
        return _k(str(self))

OPS = (
    "define", "start", "signal", "cancel", "claim_runs", "renew", "release", "load", "commit",
    "claim_commands", "heartbeat", "complete", "fail", "fire_timers", "list_page", "advance",
    "advance_to", "crash", "crash_during", "lost_ack", "skew", "paused_claim", "race",
    "verify_schema", "uow_inner_failure", "clock_probe", "interleave", "unit", "read_back", "schema_drift",
    "refused", "poke", "deep_payload", "beside_unit", "fresh_schema",
)


def _k(value: Any) -> str:
    """A key as narrated: long keys shortened to their ends and length (the step JSON keeps them whole)."""
    if isinstance(value, str) and len(value) > 24:
        return repr(f"{value[:4]}...{value[-3:]}") + f"[{len(value)} chars]"
    return repr(value)


def describe(step: dict[str, Any]) -> str:
    """One readable line for a step (used in narrations and divergence messages)."""
    op, w = step.get("op"), step.get("worker", "")
    run = _Key(step.get("run", ""))
    claim = f"{step.get('claim', 'latest')} claim" + (f" of {step['claim_of']}" if step.get("claim_of") else "")
    if op == "define":
        version = f" version {step['version']!r}" if step.get("version", "1") != "1" else ""
        wrong = f" and the digest of {step['digest_of']!r}" if step.get("digest_of") else ""
        return f"{w} ensures definition {step['name']!r}{version} with body {step['body']!r}{wrong}"
    if op == "start":
        idem = f" idem {_k(step['idem'])}" if step.get("idem") else ""
        return f"{w} starts {run!r}{idem}"
    if op == "signal":
        return f"{w} signals {run!r} key {_k(step['key'])}"
    if op == "cancel":
        return f"{w} requests cancel of {run!r}"
    if op == "claim_runs":
        return f"{w} claims up to {step.get('limit', 1)} runs (lease {step.get('lease_s', 30)} s)"
    if op in ("renew", "release", "load"):
        return f"{w} {op}s {run!r} with its {claim}"
    if op == "commit":
        d = step["decision"]
        parts = [d["status"]]
        for key in ("events", "commands", "timers"):
            if d.get(key):
                parts.append(f"+{len(d[key])} {key}")
        return f"{w} commits {run!r} ({claim}, revision {step.get('revision', 'claim')}): {', '.join(parts)}"
    if op == "claim_commands":
        queues = f" of queues {step['queues']!r}" if step.get("queues") is not None else ""
        return f"{w} claims up to {step.get('limit', 1)} commands{queues}"
    if op in ("heartbeat", "complete", "fail"):
        return f"{w} {op}s command {step['key']!r} of {run!r} with its {claim}"
    if op == "fire_timers":
        return f"{w} fires due timers (limit {step.get('limit', 10)})"
    if op == "list_page":
        return f"{w} lists runs after {step.get('after')!r} (limit {step.get('limit', 2)})"
    if op == "advance":
        return f"clock +{step['us']} us"
    if op == "advance_to":
        whose = f" of {step['run']!r}" if step.get("run") else f" #{step.get('which', 0)}"
        return f"clock to {step['target']} deadline{whose} {step.get('offset_us', 0):+d} us"
    if op == "crash":
        return f"{w} crashes"
    if op == "crash_during":
        return f"session dies before statement #{step['at']} of: {describe(step['inner'])}"
    if op == "lost_ack":
        return f"ack lost, then retried: {describe(step['inner'])}"
    if op == "skew":
        return f"{w}'s clock skews {step['hours']:+d} h"
    if op == "paused_claim":
        return f"{step['holder']} claims in an open transaction while {step['other']} claims"
    if op == "interleave":
        a, b = step["ops"]
        return f"{describe(a)}, paused before its commit while: {describe(b)} (up to its {step.get('at', 'first_lock')})"
    if op == "race":
        return "at once: " + " | ".join(describe(s) for s in step["ops"])
    if op == "clock_probe":
        return "read the database clock twice in one transaction"
    if op == "verify_schema":
        return "verify schema" + (" against a tampered file" if step.get("tamper") else "")
    if op == "uow_inner_failure":
        return f"{w} runs a unit of work on {run!r} whose inner block fails"
    if op == "read_back":
        return f"{w} reads {run!r} back through the individual reads"
    if op == "refused":
        return f"{w} makes a call the contract refuses up front ({step['what']})"
    if op == "schema_drift":
        return f"schema drift: {step['variant']}"
    if op == "poke":
        return f"then the caller scribbles over every object given and returned: {describe(step['inner'])}"
    if op == "deep_payload":
        return f"{w} writes a payload nested to the depth limit and reads it back from a shallow and a deep stack"
    if op == "beside_unit":
        return (f"{w} holds a unit of work open while {step['other']} writes beside it on the same thread "
                f"({step.get('what', 'start')} near {run!r})")
    if op == "fresh_schema":
        return f"in a database never migrated: {step['variant']}"
    if op == "unit":
        ends = {"commit": "commits", "outer_fails": "fails after its nested block", "commit_fails": "fails at COMMIT"}
        return f"{w} runs a unit of work with callbacks on {run!r} that {ends.get(step.get('mode', 'commit'), '?')}"
    return str(step)


#: The fields each op needs (besides ``op``); ``inner`` and ``ops`` hold steps themselves.
REQUIRED: dict[str, tuple[str, ...]] = {
    "define": ("worker", "name", "body"), "start": ("worker", "run"), "signal": ("worker", "run", "key"),
    "cancel": ("worker", "run"), "claim_runs": ("worker",), "renew": ("worker", "run"),
    "release": ("worker", "run"), "load": ("worker", "run"), "commit": ("worker", "run", "decision"),
    "claim_commands": ("worker",), "heartbeat": ("worker", "run", "key"), "complete": ("worker", "run", "key"),
    "fail": ("worker", "run", "key"), "fire_timers": ("worker",), "list_page": ("worker",), "advance": ("us",),
    "advance_to": ("target",), "crash": ("worker",), "crash_during": ("at", "inner"), "lost_ack": ("inner",),
    "skew": ("worker", "hours"), "paused_claim": ("holder", "other"), "race": ("ops",),
    "verify_schema": (), "uow_inner_failure": ("worker", "run"), "clock_probe": (), "interleave": ("ops",),
    "unit": ("worker", "run", "mode"), "read_back": ("worker", "run"), "schema_drift": ("variant",),
    "refused": ("worker", "what"), "poke": ("inner",), "deep_payload": ("worker",),
    "beside_unit": ("worker", "other", "run"), "fresh_schema": ("variant",),
}
_WORKER_FIELDS = ("worker", "holder", "other", "claim_of")


def step_problem(step: object, where: str, workers: tuple[str, ...]) -> str | None:
    """Why ``step`` is not a step the interpreter can apply (``where`` names it), or None."""
    if not isinstance(step, dict):
        return f"{where} is a {type(step).__name__}, not an object with an 'op'"
    op = step.get("op")
    if op not in REQUIRED:
        return f"{where} has unknown op {op!r} (known: {', '.join(OPS)})"
    missing = [name for name in REQUIRED[op] if name not in step]
    if missing:
        return f"{where} ({op}) lacks field {', '.join(repr(m) for m in missing)}"
    for name in _WORKER_FIELDS:
        if name in step and step[name] not in workers:
            return f"{where} ({op}) names worker {step[name]!r}; workers are {', '.join(workers)}"
    if op == "commit" and not (isinstance(step["decision"], dict) and "status" in step["decision"]):
        return f"{where} (commit) has a decision without a 'status'"
    if op in ("crash_during", "lost_ack", "poke"):
        inner = step["inner"]
        if isinstance(inner, dict) and "worker" not in inner:
            return f"{where}.inner lacks field 'worker'"
        return step_problem(inner, f"{where}.inner", workers)
    if op in ("race", "interleave"):
        ops = step["ops"]
        if not isinstance(ops, list) or len(ops) < 2 or (op == "interleave" and len(ops) != 2):
            return f"{where} ({op}) needs 'ops', a list of {'two' if op == 'interleave' else 'two or more'} steps"
        for i, sub in enumerate(ops):
            problem = step_problem(sub, f"{where}.ops[{i}]", workers)
            if problem is not None:
                return problem
    return None
