"""Stress replay bundles: save a deterministic run's violation, replay it, shrink it, narrate it.

A bundle (``bundle.json`` in the run's report folder) holds what a replay needs
and what it must find again: the backend spec (URL password redacted), the
workload settings (seed included), the participants and the schedule (the
participant chosen at each step), the store clock at the start and the end,
and each violated invariant with its witness and the history entries the
witness names.

* :func:`replay_bundle` runs the schedule again on a fresh database of the
  same backend and says whether each recorded invariant is violated again
  with the *same* witness (compared as JSON, history indexes and times
  included).
* :func:`shrink` looks for a shorter schedule on which the same invariant is
  still violated: first the shortest prefix (binary search from the step that
  completed the witness), then it drops chunks of choices, halving their size
  (a replay skips a recorded choice whose participant cannot move), within a
  time budget. Every candidate is a real replay on the backend.
* :func:`narrate` turns a schedule's replay into one line per turn (a
  participant's consecutive steps): who moved, the operation it was in, the
  statements it sent, and the outcome the history recorded.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.checkers import Status, Verdict
from kit.contract import Backend
from kit.contract.errors import ConfigurationError
from kit.discovery import redact
from kit.workload.config import StressConfig
from kit.workload.history import read_entries

__all__ = [
    "BUNDLE_KIND",
    "ReplayOutcome",
    "ShrinkResult",
    "load_stress_bundle",
    "narrate",
    "replay_bundle",
    "shrink",
    "witness_key",
    "witness_participants",
    "write_bundle",
]

BUNDLE_KIND = "stress"
VERSION = 1


def witness_key(verdict: Verdict | dict[str, Any]) -> str:
    """A verdict's witness as canonical JSON: equal keys mean the same operations, indexes and times."""
    witness = verdict.witness if isinstance(verdict, Verdict) else verdict.get("witness", ())
    return json.dumps(list(witness), sort_keys=True, default=str)


def _history_refs(witness: Sequence[dict[str, Any]]) -> set[int]:
    return {int(i) for w in witness for i in w.get("history", ())}


def write_bundle(folder: Path, spec: str, url: str | None, config: StressConfig, participants: Sequence[str],
                 schedule: Sequence[str], clock_us: tuple[int, int], verdicts: Sequence[Verdict],
                 history: Path, entries_at_step: Sequence[int] = ()) -> Path:
    """Save ``bundle.json`` in ``folder``: everything :func:`replay_bundle` needs (see the module docstring)."""
    invalid = [v for v in verdicts if v.status is Status.INVALID]
    refs = set().union(*(_history_refs(v.witness) for v in invalid)) if invalid else set()
    operations = [e for e in read_entries(history) if int(e.get("index", -1)) in refs]
    index = {name: i for i, name in enumerate(participants)}
    bundle = {
        "kind": BUNDLE_KIND, "version": VERSION, "backend": spec, "url": redact(url) if url else None,
        "config": config.to_json(), "seed": config.seed, "participants": list(participants),
        "schedule": [index[name] for name in schedule], "steps": len(schedule),
        "clock": {"start_us": clock_us[0], "end_us": clock_us[1]},
        "violations": [v.to_json() for v in invalid], "witness_operations": operations,
        "entries_at_step": list(entries_at_step),
    }
    path = folder / "bundle.json"
    path.write_text(json.dumps(bundle, separators=(",", ":"), default=str) + "\n", encoding="utf-8")
    return path


