"""Reports of real runs on sqlite, postgres and mysql, and their merge into one matrix.

The servers are discovered as in the conformance suites (``KIT_<BACKEND>_URL``,
then the local default, then testcontainers): unreachable ones skip as
``not-reachable``, and fail instead when ``KIT_REQUIRE_BACKENDS`` names them
(as CI does). A small keyword-filtered suite keeps these fast.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path

import pytest

from kit.pytest_plugin import use_backend
from kit.report import ReportWriter, load_report, merge_reports, render_all
from kit.report.matrix import area_matrix
from kit.runner import run_suite

KEYWORD = "definitions"
BACKENDS = ("sqlite", "postgres", "mysql")


def _report_of(name: str, root: Path) -> Path:
    """Run the ``definitions`` checks on backend ``name`` and write its report (skips if unreachable)."""
    with contextmanager(use_backend)(name) as backend:  # skips (or fails if required) when unreachable
        writer = ReportWriter.create(root, name)
        writer.start_run(backend=name, backend_obj=backend, seed=1, profile="quick", keyword=KEYWORD,
                         command=f"kit check {name} -k {KEYWORD} --seed 1")
        suite = run_suite(backend, keyword=KEYWORD, extra_args=["--kit-seed", "1"], on_result=writer.add)
        writer.end_suite(suite)
        return writer.finish()


@pytest.fixture(scope="module")
def reports_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reports")


@pytest.fixture(scope="module")
def made(reports_root: Path) -> dict[str, Path | str]:
    """Backend name -> its report folder, or why it was skipped (filled as the tests run)."""
    return {}


def _get(name: str, made: dict[str, Path | str], root: Path) -> Path:
    if name not in made:
        try:
            made[name] = _report_of(name, root)
        except pytest.skip.Exception as exc:
            made[name] = str(exc)
            raise
    found = made[name]
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.mark.parametrize("name", BACKENDS)
def test_a_backend_run_writes_its_report(name: str, made: dict[str, Path | str], reports_root: Path) -> None:
    folder = _get(name, made, reports_root)
    data = json.loads((folder / "results.json").read_text())
    assert data["complete"] and data["ok"], (folder / "summary.md").read_text()
    (run,) = data["runs"]
    versions = run["versions"]
    assert versions["kit"] and versions["python"] and versions["driver"] and versions["server"], versions
    assert run["results"] and all(r["duration_s"] >= 0 for r in run["results"])
    assert {r["area"] for r in run["results"]} >= {"definitions"}
    suite = ET.parse(folder / "junit.xml").getroot().find("testsuite")
    assert suite is not None and int(suite.get("tests", "0")) == len(run["results"])
    assert "| definitions | pass " in (folder / "summary.md").read_text()


def test_reports_of_every_reachable_backend_merge_into_one_matrix(
    made: dict[str, Path | str], reports_root: Path, tmp_path: Path,
) -> None:
    folders = []
    missing = []
    for name in BACKENDS:
        try:
            folders.append(_get(name, made, reports_root))
        except pytest.skip.Exception as exc:  # unreachable and not required: merged without it
            missing.append(f"{name} ({exc})")
    merged = merge_reports([load_report(f) for f in folders])
    render_all(merged, tmp_path)
    labels = [run.label for run in merged.runs]
    assert labels == [n for n in BACKENDS if any(lbl == n for lbl in labels)] and "sqlite" in labels
    definitions = dict(area_matrix(merged))["definitions"]
    assert [cell.status for cell in definitions] == ["pass"] * len(labels)
    summary = (tmp_path / "summary.md").read_text()
    assert "| area | " + " | ".join(labels) + " |" in summary
    assert "Every check that ran on more than one backend had the same outcome" in summary or len(labels) == 1
    assert json.loads((tmp_path / "results.json").read_text())["kind"] == "merge"
    ET.parse(tmp_path / "junit.xml")
    if missing:
        print("merged without:", "; ".join(missing))
