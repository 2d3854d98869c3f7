"""``index.html``: one static page that opens from disk and says which backend keeps which guarantee.

Guarantees: the page is a single file with inline CSS, SVG and a few lines of
JavaScript; its Content-Security-Policy forbids every network fetch, so it
renders the same offline, from a CI artifact or an e-mail. It shows the
contract-area x backend matrix, every failure with its guarantee and its
reproduce (``kit check -k`` / ``kit replay``) command, each check across
backends, typed skips, per-area durations, and the latency / throughput
plots and per-worker timelines of whatever series the runs recorded (an
empty state when they recorded none).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from html import escape

from kit.contract.sections import section_of
from kit.report._svg import bar_chart, colour, line_chart, timeline_pieces
from kit.report.matrix import area_matrix, areas, check_rows
from kit.report.model import NOT_PROMISED, Report, RunRecord, Series, TimelineEvent, not_promised_of

__all__ = ["html_pieces", "render_html"]

_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

_CSS = """
:root { --pass:#d8f0d2; --pass-ink:#225c1a; --fail:#f9d0d0; --fail-ink:#8a1010; --skip:#eeeeee; --skip-ink:#555;
        --none:#fafafa; --warn:#fff1c2; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d1d1f; background: #fff; }
header { padding: 18px 28px 12px; border-bottom: 1px solid #ddd; background: #f7f7f9; }
header h1 { margin: 0 0 6px; font-size: 21px; }
main { padding: 8px 28px 40px; max-width: 1400px; }
h2 { font-size: 17px; margin: 26px 0 8px; border-bottom: 1px solid #eee; padding-bottom: 4px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f5; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 2px 10px; border-radius: 10px; font-weight: 700; font-size: 13px; }
.badge.ok { background: var(--pass); color: var(--pass-ink); }
.badge.bad { background: var(--fail); color: var(--fail-ink); }
.badge.partial { background: var(--warn); color: #6b4c00; }
.banner { background: var(--warn); border: 1px solid #e5c65c; padding: 8px 12px; margin: 12px 0; border-radius: 4px; }
.st-pass { background: var(--pass); color: var(--pass-ink); }
.st-fail { background: var(--fail); color: var(--fail-ink); font-weight: 700; }
.st-skip { background: var(--skip); color: var(--skip-ink); }
.st-none, .st-not-run, .st-not-reachable { background: var(--none); color: #888; font-style: italic; }
table.matrix td.cell { text-align: center; min-width: 110px; white-space: nowrap; }
.failure { border-left: 4px solid #c62828; padding: 6px 12px; margin: 10px 0; background: #fff8f8; }
.failure .guarantee { font-style: italic; }
code, pre { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
code.cmd { display: inline-block; background: #1d1d1f; color: #f5f5f7; padding: 3px 8px; border-radius: 4px;
           user-select: all; white-space: pre-wrap; word-break: break-all; }
pre { background: #f6f6f8; padding: 8px; overflow-x: auto; max-height: 420px; }
details > summary { cursor: pointer; }
.muted { color: #777; }
.empty { color: #777; font-style: italic; padding: 8px 0; }
svg.chart { max-width: 100%; height: auto; display: block; margin: 4px 0 12px; }
.guarantee-col { max-width: 520px; }
"""

_JS = """
document.addEventListener('DOMContentLoaded', function () {
  var box = document.getElementById('only-interesting');
  function apply() {
    var rows = document.querySelectorAll('tr.check-row');
    for (var i = 0; i < rows.length; i++) {
      rows[i].hidden = box.checked && !rows[i].classList.contains('interesting');
    }
  }
  if (box) { box.addEventListener('change', apply); apply(); }
  function openTarget() {
    var target = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
    if (target && target.tagName === 'DETAILS') { target.open = true; }
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();
  document.body.setAttribute('data-ready', 'yes');
});
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _state_badge(report: Report) -> str:
    if not report.complete:
        return '<span class="badge partial" id="verdict">INCOMPLETE</span>'
    if report.ok:
        return '<span class="badge ok" id="verdict">PASS</span>'
    return '<span class="badge bad" id="verdict">FAIL</span>'


def _runs_table(report: Report) -> str:
    head = ("run", "backend", "server", "driver", "seed", "profile", "checks", "passed", "failed", "not promised",
            "skipped", "duration", "state")
    rows = []
    for i, run in enumerate(report.runs):
        tally = run.tally()
        versions = run.meta.get("versions") or {}
        duration = (run.end or {}).get("duration_s")
        state = "complete" if run.complete else f"INCOMPLETE: {run.incomplete_reason}"
        if run.unreachable:
            state = f"not reachable: {run.unreachable}"
        cells = [
            f'<td><span style="color:{colour(i)}">&#9632;</span> {_e(run.label)}</td>',
            f"<td>{_e(run.backend)}</td>",
            f'<td title="{_e(run.meta.get("description", ""))}">{_e(versions.get("server", ""))}</td>',
            f"<td>{_e(versions.get('driver', ''))}</td>",
            f"<td class=num>{_e(run.meta.get('seed', '') if run.meta.get('seed') is not None else '')}</td>",
            f"<td>{_e(run.meta.get('profile') or '')}</td>",
            f"<td class=num>{len(run.results)}</td>",
            f"<td class=num>{tally['passed']}</td>",
            f"<td class=num>{tally['failed']}</td>",
            f"<td class=num>{tally[NOT_PROMISED]}</td>",
            f"<td class=num>{tally['skipped']}</td>",
            f"<td class=num>{f'{duration:.1f} s' if isinstance(duration, (int, float)) else ''}</td>",
            f'<td class="{"" if run.complete and not run.unreachable else "st-fail"}">{_e(state)}</td>',
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return ("<table id=runs><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _matrix(report: Report) -> str:
    head = "".join(f"<th>{_e(run.label)}</th>" for run in report.runs)
    body = []
    for area, cells in area_matrix(report):
        tds = "".join(
            f'<td class="cell st-{cell.status}" title="{_e("; ".join(cell.reasons[:5]))}">{_e(cell.text())}</td>'
            for cell in cells)
        body.append(f'<tr><th scope="row"><a href="#area-{_e(area)}">{_e(area)}</a></th>{tds}</tr>')
    if not body:
        body.append(f'<tr><td colspan="{len(report.runs) + 1}" class="empty">no check results recorded</td></tr>')
    return (f'<table class="matrix" id="matrix"><thead><tr><th>contract area</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _failures(report: Report) -> str:
    parts = []
    for run in report.runs:
        for r in run.failed:
            reproduce = f'<div>reproduce: <code class="cmd">{_e(r["reproduce"])}</code></div>' if r.get("reproduce") else ""
            details = str(r.get("details", ""))
            parts.append(
                f'<div class="failure"><h3>{_e(run.label)}: {_e(r.get("check"))} '
                f'<span class="muted">({_e(r.get("outcome"))})</span></h3>'
                + (f'<div class="guarantee">guarantee: {_e(r.get("guarantee"))}</div>' if r.get("guarantee") else "")
                + f'<div class="contract">contract: {_e(section_of(str(r.get("check"))))}</div>'
                + f'<div>error: {_e(r.get("message", ""))}</div>{reproduce}'
                + (f"<details><summary>details</summary><pre>{_e(details[:20000])}</pre></details>" if details else "")
                + "</div>")
        for error in (run.end or {}).get("collection_errors", []) or []:
            parts.append(f'<div class="failure"><h3>{_e(run.label)}: collection error</h3><pre>{_e(error)}</pre></div>')
    if not parts:
        if not report.complete:
            return '<p class="empty" id="no-failures">No failures recorded before the run stopped.</p>'
        return '<p class="empty" id="no-failures">No failures: every guarantee that was checked was kept.</p>'
    return "".join(parts)


def _checks(report: Report) -> str:
    rows_by_area = defaultdict(list)
    for row in check_rows(report):
        rows_by_area[row.area].append(row)
    head = "".join(f"<th>{_e(run.label)}</th>" for run in report.runs)
    parts = ['<label><input type="checkbox" id="only-interesting"> only checks that fail, skip or differ</label>']
    for area in areas(report):
        rows = rows_by_area[area]
        interesting = any(row.differs or "fail" in row.statuses() for row in rows)
        trs = []
        for row in rows:
            statuses = row.statuses()
            flag = " interesting" if row.differs or any(s in ("fail", "skip") for s in statuses) else ""
            tds = "".join(
                f'<td class="cell st-{s or "none"}" title="{_e((r or {}).get("message", ""))}">{_e(s or "—")}</td>'
                for s, r in zip(statuses, row.results))
            trs.append(f'<tr class="check-row{flag}"><td><code>{_e(row.key)}</code></td>'
                       f'<td class="guarantee-col">{_e(row.guarantee)}</td>{tds}</tr>')
        parts.append(f'<details id="area-{_e(area)}"{" open" if interesting else ""}><summary><b>{_e(area)}</b> '
                     f'<span class="muted">({len(rows)} checks)</span></summary>'
                     f'<table class="checks"><thead><tr><th>check</th><th>guarantee</th>{head}</tr></thead>'
                     f'<tbody>{"".join(trs)}</tbody></table></details>')
    return "".join(parts)


def _not_promised(report: Report) -> str:
    grouped: dict[str, list[str]] = defaultdict(list)
    for run in report.runs:
        for r in run.results:
            if r.get("outcome") in ("skipped", "xfailed") and r.get("skip_kind") == NOT_PROMISED:
                grouped[not_promised_of(r)].append(f"{run.label}: {r.get('check')}")
    if not grouped:
        return '<p class="empty">None: every check\'s promises were made.</p>'
    rows = "".join(f"<tr><td>{_e(promises)}</td><td class=num>{len(who)}</td><td>{_e(', '.join(sorted(who)[:12]))}"
                   f"{' …' if len(who) > 12 else ''}</td></tr>" for promises, who in sorted(grouped.items()))
    return ("<table id=not-promised><thead><tr><th>promises not made</th><th>checks</th><th>which</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def _skips(report: Report) -> str:
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run in report.runs:
        for r in run.results:
            if r.get("outcome") in ("skipped", "xfailed"):
                kind = str(r.get("skip_kind") or "unsupported")
                if kind == NOT_PROMISED:
                    continue
                grouped[(kind, str(r.get("message", "")))].append(f"{run.label}: {r.get('check')}")
        if run.unreachable:
            grouped[("not-reachable", run.unreachable)].append(f"{run.label}: every check")
    if not grouped:
        return '<p class="empty">None.</p>'
    rows = "".join(f"<tr><td>{_e(kind)}</td><td>{_e(reason)}</td><td>{_e(', '.join(sorted(who)[:12]))}"
                   f"{' …' if len(who) > 12 else ''}</td></tr>" for (kind, reason), who in sorted(grouped.items()))
    return f"<table id=skips><thead><tr><th>kind</th><th>reason</th><th>checks</th></tr></thead><tbody>{rows}</tbody></table>"


def _durations(report: Report) -> str:
    names = areas(report)
    if not names:
        return '<p class="empty">No check durations recorded.</p>'
    groups = [(area, [sum(float(r.get("duration_s") or 0) for r in run.results if r.get("area") == area)
                      for run in report.runs]) for area in names]
    groups = [(area, totals) for area, totals in groups if any(t > 0 for t in totals)]
    slow = sorted(((float(r.get("duration_s") or 0), run.label, str(r.get("check"))) for run in report.runs
                   for r in run.results if float(r.get("duration_s") or 0) > 0), reverse=True)[:10]
    if not groups or not slow:  # verdicts without timings (a stress run's invariants): no empty chart
        return '<p class="empty">No check durations recorded.</p>'
    chart = bar_chart(groups, [run.label for run in report.runs], "s", "time spent per contract area")
    rows = "".join(f"<tr><td class=num>{d:.3f} s</td><td>{_e(label)}</td><td><code>{_e(check)}</code></td></tr>"
                   for d, label, check in slow)
    return (f'<div id="plot-durations">{chart}</div><h3>slowest checks</h3>'
            f"<table><thead><tr><th>time</th><th>run</th><th>check</th></tr></thead><tbody>{rows}</tbody></table>")


def _series_plots(report: Report) -> str:
    by_kind: dict[str, list[tuple[str, Series]]] = defaultdict(list)
    for run in report.runs:
        for series in run.series:
            by_kind[series.kind].append((run.label, series))
    parts = []
    for kind in sorted(by_kind, key=lambda k: (k not in ("latency", "throughput"), k)):
        entries = by_kind[kind]
        units = sorted({s.unit for _, s in entries})
        labelled = [(f"{label} · {s.name}" if len(report.runs) > 1 else s.name, s.points) for label, s in entries]
        parts.append(f'<h3>{_e(kind)}</h3><div class="plot-series" data-kind="{_e(kind)}">'
                     + line_chart(labelled, entries[0][1].x_unit, " / ".join(units), f"{kind} over time") + "</div>")
    if not parts:
        return ('<p class="empty" id="no-series">No latency or throughput series in this report: '
                "conformance checks record none; <code>kit stress</code> runs add them here.</p>")
    return "".join(parts)


def _timelines(report: Report) -> Iterator[str]:
    """The per-worker timelines, in pieces (see :func:`~kit.report._svg.timeline_pieces`)."""
    shown = False
    for run in report.runs:
        if not run.events:
            continue
        lanes: dict[str, list[TimelineEvent]] = defaultdict(list)
        for event in run.events:
            lanes[event.worker].append(event)
        ordered = sorted(lanes.items())
        yield f'<h3>{_e(run.label)}</h3><div class="plot-timeline">'
        yield from timeline_pieces(ordered, f"{run.label}: per-worker timeline")
        yield "</div>"
        shown = True
    if not shown:
        yield ('<p class="empty" id="no-timeline">No worker timelines in this report: '
               "<code>kit stress</code> runs record claims, commits and injected faults per worker.</p>")


def _versions(runs: list[RunRecord]) -> str:
    rows = []
    for run in runs:
        versions = run.meta.get("versions") or {}
        text = ", ".join(f"{k} {v}" for k, v in versions.items())
        rows.append(f"<tr><td>{_e(run.label)}</td><td>{_e(text)}</td><td>{_e(run.meta.get('command') or '')}</td>"
                    f"<td>{_e(run.source)}</td></tr>")
    return ("<table><thead><tr><th>run</th><th>versions</th><th>command</th><th>from</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def render_html(report: Report) -> str:
    """The self-contained HTML page of ``report``."""
    return "".join(html_pieces(report))


def html_pieces(report: Report) -> Iterator[str]:
    """:func:`render_html`'s page in order, in pieces: a writer streams them to its file, so the page (a
    stress run's timeline alone is thousands of SVG elements) is never held whole in memory."""
    labels = ", ".join(run.label for run in report.runs) or report.name
    banner = ""
    if not report.complete:
        reasons = "; ".join(f"{run.label}: {run.incomplete_reason}" for run in report.runs if not run.complete)
        banner = (f'<div class="banner" id="incomplete"><b>Incomplete report.</b> A run stopped before its end; '
                  f"the results shown are those recorded until then. ({_e(reasons)})</div>")
    notes = "".join(f'<div class="banner">note: {_e(note)}</div>' for note in report.notes)
    yield (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
           f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
           f'<meta name="viewport" content="width=device-width, initial-scale=1">'
           f'<link rel="icon" href="data:,"><title>kit report: {_e(labels)}</title>'
           f"<style>{_CSS}</style><script>{_JS}</script></head><body>")
    yield f"""
<header><h1>kit report: {_e(labels)} {_state_badge(report)}</h1>
<div class="muted">{_e(report.kind)} report generated {_e(report.created_at)} · {len(report.runs)} run(s)</div></header>
<main>{banner}{notes}
<section><h2>Runs</h2>{_runs_table(report)}</section>
<section><h2>Contract areas × backend</h2>{_matrix(report)}</section>
<section><h2>Failures</h2>{_failures(report)}</section>
<section><h2>Which backend keeps which guarantee</h2>{_checks(report)}</section>
<section><h2>Not promised</h2>{_not_promised(report)}</section>
<section><h2>Skipped and expected failures</h2>{_skips(report)}</section>
<section><h2>Durations per contract area</h2>{_durations(report)}</section>
<section id="stress"><h2>Latency and throughput</h2>{_series_plots(report)}
<h2>Per-worker timelines</h2>"""
    yield from _timelines(report)
    yield f"""</section>
<section><h2>Versions</h2>{_versions(report.runs)}</section>
</main></body></html>\n"""
