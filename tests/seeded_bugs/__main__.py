"""Kill table: every seeded bug against the whole suite (``nox -s mutants``; figures, not tests).

    python -m tests.seeded_bugs [BACKEND ...]
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.table import Table

from kit.runner import run_suite
from tests.seeded_bugs.registry import all_bugs


def main(argv: list[str]) -> int:
    wanted = set(argv)
    console = Console()
    table = Table(title="seeded bugs against the whole conformance suite")
    for column in ("backend", "bug", "killed", "failing checks", "expected caught", "seconds"):
        table.add_column(column)
    survivors = 0
    for bug in all_bugs():
        if wanted and bug.backend not in wanted:
            continue
        started = time.monotonic()
        try:
            backend = bug.make_backend()
        except Exception as exc:  # noqa: BLE001 - an unreachable server is reported, not fatal
            table.add_row(bug.backend, bug.name, "n/a", str(exc)[:60], "", "")
            continue
        try:
            run = run_suite(backend)
        finally:
            backend.close()
        failed = {r.check for r in run.failed}
        expected = [c for c in bug.caught_by if c in failed]
        killed = bool(failed)
        survivors += not killed
        table.add_row(
            bug.backend, bug.name, "[green]yes[/]" if killed else "[red]NO[/]", str(len(failed)),
            f"{len(expected)}/{len(bug.caught_by)}", f"{time.monotonic() - started:.1f}",
        )
        console.print(f"{bug.backend}/{bug.name}: {len(failed)} checks failed", highlight=False)
    console.print(table)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
