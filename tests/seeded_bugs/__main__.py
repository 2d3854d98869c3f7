"""Kill table: every seeded bug against the example suite and, separately, the fault machines alone
(``nox -s mutants``; figures, not tests).

    python -m tests.seeded_bugs [BACKEND ...]      # KIT_SEED fixes the machines' seed (default 20261129)
    python -m tests.seeded_bugs --machines-only --seeds 10 [--bug NAME ...] [BACKEND ...]
                                                   # power per seed: the share of seeds the machines kill

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

from kit.machines.machine import PROFILES, run_machine
from kit.report import ReportWriter
from kit.runner import run_suite
from tests.seeded_bugs.registry import all_bugs


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seeds >= 1: give e.g. --seeds 10")
    return value


def _parse(argv: list[str]) -> argparse.Namespace:
    known = sorted({bug.backend for bug in all_bugs()})
    parser = argparse.ArgumentParser(
        prog="python -m tests.seeded_bugs",
        description="Kill table: every seeded bug against the example suite and the fault machines alone "
                    "(KIT_SEED fixes the machines' seed, default 20261129).")
    parser.add_argument("backends", nargs="*", metavar="BACKEND",
                        help=f"only the bugs of these backends ({', '.join(known)}); default: all")
    parser.add_argument("--machines-only", action="store_true",
                        help="skip the suite: run the fault machines alone over --seeds seeds (power per seed)")
    parser.add_argument("--seeds", type=_positive, default=1,
                        help="with --machines-only: how many seeds (KIT_SEED, KIT_SEED+1, ...) per bug; default 1")
    parser.add_argument("--bug", action="append", default=[], metavar="NAME", help="only this bug (repeatable)")
    parser.add_argument("--profile", default="quick", choices=sorted(PROFILES), help="the machines' profile")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.backends) - set(known))
    if unknown:
        parser.error(f"no seeded bugs for {', '.join(unknown)}; choose among {', '.join(known)}")
    names = {bug.name for bug in all_bugs()}
    missing = sorted(set(args.bug) - names)
    if missing:
        parser.error(f"no seeded bug named {', '.join(missing)}; see tests/seeded_bugs/*_bugs.py")
    if args.seeds > 1 and not args.machines_only:
        parser.error("--seeds needs --machines-only (the suite does not depend on the seed)")
    return args


def _seed() -> int:
    text = os.environ.get("KIT_SEED", "20261129")
    try:
        return int(text)
    except ValueError:
        print(f"KIT_SEED={text!r} is not an integer: set it to a whole number, e.g. KIT_SEED=20261129", file=sys.stderr)
        raise SystemExit(2) from None


def machine_power(argv: list[str] | None = None) -> int:
    """Power per seed: for each seeded bug, the share of ``--seeds`` seeds whose machine run kills it."""
    args = _parse(argv if argv is not None else ["--machines-only"])
    console = Console()
    first = _seed()
    seeds = list(range(first, first + args.seeds))
    table = Table(title=f"fault machines alone, {args.profile} profile: seeds killing each seeded bug "
                        f"(seeds {seeds[0]}..{seeds[-1]})")
    for column in ("backend", "bug", "killed", "share", "survived seeds", "mean examples to kill", "mean s"):
        table.add_column(column)
    weak = 0
    for bug in all_bugs():
        if (args.backends and bug.backend not in args.backends) or (args.bug and bug.name not in args.bug):
            continue
        try:
            backend = bug.make_backend()
        except Exception as exc:  # noqa: BLE001 - an unreachable server is reported, not fatal
            table.add_row(bug.backend, bug.name, "n/a", "", str(exc)[:60], "", "")
            continue
        killed, survived, examples, seconds = 0, [], [], []
        try:
            for seed_value in seeds:
                outcome = run_machine(backend, args.profile, seed_value, shrink=False)
                seconds.append(outcome.seconds)
                if outcome.failure is not None:
                    killed += 1
                    examples.append(outcome.examples)
                else:
                    survived.append(str(seed_value) + (f" ({outcome.error[:40]})" if outcome.error else ""))
        finally:
            backend.close()
        share = killed / len(seeds)
        weak += share < 0.9
        colour = "green" if share >= 0.9 else "red"
        table.add_row(bug.backend, bug.name, f"{killed}/{len(seeds)}", f"[{colour}]{share:.0%}[/]",
                      ", ".join(survived), f"{sum(examples) / len(examples):.1f}" if examples else "",
                      f"{sum(seconds) / len(seconds):.1f}")
        console.print(f"{bug.backend}/{bug.name}: killed by {killed} of {len(seeds)} seeds", highlight=False)
    console.print(table)
    return 1 if weak else 0


def main(argv: list[str]) -> int:
    args = _parse(argv)
    if args.machines_only:
        return machine_power(argv)
    wanted = set(args.backends)
    console = Console()
    seed = _seed()
    table = Table(title=f"seeded bugs: the example suite, and the fault machines alone (quick profile, seed {seed})")
    for column in ("backend", "bug", "suite killed", "failing checks", "expected caught", "suite s",
                   "machines killed", "examples", "machines s"):
        table.add_column(column)
    survivors = 0
    # a crash leaves the journal (results.jsonl): `kit report FOLDER` renders it, marked incomplete
    report = ReportWriter.create(os.environ.get("KIT_REPORT_DIR") or "reports",
                                 "-".join(["mutants", *sorted(wanted)]), kind="mutants")
    for bug in all_bugs():
        if (wanted and bug.backend not in wanted) or (args.bug and bug.name not in args.bug):
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
            machine = run_machine(backend, args.profile, seed, shrink=False)
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
