"""Reports: the journal, the four rendered files, merging, typed skips, and no password anywhere."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kit.report import (
    CheckResult,
    ReportWriter,
    TimelineEvent,
    load_report,
    merge_reports,
    render_all,
)
from kit.report.load import ReportInputError
from kit.report.matrix import area_matrix, check_rows
from kit.report.meta import Scrubber, replay_command, reproduce_command

SECRET = "s3cretPassw0rd"
URL = f"postgresql+psycopg://kit:{SECRET}@127.0.0.1:5432/kit"


def _results() -> list[CheckResult]:
    nodeid = "_target.py::TestConformance::test_{}"
    return [
        CheckResult("claims.claim_is_exclusive", "claims", nodeid.format("claim_is_exclusive"), "passed", 0.25,
                    "Only one worker holds a claim."),
        CheckResult("claims.skip_locked_claims", "claims", nodeid.format("skip_locked_claims"), "skipped", 0.0,
                    "Claimers skip locked rows.", "unsupported: backend 'x' does not declare skip_locked", "unsupported"),
        CheckResult("commit.revision_mismatch", "commit", nodeid.format("revision_mismatch"), "failed", 0.5,
                    "A decision on an old revision changes nothing.", f"AssertionError: stored via {URL}", None,
                    f"long traceback\nconnect({URL!r}) password={SECRET}\n"),
        CheckResult("commit.outcome_precedence", "commit", nodeid.format("outcome_precedence"), "xfailed", 0.1,
                    "Outcomes are checked in order.", "expected-failure: known to differ", "expected-failure"),
        CheckResult("machines.fault_machine_agrees_with_reference", "machines",
                    nodeid.format("fault_machine_agrees_with_reference"), "failed", 3.0,
                    "Under generated faults every answer matches the reference engine.",
                    "Failed: step 3 diverged", None,
                    "step 3 diverged\nseed 42, profile quick, 4 steps after shrinking; saved to scenarios/seeds/b.json\n"
                    "replay: kit replay scenarios/seeds/b.json --backend postgres"),
        CheckResult("keys.sample", "keys", nodeid.format("sample[nul\x00byte]"), "passed", 0.01, "Keys round-trip."),
    ]


def _write(root: Path, label: str = "postgres", results: list[CheckResult] | None = None, end: bool = True) -> Path:
    writer = ReportWriter.create(root, label, urls=[URL])
    writer.start_run(backend="postgres", label=label, url=URL, seed=42, profile="quick", keyword="claims",
                     command=f"kit check postgres --url {URL}")
    for result in _results() if results is None else results:
        writer.add(result)
    if end:
        writer.end_run(duration_s=3.9, exit_code=1)
        return writer.finish()
    return writer.folder


def _all_text(folder: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(folder.iterdir()) if p.is_file())


def test_a_run_writes_four_files_and_its_journal(tmp_path: Path) -> None:
    folder = _write(tmp_path)
    assert folder.parent == tmp_path and folder.name.endswith("-postgres")
    assert {p.name for p in folder.iterdir()} == {"results.jsonl", "results.json", "summary.md", "junit.xml", "index.html"}
    data = json.loads((folder / "results.json").read_text())
    assert data["format"] == "kit-report/1" and data["complete"] is True and data["ok"] is False
    (run,) = data["runs"]
    assert run["seed"] == 42 and run["profile"] == "quick" and run["keyword"] == "claims"
    assert {"kit", "python", "pytest", "hypothesis", "driver"} <= set(run["versions"])
    assert run["versions"]["driver"].startswith("psycopg")
    outcomes = {r["check"]: (r["outcome"], r["skip_kind"], r["duration_s"]) for r in run["results"]}
    assert outcomes["claims.skip_locked_claims"] == ("skipped", "unsupported", 0.0)
    assert outcomes["commit.outcome_precedence"] == ("xfailed", "expected-failure", 0.1)
    assert outcomes["claims.claim_is_exclusive"] == ("passed", None, 0.25)
    assert run["counts"] == {"failed": 2, "passed": 2, "skipped": 1, "xfailed": 1}


def test_results_json_is_streamed_to_disk_as_json_dumps_would_write_it(tmp_path: Path) -> None:
    # json.dumps with an indent holds one small string per token (about 9x the file) before the write;
    # a long stress run's report is written piece by piece instead, with the same bytes.
    from kit.report._atomic import write_atomic
    from kit.report.load import read_journal

    folder = _write(tmp_path)
    expected = json.dumps(read_journal(folder).to_json(), indent=1, ensure_ascii=False, default=str) + "\n"
    assert (folder / "results.json").read_text(encoding="utf-8") == expected
    write_atomic(tmp_path / "pieces.txt", iter(["one ", "file, ", "in pieces"]))
    assert (tmp_path / "pieces.txt").read_text(encoding="utf-8") == "one file, in pieces"
    assert not list(tmp_path.glob(".pieces.txt.*")), "the temporary file was left behind"


def test_index_html_is_streamed_piece_by_piece_with_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stress run's timeline is thousands of SVG elements: the page used to be built whole (and copied
    # into its template twice) before the write; now no piece written holds more than one lane's line.
    from kit.report import render
    from kit.report.html import html_pieces, render_html
    from kit.report.model import Report, RunRecord, TimelineEvent

    events = [TimelineEvent(f"w{i % 4}", i / 100, "commit" if i % 2 else "claim", i / 100 + 0.005, f"commit run-{i} ok")
              for i in range(3000)]
    report = Report(name="r", kind="stress", runs=[RunRecord(id="s", meta={"label": "stress"}, events=events)])
    written: dict[str, object] = {}
    real_write = render.write_atomic

    def spy(path: Path, text: object) -> None:
        if path.name == "index.html":
            pieces = [text] if isinstance(text, str) else list(text)  # type: ignore[call-overload]
            written["pieces"] = pieces
            text = iter(pieces)
        real_write(path, text)  # type: ignore[arg-type]

    monkeypatch.setattr(render, "write_atomic", spy)
    page = render.render_all(report, tmp_path)
    pieces: list[str] = written["pieces"]  # type: ignore[assignment]
    whole = "".join(pieces)
    assert page.read_text(encoding="utf-8") == whole == render_html(report) == "".join(html_pieces(report))
    assert whole.count("<rect ") == 3000 + 2  # every event, and the legend's two swatches (claim, commit)
    largest = max(len(piece) for piece in pieces)
    assert largest < len(whole) / 20, f"one piece holds {largest} of the page's {len(whole)} characters"


def test_timeline_events_read_back_share_their_worker_and_kind_and_have_no_dict() -> None:
    from kit.report.model import TimelineEvent

    raw = json.loads(json.dumps([{"worker": "decider-1", "start": 0.5, "kind": "commit", "label": f"e{i}"}
                                 for i in range(2)]))
    first, second = (TimelineEvent.from_json(item) for item in raw)
    assert first.worker is second.worker and first.kind is second.kind
    assert not hasattr(first, "__dict__")


def test_no_password_reaches_any_file(tmp_path: Path) -> None:
    folder = _write(tmp_path)
    text = _all_text(folder)
    assert SECRET not in text
    assert "postgresql+psycopg://kit:***@127.0.0.1:5432/kit" in text


def test_scrubber_knows_env_urls_and_key_value_passwords(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_MYSQL_URL", "mysql+pymysql://root:hunter2hunter@localhost/kit")
    scrub = Scrubber.for_urls([])
    assert scrub("login failed for hunter2hunter") == "login failed for ***"
    assert scrub({"dsn": "host=db password='x y z' user=kit"}) == {"dsn": "host=db password=*** user=kit"}
    assert scrub(["mssql+pyodbc://sa:Pa55word!@h/db"]) == ["mssql+pyodbc://sa:***@h/db"]


def test_failures_carry_their_reproduce_command(tmp_path: Path) -> None:
    report = load_report(_write(tmp_path))
    failed = {r["check"]: r["reproduce"] for r in report.runs[0].failed}
    assert failed["machines.fault_machine_agrees_with_reference"] == \
        "kit replay scenarios/seeds/b.json --backend postgres"
    assert failed["commit.revision_mismatch"] == \
        "kit check postgres --url 'postgresql+psycopg://kit:***@127.0.0.1:5432/kit' -k test_revision_mismatch"


def test_reproduce_of_a_machine_failure_without_bundle_keeps_the_seed() -> None:
    result = {"check": "machines.x", "area": "machines", "nodeid": "t.py::T::test_x", "message": "machine broke"}
    assert reproduce_command(result, "sqlite", seed=9, profile="quick") == \
        "kit check sqlite -k test_x --seed 9 --profile quick"
    assert replay_command("no bundle here") is None


def test_junit_parses_and_names_guarantee_and_reproduce(tmp_path: Path) -> None:
    folder = _write(tmp_path)
    root = ET.parse(folder / "junit.xml").getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("6", "2", "0", "2")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["seed"] == "42" and props["backend"] == "postgres" and props["version.kit"]
    failures = {c.get("name"): c.find("failure") for c in suite.iter("testcase") if c.find("failure") is not None}
    machine = failures["machines.fault_machine_agrees_with_reference"]
    assert machine is not None and machine.text is not None
    assert "guarantee: Under generated faults" in machine.text
    assert "reproduce: kit replay scenarios/seeds/b.json --backend postgres" in machine.text
    skipped = {c.get("name"): c.find("skipped") for c in suite.iter("testcase") if c.find("skipped") is not None}
    assert {s.get("type") for s in skipped.values() if s is not None} == {"unsupported", "expected-failure"}
    assert "keys.sample[nulbyte]" in {c.get("name") for c in suite.iter("testcase")}  # NUL dropped, still parses


def test_junit_parses_with_junitparser(tmp_path: Path) -> None:
    junitparser = pytest.importorskip("junitparser", reason="junitparser is in the test extra: pip install -e '.[test]'")
    xml = junitparser.JUnitXml.fromfile(str(_write(tmp_path) / "junit.xml"))
    cases = [case for suite in xml for case in suite]
    assert len(cases) == 6
    failed = [case for case in cases if any(isinstance(r, junitparser.Failure) for r in case.result)]
    assert len(failed) == 2


def test_summary_has_the_area_matrix_and_typed_skips(tmp_path: Path) -> None:
    summary = (_write(tmp_path) / "summary.md").read_text()
    assert "| area | postgres |" in summary
    assert "| commit | **FAIL 1/2** |" in summary
    assert "| claims | pass 1 · skip 1 |" in summary
    assert "| unsupported | unsupported: backend 'x' does not declare skip_locked | postgres (1) |" in summary
    assert "reproduce: `kit replay scenarios/seeds/b.json --backend postgres`" in summary


def test_html_is_one_offline_file(tmp_path: Path) -> None:
    html = (_write(tmp_path) / "index.html").read_text()
    assert 'id="matrix"' in html and "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    assert "<link rel=\"stylesheet\"" not in html and "<script src" not in html
    assert 'id="no-series"' in html and 'id="no-timeline"' in html  # empty states: a check run has no stress data
    assert "kit replay scenarios/seeds/b.json --backend postgres" in html


def test_stress_series_and_timelines_are_recorded_and_plotted(tmp_path: Path) -> None:
    writer = ReportWriter.create(tmp_path, "stress")
    writer.start_run(backend="sqlite", tool="stress")
    writer.add_points("claim p99", [(0.0, 1.5), (1.0, 2.5)], kind="latency", unit="ms")
    writer.add_points("claim p99", [(2.0, 2.0)], kind="latency", unit="ms")  # appended as the run goes
    writer.add_points("commits", [(0.0, 10.0), (1.0, 12.0)], kind="throughput", unit="ops/s")
    writer.add_event("w1", 0.1, "claim", 0.4, "r1")
    writer.add_event("w1", 0.5, "fault", None, "lost ack")
    writer.add_events([TimelineEvent("w2", 0.2, "commit", 0.3), TimelineEvent("w2", 0.6, "claim", 0.9)])
    writer.end_run(duration_s=2.0)
    folder = writer.finish()
    run = load_report(folder).runs[0]
    assert [(s.name, len(s.points)) for s in run.series] == [("claim p99", 3), ("commits", 2)]
    assert run.events[1] == TimelineEvent("w1", 0.5, "fault", None, "lost ack")
    assert [e.worker for e in run.events] == ["w1", "w1", "w2", "w2"]
    html = (folder / "index.html").read_text()
    assert html.count('class="plot-series"') == 2 and html.count('class="plot-timeline"') == 1
    assert 'id="no-series"' not in html


def test_a_torn_last_line_is_dropped_with_a_note(tmp_path: Path) -> None:
    folder = _write(tmp_path, end=False)
    with open(folder / "results.jsonl", "a", encoding="utf-8") as journal:
        journal.write('{"type": "result", "run": "postgres", "result": {"check": "cut sh')
    report = load_report(folder)
    assert not report.complete and len(report.runs[0].results) == 6
    assert report.notes and "cut short" in report.notes[0]
    render_all(report, folder)
    assert "INCOMPLETE REPORT" in (folder / "summary.md").read_text()
    junit = ET.parse(folder / "junit.xml").getroot()
    assert any(c.get("name") == "run complete" and c.find("error") is not None for c in junit.iter("testcase"))


def test_an_exception_leaves_rendered_files_marked_incomplete(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), ReportWriter.create(tmp_path, "sqlite") as writer:
        writer.start_run(backend="sqlite")
        writer.add(_results()[0])
        raise RuntimeError("server went away")
    data = json.loads((writer.folder / "results.json").read_text())
    assert data["complete"] is False
    assert data["runs"][0]["incomplete_reason"] == "the kit stopped: RuntimeError: server went away"
    assert len(data["runs"][0]["results"]) == 1


def test_merge_has_one_column_per_run_and_shows_differences(tmp_path: Path) -> None:
    a = _write(tmp_path, "postgres")
    b = _write(tmp_path, "sqlite", results=[
        CheckResult("commit.revision_mismatch", "commit", "_target.py::T::test_revision_mismatch", "passed", 0.1),
        CheckResult("claims.claim_is_exclusive", "claims", "_target.py::T::test_claim_is_exclusive", "passed", 0.1),
    ])
    c = _write(tmp_path, "sqlite", results=[])
    merged = merge_reports([load_report(a), load_report(b), load_report(c)])
    assert [run.label for run in merged.runs] == ["postgres", "sqlite", "sqlite (2)"]
    matrix = dict(area_matrix(merged))
    assert [cell.status for cell in matrix["commit"]] == ["fail", "pass", "none"]
    differing = {row.key for row in check_rows(merged) if row.differs}
    assert differing == {"commit.revision_mismatch"}
    out = tmp_path / "merged"
    render_all(merged, out)
    again = load_report(out)  # a merge is a report: it loads (and merges) again
    assert again.kind == "merge" and len(again.runs) == 3
    assert "## Where backends differ" in (out / "summary.md").read_text()


def test_not_a_report_is_an_error_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ReportInputError, match="no report at .*: give a folder that kit check wrote"):
        load_report(tmp_path / "missing")
    with pytest.raises(ReportInputError, match="is not a kit report"):
        load_report(tmp_path)
    (tmp_path / "results.json").write_text('{"format": "something-else"}')
    with pytest.raises(ReportInputError, match="is not a kit report .format 'something-else'"):
        load_report(tmp_path)


def test_an_unreachable_run_is_typed_not_reachable_everywhere(tmp_path: Path) -> None:
    """The mutant table (and later stress) records a backend it could not reach as a run of its own."""
    writer = ReportWriter.create(tmp_path, "mysql", urls=[URL])
    writer.start_run(backend="mysql")
    writer.end_run(duration_s=0.0, exit_code=3, unreachable=f"cannot connect to {URL}. Give KIT_MYSQL_URL")
    folder = writer.finish()
    assert SECRET not in _all_text(folder)
    (run,) = json.loads((folder / "results.json").read_text())["runs"]
    assert run["unreachable"].startswith("cannot connect to postgresql+psycopg://kit:***@")
    skipped = [c.find("skipped") for c in ET.parse(folder / "junit.xml").getroot().iter("testcase")]
    assert [s.get("type") for s in skipped if s is not None] == ["not-reachable"]
    assert "not reachable" in (folder / "summary.md").read_text()
    assert "not-reachable" in (folder / "index.html").read_text()