def load_stress_bundle(path: Path | str) -> dict[str, Any]:
    """A stress bundle, checked; bad files raise :class:`ConfigurationError` naming the fix."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the bundle {path}: {exc}: pass the bundle.json a stress run saved")
    if not isinstance(data, dict) or data.get("kind") != BUNDLE_KIND or "schedule" not in data:
        raise ConfigurationError(f"{path} is not a stress bundle: pass the bundle.json from a stress report folder")
    return data


def schedule_of(bundle: dict[str, Any]) -> list[str]:
    names = list(bundle["participants"])
    return [names[int(i)] for i in bundle["schedule"]]


@dataclass
class ReplayOutcome:
    """What one replay found, compared with what the bundle recorded."""

    reproduced: bool
    """Every recorded violation is violated again, with the same witness."""
    same_invariants: bool
    """Every recorded invariant is violated again (the witness may differ)."""
    verdicts: list[Verdict]
    result: Any
    differences: list[str] = field(default_factory=list)


def replay_schedule(backend: Backend, config: StressConfig, schedule: Sequence[str], root: Path | str,
                    spec: str = "", url: str | None = None) -> Any:
    from kit.workload.runner import run_stress

    det = StressConfig(**{**config.__dict__, "mode": "deterministic"})
    return run_stress(backend, det, report_root=root, spec=spec or None, url=url, schedule=schedule,
                      save_bundle=False)


def compare(bundle: dict[str, Any], verdicts: Sequence[Verdict]) -> tuple[bool, bool, list[str]]:
    """(same witnesses, same invariants, differences in words) of ``verdicts`` against the bundle's."""
    by_invariant = {v.invariant: v for v in verdicts}
    same_witness = same_invariant = True
    differences: list[str] = []
    for recorded in bundle.get("violations", ()):
        inv = int(recorded["invariant"])
        found = by_invariant.get(inv)
        if found is None or found.status is not Status.INVALID:
            same_invariant = same_witness = False
            differences.append(f"invariant {inv} ({recorded['name']}) is "
                               f"{found.status.value if found else 'missing'} this time")
        elif witness_key(found) != witness_key(recorded):
            same_witness = False
            differences.append(f"invariant {inv} is violated again, with another witness")
    return same_witness, same_invariant, differences


def replay_bundle(bundle: dict[str, Any], backend: Backend, root: Path | str | None = None) -> ReplayOutcome:
    """Run the bundle's schedule on ``backend`` and compare the verdicts with the recorded ones."""
    config = StressConfig.from_json(bundle["config"])
    with _folder(root) as where:
        result = replay_schedule(backend, config, schedule_of(bundle), where, spec=str(bundle.get("backend") or ""))
    same_witness, same_invariant, differences = compare(bundle, result.verdicts)
    if result.skipped:
        differences.append(f"{result.skipped} recorded choices were not eligible at their turn (the replay diverged)")
    return ReplayOutcome(same_witness and not result.skipped, same_invariant, list(result.verdicts), result,
                         differences)


class _folder:
    """``root`` itself, or a temporary folder removed afterwards."""

    def __init__(self, root: Path | str | None) -> None:
        self.root = root
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Path:
        if self.root is not None:
            Path(self.root).mkdir(parents=True, exist_ok=True)
            return Path(self.root)
        self._tmp = tempfile.TemporaryDirectory(prefix="kit-replay-")
        return Path(self._tmp.name)

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


@dataclass
class ShrinkResult:
    """The shortest schedule found that still violates ``invariant``, and how it was found."""

    invariant: int
    schedule: list[str]
    original: int
    replays: int
    seconds: float
    verdict: Verdict | None
    narration: list[str] = field(default_factory=list)


