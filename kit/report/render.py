"""Render a :class:`~kit.report.model.Report` into its four files, each replaced atomically."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from kit.report._atomic import write_atomic
from kit.report.html import html_pieces
from kit.report.junit import render_junit
from kit.report.markdown import render_summary
from kit.report.model import HTML, JUNIT, RESULTS, SUMMARY, Report

__all__ = ["render_all"]


def render_all(report: Report, folder: Path | str, junit: bool = True) -> Path:
    """Write results.json, summary.md, junit.xml (unless ``junit`` is false) and index.html into ``folder``.

    Each file is written to a temporary name and renamed, so a reader (or a
    crash) never sees a half-written file. Returns the path of index.html.
    """
    target = Path(folder)
    # streamed: json.dumps with an indent joins one small string per token, about 9x the file's size
    encoder = json.JSONEncoder(indent=1, ensure_ascii=False, default=str)
    write_atomic(target / RESULTS, itertools.chain(encoder.iterencode(report.to_json()), ("\n",)))
    write_atomic(target / SUMMARY, render_summary(report))
    if junit:
        write_atomic(target / JUNIT, render_junit(report))
    write_atomic(target / HTML, html_pieces(report))  # streamed too: its timelines are thousands of elements
    return target / HTML
