"""``junit.xml``: one ``<testsuite>`` per run, one ``<testcase>`` per check, for CI dashboards.

Guarantees: the file is well-formed XML that standard JUnit readers parse
(control characters XML forbids are dropped); a failure's text carries the
guarantee that was broken and the command that reproduces it; a typed skip
(``unsupported``, ``expected-failure``, ``not-reachable``) is a ``<skipped>``
whose ``type`` is the kind; an incomplete run and an unreachable backend are
visible as test cases of their own, so a partial run never looks green.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from kit.report.model import NOT_PROMISED, Report, RunRecord

__all__ = ["render_junit"]

_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: object) -> str:
    return _ILLEGAL.sub("", str(text))


def _case_name(result: dict[str, Any]) -> str:
    nodeid = str(result.get("nodeid", ""))
    params = nodeid[nodeid.index("["):] if "[" in nodeid else ""
    return f"{result.get('check') or nodeid}{params}"


def _failure_text(result: dict[str, Any]) -> str:
    lines = []
    if result.get("guarantee"):
        lines.append(f"guarantee: {result['guarantee']}")
    lines.append(f"error: {result.get('message', '')}")
    if result.get("reproduce"):
        lines.append(f"reproduce: {result['reproduce']}")
    details = str(result.get("details", ""))
    if details:
        lines += ["", details[:20000]]
    return "\n".join(lines)


def _suite(run: RunRecord) -> ET.Element:
    suite = ET.Element("testsuite", name=_clean(f"kit.{run.label}"), timestamp=_clean(run.meta.get("started_at", "")))
    props = ET.SubElement(suite, "properties")
    meta_props: dict[str, Any] = {
        "backend": run.backend, "spec": run.meta.get("spec"), "tool": run.meta.get("tool"),
        "seed": run.meta.get("seed"), "profile": run.meta.get("profile"), "keyword": run.meta.get("keyword"),
        "description": run.meta.get("description"), "complete": run.complete,
        **{f"version.{k}": v for k, v in (run.meta.get("versions") or {}).items()},
    }
    for key, value in meta_props.items():
        if value not in (None, ""):
            ET.SubElement(props, "property", name=_clean(key), value=_clean(value))
    tests = failures = errors = skipped = 0
    total_time = 0.0
    classname = f"kit.{run.label}"
    for result in run.results:
        duration = float(result.get("duration_s") or 0.0)
        total_time += duration
        case = ET.SubElement(suite, "testcase", classname=_clean(f"{classname}.{result.get('area', 'other')}"),
                             name=_clean(_case_name(result)), time=f"{duration:.6f}")
        outcome = result.get("outcome")
        message = _clean(str(result.get("message", ""))[:1000])
        tests += 1
        if outcome == "failed":
            failures += 1
            node = ET.SubElement(case, "failure", message=message, type="guarantee-violated")
            node.text = _clean(_failure_text(result))
        elif outcome == "error":
            errors += 1
            node = ET.SubElement(case, "error", message=message, type="error")
            node.text = _clean(_failure_text(result))
        elif outcome in ("skipped", "xfailed"):
            skipped += 1
            kind = result.get("skip_kind") or ("expected-failure" if outcome == "xfailed" else "unsupported")
            ET.SubElement(case, "skipped", message=message, type=_clean(kind))
    extra: list[tuple[str, str, str]] = []
    if run.unreachable:
        extra.append(("skipped", "backend reachable", f"not-reachable: {run.unreachable}"))
    elif not run.complete:
        extra.append(("error", "run complete", f"incomplete run: {run.incomplete_reason}"))
    for error in (run.end or {}).get("collection_errors", []) or []:
        extra.append(("error", "collection", str(error)))
    for kind, name, text in extra:
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=_clean(f"{classname}.run"), name=name, time="0")
        attrs = {"message": _clean(text[:1000]), "type": "not-reachable" if kind == "skipped" else "kit-run"}
        node = ET.SubElement(case, kind, attrs)
        if kind == "error":
            node.text = _clean(text)
            errors += 1
        else:
            skipped += 1
    # Not-promised skips are counted apart (each is also a <skipped type="not-promised">).
    not_promised = sum(1 for r in run.results if r.get("skip_kind") == NOT_PROMISED)
    ET.SubElement(props, "property", name="not_promised", value=str(not_promised))
    ET.SubElement(props, "property", name="skipped_other", value=str(skipped - not_promised))
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{total_time:.6f}")
    return suite


def render_junit(report: Report) -> str:
    """The JUnit XML text of ``report``."""
    root = ET.Element("testsuites", name=_clean(f"kit {report.name}"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for run in report.runs:
        suite = _suite(run)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        total_time += float(suite.get("time", "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{total_time:.6f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