def shrink(bundle: dict[str, Any], backend: Backend, invariant: int | None = None, budget_s: float = 60.0,
           on_try: Callable[[int, bool], None] | None = None) -> ShrinkResult:
    """Shorten the bundle's schedule while ``invariant`` (default: the first recorded) stays violated.

    Bounded by ``budget_s`` of wall time (each candidate is a full replay); the last candidate
    that still violated the invariant is kept, so the result is always a failing schedule.
    """
    config = StressConfig.from_json(bundle["config"])
    spec = str(bundle.get("backend") or "")
    violations = bundle.get("violations") or []
    if not violations:
        raise ConfigurationError("the bundle records no violation: nothing to shrink")
    target = int(invariant if invariant is not None else violations[0]["invariant"])
    full = schedule_of(bundle)
    started = time.monotonic()
    replays = 0
    best: list[str] = full
    best_verdict: Verdict | None = None

    def fails(candidate: list[str]) -> Verdict | None:
        nonlocal replays
        replays += 1
        with _folder(None) as where:
            result = replay_schedule(backend, config, candidate, where, spec=spec)
        found = next((v for v in result.verdicts if v.invariant == target and v.status is Status.INVALID), None)
        if on_try is not None:
            on_try(len(candidate), found is not None)
        return found

    def out_of_time() -> bool:
        return time.monotonic() - started > budget_s

    # 1. the prefix up to the step that completed the witness (else the shortest failing prefix)
    end = _witness_step(bundle, target) or len(full)
    verdict = fails(full[:end]) if end < len(full) else None
    if verdict is not None:
        best, best_verdict = full[:end], verdict
    else:
        lo, hi = end, len(full)
        while lo + 1 < hi and not out_of_time():
            mid = (lo + hi) // 2
            verdict = fails(full[:mid])
            if verdict is not None:
                hi, best, best_verdict = mid, full[:mid], verdict
            else:
                lo = mid
    # 2. participants the witness does not name, dropped whole (most choices first)
    named = _named_participants(bundle, target)
    for name in sorted(set(best) - named, key=lambda n: (-best.count(n), n)):
        if out_of_time():
            break
        candidate = [c for c in best if c != name]
        verdict = fails(candidate)
        if verdict is not None:
            best, best_verdict = candidate, verdict
    # 3. chunks of choices, halving the chunk size
    chunk = max(1, len(best) // 8)
    while chunk >= 1 and not out_of_time():
        i, changed = 0, False
        while i < len(best) and not out_of_time():
            candidate = best[:i] + best[i + chunk:]
            verdict = fails(candidate) if candidate else None
            if verdict is not None:
                best, best_verdict, changed = candidate, verdict, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    if best_verdict is None and not out_of_time():
        best_verdict = fails(best)
    return ShrinkResult(target, best, len(full), replays, time.monotonic() - started, best_verdict)


_ROLES = {"d": "decider", "w": "worker", "t": "timers", "c": "client"}


def _participant_of(process: str) -> str | None:
    """The participant a history process belongs to (``d0.1~dup`` -> ``decider-0~dup``)."""
    base, dup, _ = process.partition("~")
    if base == "client":
        return "client-0" + ("~dup" if dup else "")
    match = re.fullmatch(r"([dwt])(\d+)\.\d+", base)
    if match is None:
        return None
    return f"{_ROLES[match.group(1)]}-{match.group(2)}" + ("~dup" if dup else "")


def witness_participants(witness: Sequence[dict[str, Any]]) -> set[str]:
    """The scheduler participants whose operations a witness names."""
    names = set()
    for w in witness:
        name = _participant_of(str(w.get("process", "")))
        if name is not None:
            names.add(name)
    return names


def _named_participants(bundle: dict[str, Any], invariant: int) -> set[str]:
    recorded = next((v for v in bundle.get("violations", ()) if int(v["invariant"]) == invariant), None)
    return witness_participants((recorded or {}).get("witness", ()))


def _witness_step(bundle: dict[str, Any], invariant: int) -> int | None:
    """The step count by which the history held every entry the witness names (from the recorded steps)."""
    steps = bundle.get("entries_at_step")
    recorded = next((v for v in bundle.get("violations", ()) if int(v["invariant"]) == invariant), None)
    if not steps or recorded is None:
        return None
    last = max(_history_refs(recorded.get("witness", ())), default=-1)
    for i, entries in enumerate(steps):
        if entries > last:
            return i + 1
    return None


def narrate(backend: Backend, config: StressConfig, schedule: Sequence[str], spec: str = "",
            focus: Sequence[str] = ()) -> tuple[list[str], Any]:
    """Replay ``schedule`` and tell it: one line per turn (a participant's consecutive steps).

    ``focus`` (participant names, e.g. from :func:`witness_participants`): keep only their turns,
    the clock's moves between them folded into one line each.
    """
    with _folder(None) as where:
        result = replay_schedule(backend, config, schedule, where, spec=spec)
        entries = list(read_entries(result.history))
    steps = result.steps_log
    return _narration(entries, steps, focus), result


def _narration(entries: list[dict[str, Any]], steps: Sequence[Any], focus: Sequence[str]) -> list[str]:
    """One line per turn; with ``focus``, only those participants' turns, the clock's moves between them
    folded into one line each."""
    by_index = {int(e["index"]): e for e in entries}
    stop = next((int(e["index"]) for e in entries if e.get("process") == "kit" and e.get("f") == "drain"),
                len(entries))
    turns: list[tuple[int, str, list[str], int, int]] = []
    for i, step in enumerate(steps):
        end = min(steps[i + 1].entries_before if i + 1 < len(steps) else stop, stop)
        label = _verb(step.label) + (" (blocked on a lock)" if step.blocked else "")
        if turns and turns[-1][1] == step.name:
            first, name, labels, start, _ = turns[-1]
            turns[-1] = (first, name, labels + [label], start, end)
        else:
            turns.append((i + 1, step.name, [label], step.entries_before, end))
    lines: list[str] = []
    clock_us, pending_clock, ticks, delivered = None, 0, 0, []
    for first, name, labels, start, end in turns:
        made = [by_index[i] for i in range(start, end) if i in by_index]
        for e in made:
            if e.get("process") == "nemesis":
                delivered.append(f"{e.get('f')} -> {e.get('value', {}).get('process', '?')}")
        ops = [e for e in made if e.get("type") in ("invoke", "ok", "fail", "info") and e.get("process") not in
               ("kit", "nemesis") and e.get("f") not in ("stop", "start")]
        if name == "clock" and focus:
            for e in ops:
                if e.get("f") == "now" and e.get("type") == "ok":
                    clock_us = clock_us if clock_us is not None else int(e.get("store_us") or e["value"])
                    pending_clock, ticks = int(e["value"]), ticks + 1
            continue
        if focus and name not in focus:
            continue
        if ticks and clock_us is not None:
            faults = f"; nemesis: {', '.join(delivered)}" if delivered else ""
            lines.append(f"      clock       store clock +{(pending_clock - clock_us) / 1000:.0f} ms "
                         f"({ticks} ticks){faults}")
            clock_us, ticks, delivered = pending_clock, 0, []
        what = _describe(ops, name)
        lines.append(f"{first:5d}. {name:<11} {_squash(labels)}{' -> ' + what if what else ''}")
    return lines


_TABLE = {"SELECT": r"\bFROM\s+(kit_\w+)", "DELETE": r"\bFROM\s+(kit_\w+)", "UPDATE": r"^\s*UPDATE\s+(kit_\w+)",
          "INSERT": r"\bINTO\s+(kit_\w+)"}


def _verb(label: str) -> str:
    """A statement in a few words: verb, table, lock (``SELECT kit_runs FOR UPDATE``)."""
    words = label.split()
    if not words:
        return "?"
    if words[0].islower():  # a wait, not a statement: begin (the thread's start), tick, sleep, pause, join
        return {"begin": "start"}.get(words[0], words[0])
    head = words[0].upper()
    if head in _TABLE:
        match = re.search(_TABLE[head], label, re.IGNORECASE)
        upper = label.upper()
        lock = " SKIP LOCKED" if "SKIP LOCKED" in upper else " FOR UPDATE" if "FOR UPDATE" in upper else ""
        return f"{head} {match.group(1) if match else ''}{lock}".replace("  ", " ").strip()
    if head == "BEGIN" and len(words) > 1 and words[1].upper() == "IMMEDIATE":
        return "BEGIN IMMEDIATE"
    return "BEGIN" if head == "BEGIN" else " ".join(words[:2])


def _squash(labels: list[str]) -> str:
    out: list[str] = []
    for label in labels:
        if out and out[-1].split(" x")[0] == label:
            base, _, count = out[-1].partition(" x")
            out[-1] = f"{base} x{int(count or 1) + 1}"
        else:
            out.append(label)
    text = "; ".join(out)
    return text if len(text) <= 90 else text[:87] + "..."


def _describe(ops: list[dict[str, Any]], name: str) -> str:
    parts: list[str] = []
    for e in ops:
        kind, f = e.get("type"), e.get("f")
        if f == "now" and e.get("process") == "clock":
            if kind == "ok":
                parts.append(f"store clock +{(int(e['value']) - int(e.get('store_us') or e['value'])) / 1000:.0f} ms")
            continue
        who = e.get("process", name)
        keys = " ".join(f"{k}={e[k]}" for k in ("run", "command", "gen") if e.get(k) is not None)
        if kind == "invoke":
            parts.append(f"{who} {f}({keys}) invoked")
        elif kind in ("ok", "fail", "info"):
            value = e.get("value", e.get("error", ""))
            shown = json.dumps(value, default=str, separators=(",", ":"))
            parts.append(f"{who} {f}({keys}) {kind.upper()} {shown[:100]}")
    return "; ".join(parts)
