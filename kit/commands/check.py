"""``kit check``: the conformance suite (and the fault machines) against one backend."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from kit import __version__
from kit.contract.capabilities import SkipKind
from kit.contract.errors import ConfigurationError
from kit.contract.sections import section_of
from kit.discovery import redact

if TYPE_CHECKING:
    from kit.machines.progress import MachineProgress
    from kit.report.results import CheckResult

EXIT_INTERRUPTED = 130
"""Stopped by Ctrl-C or SIGTERM: no verdict (the shell's code for SIGINT)."""

NAME = "check"
HELP = "run the conformance suite against a backend"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kit.seeds import seed_type

    parser.add_argument(
        "backend", nargs="?", default="sqlite",
        help="memory, sqlite (default), postgres, mysql, mssql, or package.module:factory",
    )
    parser.add_argument("--url", help="SQLAlchemy URL of the server (else KIT_<BACKEND>_URL, else discovery)")
    parser.add_argument("-k", dest="keyword", help="only checks whose name (or area) matches this pytest -k expression")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (CI logs)")
    parser.add_argument("--profile", choices=("smoke", "quick", "thorough", "none"), default="quick",
                        help="fault-machine profile: smoke (seconds), quick (CI, default), thorough (nightly), "
                             "none (fixed checks only)")
    parser.add_argument("--machine", choices=("auto", "reference", "model-free"), default="auto",
                        help="fault machine: auto (default: reference for a store that promises the whole contract, "
                             "else model-free), reference (every step compared with the reference engine), "
                             "model-free (only the invariants, on the store's own state)")
    parser.add_argument("--seed", type=seed_type, help="seed of the fault machines (default: KIT_SEED, else a fresh one, printed)")
    parser.add_argument("--seeds-dir", help="where failing scenarios are saved (default: scenarios/seeds, or the "
                                             "temporary folder with --no-report)")
    parser.add_argument("--report-dir", default=os.environ.get("KIT_REPORT_DIR") or "reports",
                        help="where the run's report folder <timestamp>-<backend>/ is written "
                             "(default: KIT_REPORT_DIR, else reports)")
    parser.add_argument("--no-report", action="store_true", help="write no report folder")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON summary on stdout for scripts (the human output goes to stderr; "
                             "schema in kit/commands/check_json.py)")
    _add_swarm_arguments(parser)


def _add_swarm_arguments(parser: argparse.ArgumentParser) -> None:
    """--workers, --shard and --example-db: more cores, more CI jobs, shared failures (kit.swarm)."""
    from kit.seeds import count_type

    parser.add_argument("--workers", type=count_type(1), default=1,
                        help="fault-machine explorations run at once, one per core through pytest-xdist, each "
                             "with its own seed derived from --seed (printed). The fixed checks stay serial: "
                             "on SQLite pytest-xdist -n 2 ran them slower than one process (7.1-7.7 s against 6.4 s)")
    parser.add_argument("--shard", metavar="I/N",
                        help="run shard I of N (CI matrices): every Nth fixed check and every Nth exploration; "
                             "N shards with --workers W explore the seeds of one run with --workers W*N; "
                             "merge their report folders with kit report")
    parser.add_argument("--example-db", metavar="DIR|redis://HOST:PORT|none",
                        help="Hypothesis example database of the fault machines: failing examples any run or shard "
                             "found are replayed first (default: KIT_EXAMPLE_DB, else <report-dir>/example-db, or a "
                             "temporary folder with --no-report; redis://HOST:PORT shares them across CI jobs)")


def run(console: Console, args: argparse.Namespace) -> int:
    from kit.backends import resolve
    from kit.report.recording import CheckReport
    from kit.runner import check_keyword, run_suite
    from kit.seeds import env_seed, fresh_seed

    if args.keyword:
        check_keyword(args.keyword)
    stdout = console.file
    if getattr(args, "json", False):  # stdout carries the JSON object alone
        from kit.cli import make_console

        console = make_console(stderr=True)
    _check_swarm_arguments(args)
    if args.seed is None:
        args.seed = env_seed()
    if args.seed is None:
        args.seed = fresh_seed()
    backend = resolve(args.backend, args.url)
    if args.seeds_dir is None:
        args.seeds_dir = str(Path(tempfile.gettempdir()) / "kit-seeds") if args.no_report else "scenarios/seeds"
    report = CheckReport(console, args)
    try:
        report.start(backend)
        console.print(f"kit {__version__}: conformance check of [bold]{escape(args.backend)}[/] ({escape(backend.describe())})")
        from kit.machines.choice import choose_machine
        from kit.queue import is_queue_backend

        # a queue store (queue_promises) has one machine, the queue machine; it declares no capabilities
        machine = "queue" if is_queue_backend(backend) else choose_machine(backend, getattr(args, "machine", "auto"))
        console.print(f"seed {args.seed}, {machine} fault machine, profile {args.profile} (repeat with --seed {args.seed})")
        _print_swarm(console, args)
        # The bar's console holds today's stdout: pytest swaps sys.stdout while each check runs, and a
        # console following sys.stdout would draw into pytest's capture (a bar frozen at 0/?).
        bar_console = Console(file=console.file, highlight=False, width=console.width if console.is_terminal else None)
        progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=bar_console, transient=True, disable=args.no_progress,
        )
        with progress:
            task = progress.add_task("checking", total=None)

            def collected(n: int) -> None:
                progress.update(task, total=n)

            def advanced(result: object) -> None:
                report.add(result)
                progress.update(task, advance=1, description=getattr(result, "area", "checking"))

            machine_task: list[TaskID] = []

            def machine_moved(state: MachineProgress) -> None:
                """The running machine's own line: examples done of the budget, the step, the seed."""
                if not machine_task:
                    machine_task.append(progress.add_task("", total=state.budget))
                progress.update(machine_task[0], completed=min(state.examples, state.budget),
                                description=escape(state.line()))

            from kit.machines import progress as machine_progress

            with _hypothesis_home(machines=args.profile != "none"), machine_progress.watching(machine_moved):
                if getattr(args, "workers", 1) > 1 and args.profile != "none":  # no machine to spread
                    from kit.swarm_run import run_swarm

                    suite = run_swarm(backend, args.workers, keyword=args.keyword, extra_args=_extra_args(args),
                                      on_result=advanced, on_collected=collected)
                else:
                    suite = run_suite(backend, keyword=args.keyword, extra_args=_extra_args(args),
                                      on_result=advanced, on_collected=collected)
    except BaseException as exc:
        report.abort(exc)
        raise
    finally:
        backend.close()
    if suite.interrupted:
        folder = report.finish(suite)  # marked incomplete: pytest stopped the session early
        console.print(f"[bold yellow]interrupted[/]: stopped after {len(suite.results)} checks; no verdict "
                      f"(repeat with --seed {args.seed})")
        _json(stdout, suite, args, machine, folder, "interrupted", EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    if not suite.results and not suite.collection_errors:
        report.abort(ConfigurationError("no check matched"))
        raise ConfigurationError(
            f"no check matches -k {args.keyword!r}: name an area (claims, commit, runs, ...) or part of a "
            "check's name" if args.keyword else "no check was collected: reinstall the kit"
        )
    print_summary(console, suite, args)
    folder = report.finish(suite)
    code = 0 if suite.ok else 1
    _json(stdout, suite, args, machine, folder, "pass" if suite.ok else "fail", code)
    return code


def _json(stdout: object, suite: object, args: argparse.Namespace, machine: str, folder: Path | None,
          verdict: str, code: int) -> None:
    """With ``--json``, the run's summary object on stdout (see :mod:`kit.commands.check_json`)."""
    if getattr(args, "json", False):
        from kit.commands.check_json import summary, write_summary

        write_summary(stdout, summary(suite, args, machine, folder, verdict, code))


@contextmanager
def _hypothesis_home(machines: bool) -> Iterator[None]:
    """Hypothesis's own files (its constants cache) go to a temporary folder, never ``./.hypothesis``.

    Only the fault machines run Hypothesis: with them off (profile ``none``) nothing imports it, and
    neither does this (about a tenth of a second of every such run)."""
    if not machines and "hypothesis" not in sys.modules:
        yield
        return
    from hypothesis.configuration import set_hypothesis_home_dir

    with tempfile.TemporaryDirectory(prefix="kit-hypothesis-") as home:
        set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            set_hypothesis_home_dir(None)


def _extra_args(args: argparse.Namespace) -> list[str]:
    extra = ["--kit-seed", str(args.seed), "--kit-profile", args.profile, "--kit-seeds-dir", args.seeds_dir,
             "--kit-backend", args.backend,
             "--kit-machine", getattr(args, "machine", "auto")]
    extra += _swarm_args(args)
    return extra + (["--kit-url", args.url] if getattr(args, "url", None) else [])  # named (redacted) in replay lines


def _check_swarm_arguments(args: argparse.Namespace) -> None:
    """Refuse a bad --shard or --example-db in one line naming the fix; choose the default example database."""
    from kit.swarm import NO_DATABASE, check_example_db, parse_shard

    args.shard = str(parse_shard(getattr(args, "shard", None)))
    if getattr(args, "workers", 1) > 1:
        import importlib.util

        if importlib.util.find_spec("xdist") is None:
            raise ConfigurationError("--workers needs pytest-xdist: pip install pytest-xdist (or drop --workers)")
    if getattr(args, "example_db", None) is None:
        args.example_db = os.environ.get("KIT_EXAMPLE_DB") or None
    if args.example_db is None:
        root = Path(tempfile.gettempdir()) if args.no_report else Path(args.report_dir)
        args.example_db = str(root / ("kit-example-db" if args.no_report else "example-db"))
    elif args.example_db != NO_DATABASE:
        check_example_db(args.example_db)


def _swarm_args(args: argparse.Namespace) -> list[str]:
    if not hasattr(args, "workers"):
        return []
    return ["--kit-workers", str(args.workers), "--kit-shard", str(args.shard), "--kit-example-db", str(args.example_db)]


def _print_swarm(console: Console, args: argparse.Namespace) -> None:
    """The explorations of this run (each with the seed that repeats it alone) and the example database."""
    if not hasattr(args, "workers") or args.profile == "none":
        return
    from kit.seeds import derive_seed
    from kit.swarm import exploration_indices, parse_shard

    shard = parse_shard(args.shard)
    indices = exploration_indices(args.workers, shard)
    if len(indices) > 1 or not shard.whole:
        seeds = ", ".join(f"{i}: seed {derive_seed(args.seed, i)}" for i in indices)
        where = f"shard {shard}, " if not shard.whole else ""
        console.print(f"{where}explorations {seeds} (repeat one alone with --seed SEED)", soft_wrap=True)
    console.print(f"example database: {escape(redact(args.example_db))} (failing examples saved there replay first)",
                  soft_wrap=True)


def reproduce_lines(result: object, args: argparse.Namespace, name: str, url: str) -> list[str]:
    """How to repeat a failed check: the saved bundle's replay command and the seed for a fault-machine
    failure (re-running the check explores scenarios only with the same seed), else the check itself."""
    from kit.swarm import exploration_seed

    seed = exploration_seed(str(getattr(result, "nodeid", "")), args.seed)  # an exploration's own seed
    details = str(getattr(result, "details", "") or "")
    replay = next((line.split("replay: ", 1)[1].strip() for line in details.splitlines()
                   if line.strip().startswith("replay: kit replay ")), None)
    again = f"kit check {args.backend}{url} --seed {seed} --profile {args.profile} -k {name}"
    if replay is not None:
        return [f"reproduce: {replay}", f"seed {seed} (explore the same scenarios again: {again})"]
    if "fault_machine" in name:
        return [f"reproduce: {again}"]
    return [f"reproduce: kit check {args.backend}{url} -k {name}"]


def print_summary(console: Console, run: object, args: argparse.Namespace) -> None:
    from kit.runner import SuiteRun

    assert isinstance(run, SuiteRun)
    for error in run.collection_errors:
        console.print(f"[bold red]collection error:[/] {escape(error)}")
    by_area: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: dict[str, set[str]] = defaultdict(set)
    unpromised: dict[str, set[str]] = defaultdict(set)
    undeclared: dict[str, set[str]] = defaultdict(set)
    for r in run.results:
        by_area[r.area][_column_of(r)] += 1
        if _column_of(r) == "not promised":
            unpromised[r.area].update(_promises_named(r))
        elif r.skip_kind == SkipKind.UNSUPPORTED.value and _UNDECLARED in r.message:
            undeclared[r.area].update(n.strip() for n in r.message.split(_UNDECLARED, 1)[1].split(","))
        elif r.outcome in ("skipped", "xfailed"):
            reasons[r.area].add(r.message)
    table = Table(title=f"{run.backend}: {len(run.results)} checks in {run.duration_s:.1f} s")
    counted = ("passed", "failed", "not promised", "skipped")
    for column in ("area", *counted, "why skipped"):
        table.add_column(column, justify="right" if column in counted else "left")
    for area in sorted(by_area):
        c = by_area[area]
        table.add_row(
            area, str(c["passed"]), f"[red]{c['failed']}[/]" if c["failed"] else "0", str(c["not promised"]),
            str(c["skipped"]), escape(_why(unpromised[area], undeclared[area], reasons[area])[:160]),
        )
    console.print(table)
    url = f" --url '{redact(args.url)}'" if getattr(args, "url", None) else ""
    for r in run.failed:
        name = r.nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        console.print(f"[bold red]FAILED[/] {escape(r.check + _params_of(r.nodeid))}")
        if r.guarantee:
            console.print(f"  guarantee: {escape(r.guarantee)}", soft_wrap=True)
        console.print(f"  contract: {escape(section_of(r.check))}", soft_wrap=True)
        console.print(f"  error: {escape(r.message)}", soft_wrap=True)
        for line in reproduce_lines(r, args, name, url):
            console.print(f"  {escape(line)}", soft_wrap=True)
    totals = Counter(_column_of(r) for r in run.results)
    verdict = "[bold green]PASS[/]" if run.ok else "[bold red]FAIL[/]"
    not_promised = f", {totals['not promised']} not promised" if totals["not promised"] else ""
    console.print(f"{verdict}: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped{not_promised}")


def _params_of(nodeid: str) -> str:
    """A check's pytest parameters (``[exploration1]``), or nothing."""
    return nodeid[nodeid.index("["):] if "[" in nodeid else ""


def _column_of(result: CheckResult) -> str:
    """The table column a result is counted in: passed, failed (errors too), not promised or skipped
    (unsupported, not reachable and expected failures)."""
    if result.outcome in ("failed", "error"):
        return "failed"
    if result.outcome in ("skipped", "xfailed"):
        return "not promised" if result.skip_kind == SkipKind.NOT_PROMISED.value else "skipped"
    return result.outcome


def _promises_named(result: CheckResult) -> list[str]:
    """The promises a not-promised skip names."""
    from kit.report.model import not_promised_of

    return [p.strip() for p in not_promised_of({"message": result.message}).replace(" or ", ", ").split(",")]


_UNDECLARED = " does not declare "


def _why(unpromised: set[str], undeclared: set[str], reasons: set[str]) -> str:
    """The table's reason column: the promises not made and the capabilities not declared (one entry each
    for many checks), then the other reasons."""
    parts = [f"not promised: {', '.join(sorted(unpromised))}"] if unpromised else []
    parts += [f"unsupported: {', '.join(sorted(undeclared))}"] if undeclared else []
    return "; ".join(parts + sorted(reasons))
