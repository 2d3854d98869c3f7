"""Kill table: every seeded bug against the example suite and, separately, the fault machines alone
(``nox -s mutants``; figures, not tests).

    python -m tests.seeded_bugs [BACKEND ...]      # KIT_SEED fixes the machines' seed (default 20261129)

Also writes ``$KIT_REPORT_DIR`` (default ``reports``) ``/<timestamp>-mutants/``: one run per bug, so the
report's matrix shows which contract areas caught (failed on) which bug.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from rich.console import Console
from rich.table import Table

from kit.machines.machine import run_machine
from kit.report import ReportWriter
from kit.runner import run_suite
from tests.seeded_bugs.registry import all_bugs


def _parse(argv: list[str]) -> set[str]:
    known = sorted({bug.backend for bug in all_bugs()})
    parser = argparse.ArgumentParser(
        prog="python -m tests.seeded_bugs",
        description="Kill table: every seeded bug against the example suite and the fault machines alone "
                    "(KIT_SEED fixes the machines' seed, default 20261129).")
    parser.add_argument("backends", nargs="*", metavar="BACKEND",
                        help=f"only the bugs of these backends ({', '.join(known)}); default: all")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.backends) - set(known))
    if unknown:
        parser.error(f"no seeded bugs for {', '.join(unknown)}; choose among {', '.join(known)}")
    return set(args.backends)


def main(argv: list[str]) -> int:
    wanted = _parse(argv)
    console = Console()
    seed = int(os.environ.get("KIT_SEED", "20261129"))
    table = Table(title=f"seeded bugs: the example suite, and the fault machines alone (quick profile, seed {seed})")
    for column in ("backend", "bug", "suite killed", "failing checks", "expected caught", "suite s",
                   "machines killed", "examples", "machines s"):
        table.add_column(column)
    survivors = 0
    # a crash leaves the journal (results.jsonl): `kit report FOLDER` renders it, marked incomplete
    report = ReportWriter.create(os.environ.get("KIT_REPORT_DIR") or "reports",
                                 "-".join(["mutants", *sorted(wanted)]), kind="mutants")
    for bug in all_bugs():
        if wanted and bug.backend not in wanted:
            continue
        started = time.monotonic()
        try:
            backend = bug.make_backend()
        except Exception as exc:  # noqa: BLE001 - an unreachable server is reported, not fatal
            table.add_row(bug.backend, bug.name, "n/a", str(exc)[:60], "", "", "n/a", "", "")
            report.start_run(backend=bug.backend, label=f"{bug.backend}/{bug.name}", tool="mutants")
            report.end_run(duration_s=0.0, exit_code=3, unreachable=str(exc))
            continue
        spec = f"tests.seeded_bugs.registry:{bug.name}"  # what `kit check` / `kit replay --backend` take
        report.start_run(backend=bug.backend, spec=spec, tool="mutants", label=f"{bug.backend}/{bug.name}",
                         backend_obj=backend,
                         extra={"bug": {"name": bug.name, "description": bug.description, "caught_by": bug.caught_by}})
        try:
            run = run_suite(backend, on_result=report.add,
                            extra_args=["--kit-backend", spec, "--kit-seeds-dir", str(report.folder / "seeds"),
                                        "--kit-profile", "none"])
            suite_s = time.monotonic() - started
            machine = run_machine(backend, "quick", seed, shrink=False)
        finally:
            backend.close()
        report.end_suite(run)
        failed = {r.check for r in run.failed}
        expected = [c for c in bug.caught_by if c in failed]
        killed = bool(failed)
        machine_killed = machine.failure is not None
        survivors += (not killed) + (not machine_killed)
        table.add_row(
            bug.backend, bug.name, "[green]yes[/]" if killed else "[red]NO[/]", str(len(failed)),
            f"{len(expected)}/{len(bug.caught_by)}", f"{suite_s:.1f}",
            "[green]yes[/]" if machine_killed else "[red]NO[/]", str(machine.examples), f"{machine.seconds:.1f}",
        )
        console.print(
            f"{bug.backend}/{bug.name}: {len(failed)} checks failed; machines "
            f"{'killed it' if machine_killed else 'did NOT kill it'} in {machine.examples} examples",
            highlight=False,
        )
    console.print(table)
    console.print(f"report: {report.finish() / 'index.html'}", highlight=False)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
