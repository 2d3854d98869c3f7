"""``kit report DIR...``: render one report folder again, or merge several into one matrix.

One folder (a finished run, or one whose run crashed: rendered as
incomplete) is re-rendered in place unless ``--out`` says where. Several
folders merge into ``<report-dir>/<timestamp>-merge/`` (or ``--out``): one
results.json, summary.md, junit.xml and index.html whose matrix has a column
per backend run. A path that is not a report is one line naming the fix (exit 2).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

NAME = "report"
HELP = "render a report folder (also a crashed run's), or merge several into one backend matrix"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="report folders written by kit check (reports/<timestamp>-<backend>)")
    parser.add_argument("--out", help="where to write the rendered (merged) report (default: in place for one "
                                      "folder, <report-dir>/<timestamp>-merge for several)")
    parser.add_argument("--report-dir", default=os.environ.get("KIT_REPORT_DIR") or "reports",
                        help="root of new merged reports (default: KIT_REPORT_DIR, else reports)")


def run(console: Console, args: argparse.Namespace) -> int:
    from kit.contract.errors import ConfigurationError
    from kit.report.load import load_report, merge_reports
    from kit.report.model import JOURNAL
    from kit.report.render import render_all
    from kit.report.writer import new_folder

    reports = [load_report(d) for d in args.dirs]
    if len(reports) == 1:
        report = reports[0]
        given = Path(args.dirs[0])
        default_out = given if given.is_dir() else given.parent  # the folder itself, never a merge's sources
    else:
        report = merge_reports(reports, name="merge")
        default_out = None
    if args.out:
        out = Path(args.out)
        sources = {Path(d).resolve() for d in args.dirs} | {Path(s).resolve() for s in report.sources}
        if (out / JOURNAL).is_file() and out.resolve() not in sources:
            raise ConfigurationError(f"{out} already holds another run's journal: choose another --out")
        if out.exists() and not out.is_dir():
            raise ConfigurationError(f"{out} is a file: give --out a folder")
    elif default_out is not None:
        out = default_out
    else:
        try:
            out = new_folder(Path(args.report_dir), "merge")
        except OSError as exc:
            raise ConfigurationError(f"cannot write under {args.report_dir} ({exc.strerror or exc}): pass --out DIR") from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        index = render_all(report, out)
    except OSError as exc:
        raise ConfigurationError(f"cannot write the report into {out} ({exc.strerror or exc}): pass --out DIR") from None
    for note in report.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    for run_record in report.runs:
        counts = run_record.counts()
        if run_record.unreachable:
            state = "[yellow]not reachable[/]"
        elif run_record.complete:
            state = "complete"
        else:
            state = "[bold yellow]INCOMPLETE[/]"
        console.print(
            f"{escape(run_record.label)}: {state}, {counts['passed']} passed, "
            f"{counts['failed'] + counts['error']} failed, {counts['skipped'] + counts['xfailed']} skipped",
            soft_wrap=True,
        )
    console.print(f"report: {escape(str(index))}", soft_wrap=True)
    return 0
