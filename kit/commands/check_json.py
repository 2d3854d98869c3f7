"""``kit check --json``: one JSON object on stdout for scripts (the human output goes to stderr).

The object (``format`` 1; a new key may be added, none is removed or changes meaning within a format)::

    {"format": 1, "kit_version": "0.1.0", "backend": "sqlite", "description": "SQLite 3.40.1 ...",
     "seed": 20261201, "profile": "quick", "machine": "reference",
     "verdict": "pass" | "fail" | "interrupted", "ok": true, "exit_code": 0, "duration_s": 17.1,
     "totals": {"passed": 227, "failed": 0, "not_promised": 0, "skipped": 6},
     "failures": [{"check": "runs.pagination_is_stable", "area": "runs", "guarantee": "...",
                   "message": "...", "contract": "docs/CONTRACT.md section 3 (Runs)", "reproduce": ["kit ..."]}],
     "report": "/abs/path/reports/<timestamp>-sqlite" | null}

``totals`` counts as the table does: ``failed`` includes errors; ``skipped`` holds unsupported, not
reachable and expected failures; ``not_promised`` the checks of promises the store does not make.
Bad input (exit 2) and an unreachable backend (exit 3) print no object: their one line is on stderr.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from kit import __version__

__all__ = ["JSON_FORMAT", "summary", "write_summary"]

JSON_FORMAT = 1


def summary(run: Any, args: argparse.Namespace, machine: str, report: Path | None, verdict: str,
            exit_code: int) -> dict[str, Any]:
    """The ``--json`` object of a finished (or interrupted) ``kit check`` run."""
    from kit.commands.check import _column_of, reproduce_lines
    from kit.contract.sections import section_of
    from kit.discovery import redact

    url = f" --url '{redact(args.url)}'" if getattr(args, "url", None) else ""
    totals = Counter(_column_of(r) for r in run.results)
    failures = []
    for r in run.failed:
        name = r.nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        failures.append({
            "check": r.check, "area": r.area, "guarantee": r.guarantee, "message": r.message,
            "contract": section_of(r.check), "reproduce": reproduce_lines(r, args, name, url),
        })
    return {
        "format": JSON_FORMAT,
        "kit_version": __version__,
        "backend": args.backend,
        "description": run.description,
        "seed": args.seed,
        "profile": args.profile,
        "machine": machine,
        "verdict": verdict,
        "ok": verdict == "pass",
        "exit_code": exit_code,
        "duration_s": round(run.duration_s, 3),
        "totals": {"passed": totals["passed"], "failed": totals["failed"],
                   "not_promised": totals["not promised"], "skipped": totals["skipped"]},
        "failures": failures,
        "report": str(report.resolve()) if report is not None else None,
    }


def write_summary(stream: Any, document: dict[str, Any]) -> None:
    """Write ``document`` as one line of JSON and flush (a script reads it whole)."""
    stream.write(json.dumps(document, ensure_ascii=False, sort_keys=True, default=str) + "\n")
    stream.flush()
