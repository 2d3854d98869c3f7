"""``summary.md``: the contract-area x backend matrix, failures with their reproduce commands, typed skips."""

from __future__ import annotations

from collections import Counter, defaultdict

from kit.contract.sections import section_of
from kit.report.matrix import area_matrix, check_rows
from kit.report.model import NOT_PROMISED, Report, RunRecord, not_promised_of

__all__ = ["render_summary"]


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (one line, pipes escaped)."""
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    ticks = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _run_row(run: RunRecord) -> str:
    tally = run.tally()
    versions = run.meta.get("versions") or {}
    state = "complete" if run.complete else f"**INCOMPLETE**: {run.incomplete_reason}"
    if run.unreachable:
        state = f"not reachable: {run.unreachable}"
    duration = (run.end or {}).get("duration_s")
    return "| " + " | ".join(_cell(str(v)) for v in (
        run.label, versions.get("server", "") or run.meta.get("description", ""), versions.get("driver", ""),
        run.meta.get("seed", ""), run.meta.get("profile", "") or "", len(run.results),
        tally["passed"], tally["failed"], tally[NOT_PROMISED], tally["skipped"],
        f"{duration:.1f} s" if isinstance(duration, (int, float)) else "", state,
    )) + " |"


def render_summary(report: Report) -> str:
    """The Markdown summary of ``report`` (one run or a merge)."""
    labels = [run.label for run in report.runs]
    out = [f"# kit report: {', '.join(labels) or report.name}", ""]
    if not report.complete:
        out += [("> **INCOMPLETE REPORT**: at least one run stopped before its end; results below are those "
                 "recorded until then."), ""]
    for note in report.notes:
        out.append(f"> note: {note}")
    if report.notes:
        out.append("")
    out += [("| run | server | driver | seed | profile | checks | passed | failed | not promised | skipped | duration "
             "| state |"),
            "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    out += [_run_row(run) for run in report.runs]
    versions = report.runs[0].meta.get("versions", {}) if report.runs else {}
    if versions:
        out += ["", "kit " + str(versions.get("kit", "?")) + ", " + str(versions.get("python", "")) +
                ", pytest " + str(versions.get("pytest", "?")) + ", hypothesis " + str(versions.get("hypothesis", "?"))]

    out += ["", "## Contract areas x backend", "",
            "| area | " + " | ".join(_cell(label) for label in labels) + " |",
            "|---|" + "---|" * len(labels)]
    for area, cells in area_matrix(report):
        out.append(f"| {area} | " + " | ".join(
            f"**{cell.text()}**" if cell.status == "fail" else cell.text() for cell in cells) + " |")

    rows = check_rows(report)
    if len(report.runs) > 1:
        differing = [row for row in rows if row.differs]
        out += ["", "## Where backends differ", ""]
        if differing:
            out += ["| check | " + " | ".join(_cell(label) for label in labels) + " |", "|---|" + "---|" * len(labels)]
            for row in differing:
                out.append(f"| {_cell(row.key)} | " + " | ".join(s or "—" for s in row.statuses()) + " |")
        else:
            out.append("Every check that ran on more than one backend had the same outcome on each.")

    failures = [(run, r) for run in report.runs for r in run.failed]
    out += ["", f"## Failures ({len(failures)})", ""]
    if not failures:
        out.append("None: every guarantee that was checked was kept." if report.complete
                   else "None recorded before the run stopped.")
    for run, result in failures:
        out += [f"### {_cell(run.label)}: {_cell(str(result.get('check')))}", ""]
        if result.get("guarantee"):
            out.append(f"- guarantee: {_cell(str(result['guarantee']))}")
        out.append(f"- contract: {_cell(section_of(str(result.get('check'))))}")
        out.append(f"- {result.get('outcome')}: {_cell(str(result.get('message', '')))}")
        if result.get("reproduce"):
            out.append(f"- reproduce: {_code(str(result['reproduce']))}")
        out.append("")
    for run in report.runs:
        for error in (run.end or {}).get("collection_errors", []) or []:
            out.append(f"- {_cell(run.label)}: collection error: {_cell(str(error))[:500]}")

    not_promised: dict[str, Counter[str]] = defaultdict(Counter)
    skipped: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for run in report.runs:
        for r in run.results:
            if r.get("outcome") in ("skipped", "xfailed"):
                kind = str(r.get("skip_kind") or "unsupported")
                if kind == NOT_PROMISED:
                    not_promised[not_promised_of(r)][run.label] += 1
                else:
                    skipped[(kind, str(r.get("message", "")))][run.label] += 1
    out += ["", "## Not promised", ""]
    if not_promised:
        out += [("Checks skipped because the store does not make a promise they need (neither a failure nor a "
                 "missing capability):"), "", "| promises not made | runs (checks) |", "|---|---|"]
        for promises, per_run in sorted(not_promised.items()):
            runs = ", ".join(f"{label} ({n})" for label, n in sorted(per_run.items()))
            out.append(f"| {_cell(promises)} | {_cell(runs)} |")
    else:
        out.append("None: every check's promises were made.")
    out += ["", "## Skipped and expected failures", ""]
    if skipped:
        out += ["| kind | reason | runs (checks) |", "|---|---|---|"]
        for (kind, reason), per_run in sorted(skipped.items()):
            runs = ", ".join(f"{label} ({n})" for label, n in sorted(per_run.items()))
            out.append(f"| {kind} | {_cell(reason)[:300]} | {_cell(runs)} |")
    else:
        out.append("None.")
    out.append("")
    return "\n".join(out)
