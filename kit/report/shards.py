"""Shards of one run (``kit check --shard I/N`` in a CI matrix) merged back into one run per backend.

Guarantees: the runs of one sharded check (same backend spec, seed, profile, selection, workers and
shard count) become one run whose results are every shard's results, so its verdicts are those of one
unsharded run over the same checks and explorations. It is complete only when every shard ``1..N``
is there and complete; a missing shard leaves it incomplete, naming the shard to add. A shard given
twice is kept once, with a note.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kit.report.model import RunRecord

__all__ = ["merge_shards", "unsharded_command"]


def _shard(run: RunRecord) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d+)/(\d+)", str(run.meta.get("shard") or ""))
    if match is None or int(match.group(2)) < 2:
        return None
    return int(match.group(1)), int(match.group(2))


def _group_key(run: RunRecord, count: int) -> tuple[Any, ...]:
    meta = run.meta
    return (meta.get("spec"), meta.get("backend"), meta.get("url"), meta.get("seed"), meta.get("profile"),
            meta.get("keyword"), meta.get("workers"), count, meta.get("tool"))


def unsharded_command(command: str, workers: int, count: int) -> str:
    """The one ``kit check`` command that runs what shards ``1..count`` of ``command`` ran together."""
    command = re.sub(r"\s--shard\s+\S+", "", command)
    command = re.sub(r"\s--workers\s+\d+", "", command)
    total = workers * count
    return f"{command} --workers {total}" if total > 1 else command


def merge_shards(runs: Sequence[RunRecord]) -> tuple[list[RunRecord], list[str]]:
    """``runs`` with each sharded check's shards merged into one run (in the place of its first shard),
    and notes about shards given twice."""
    groups: dict[tuple[Any, ...], dict[int, RunRecord]] = {}
    order: list[RunRecord | tuple[Any, ...]] = []
    notes: list[str] = []
    for run in runs:
        shard = _shard(run)
        if shard is None:
            order.append(run)
            continue
        key = _group_key(run, shard[1])
        if key not in groups:
            groups[key] = {}
            order.append(key)
        if shard[0] in groups[key]:
            notes.append(f"shard {shard[0]}/{shard[1]} of {run.label} was given twice: kept the one from "
                         f"{groups[key][shard[0]].source or 'the first folder'}")
            continue
        groups[key][shard[0]] = run
    merged = [item if isinstance(item, RunRecord) else _merge(groups[item], item[7]) for item in order]
    return merged, notes


def _merge(shards: dict[int, RunRecord], count: int) -> RunRecord:
    parts = [shards[i] for i in sorted(shards)]
    first = parts[0]
    workers = int(first.meta.get("workers") or 1)
    meta = dict(first.meta)
    meta.update(shard=f"{len(parts)} of {count} shards merged", shards=[f"{i}/{count}" for i in sorted(shards)],
                command=unsharded_command(str(first.meta.get("command") or ""), workers, count),
                shard_commands=[str(p.meta.get("command") or "") for p in parts])
    run = RunRecord(id=first.id, meta=meta, source=", ".join(p.source for p in parts if p.source))
    for part in parts:
        run.results.extend(part.results)
        run.series.extend(part.series)
        run.events.extend(part.events)
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in shards]
    ends = [p.end or {} for p in parts]
    end: dict[str, Any] = {
        "finished_at": max((str(e.get("finished_at") or "") for e in ends), default=""),
        "duration_s": max((float(e.get("duration_s") or 0.0) for e in ends), default=0.0),
        "exit_code": max((int(e.get("exit_code") or 0) for e in ends), default=0),
        "collection_errors": [error for e in ends for error in e.get("collection_errors") or []],
        "unreachable": next((e.get("unreachable") for e in ends if e.get("unreachable")), None),
    }
    reasons = [f"shard {p.meta.get('shard')}: {p.incomplete_reason}" for p in parts if not p.complete]
    if missing:
        reasons.append(f"shard {', '.join(missing)} missing: pass every shard's report folder to kit report")
    if reasons:
        end["aborted"] = "; ".join(reasons)
    run.end = end
    return run
