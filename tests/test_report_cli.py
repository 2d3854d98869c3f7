"""`kit check` writes a report (also when it crashes or cannot reach its backend); `kit report` renders and merges."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kit.cli import main

CRASH_AFTER = 3

CRASHING_KIT = textwrap.dedent(f"""
    import os, signal, sys
    import kit.runner as runner

    real = runner.run_suite

    def crashing(backend, keyword=None, extra_args=(), on_result=None, on_collected=None):
        seen = []

        def hook(result):
            on_result(result)
            seen.append(result)
            if len(seen) == {CRASH_AFTER}:
                os.kill(os.getpid(), signal.SIGKILL)  # the kit dies mid-run, no cleanup at all

        return real(backend, keyword=keyword, extra_args=extra_args, on_result=hook, on_collected=on_collected)

    runner.run_suite = crashing
    from kit.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _only_folder(root: Path) -> Path:
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    return folder


def test_kit_check_writes_a_report_and_prints_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "sqlite", "-k", "definitions", "--no-progress", "--seed", "5", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    folder = _only_folder(tmp_path)
    assert folder.name.endswith("-sqlite")
    assert f"report: {folder / 'index.html'}" in out.replace("\n", "")
    data = json.loads((folder / "results.json").read_text())
    (run,) = data["runs"]
    assert data["complete"] and run["seed"] == 5 and run["profile"] == "quick" and run["keyword"] == "definitions"
    assert run["versions"]["server"].startswith("SQLite ") and run["command"] == \
        "kit check sqlite -k definitions --seed 5 --profile quick"
    assert len(run["results"]) >= 9 and all(r["outcome"] == "passed" for r in run["results"])
    ET.parse(folder / "junit.xml")


def test_no_report_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "sqlite", "-k", "definitions", "--no-progress", "--no-report",
                 "--report-dir", str(tmp_path / "r")]) == 0
    assert not (tmp_path / "r").exists() and "report:" not in capsys.readouterr().out


def test_an_unreachable_backend_stays_one_line_and_writes_no_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("kit.discovery.docker_engine", lambda: (False, "no Docker engine answers (test)"))
    monkeypatch.setenv("COLUMNS", "2000")
    url = "postgresql+psycopg://nobody:TopS3cretPw@127.0.0.1:1/nothing"
    code = main(["check", "postgres", "--url", url, "--no-progress", "--report-dir", str(tmp_path / "r")])
    out = capsys.readouterr().err.strip()
    assert code == 3 and "TopS3cretPw" not in out and len(out.splitlines()) == 1, out
    assert not (tmp_path / "r").exists()


def test_bad_report_dir_is_one_line_naming_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["check", "sqlite", "-k", "definitions", "--no-progress", "--report-dir", str(blocker / "sub")])
    out = capsys.readouterr().err
    assert code == 2 and "pass --report-dir DIR, or --no-report" in out and "Traceback" not in out


def test_a_killed_kit_check_leaves_a_report_that_kit_report_renders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    reports = tmp_path / "reports"
    done = subprocess.run(
        [sys.executable, "-c", CRASHING_KIT, "check", "sqlite", "-k", "definitions", "--no-progress",
         "--report-dir", str(reports)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == -9, done.stderr
    folder = _only_folder(reports)
    assert [p.name for p in folder.iterdir()] == ["results.jsonl"]  # nothing rendered: the kit was killed
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "INCOMPLETE" in out and f"report: {folder / 'index.html'}" in out.replace("\n", "")
    data = json.loads((folder / "results.json").read_text())
    assert data["complete"] is False and len(data["runs"][0]["results"]) == CRASH_AFTER
    assert 'id="incomplete"' in (folder / "index.html").read_text()
    assert "INCOMPLETE REPORT" in (folder / "summary.md").read_text()


def test_kit_report_merges_several_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    for backend in ("sqlite", "memory"):
        assert main(["check", backend, "-k", "definitions", "--no-progress", "--report-dir", str(runs)]) == 0
    folders = sorted(str(p) for p in runs.iterdir())
    capsys.readouterr()
    assert main(["report", *folders, "--report-dir", str(tmp_path / "merged")]) == 0
    out = capsys.readouterr().out
    merged = _only_folder(tmp_path / "merged")
    assert merged.name.endswith("-merge") and f"report: {merged / 'index.html'}" in out.replace("\n", "")
    data = json.loads((merged / "results.json").read_text())
    assert data["kind"] == "merge" and sorted(r["label"] for r in data["runs"]) == ["memory", "sqlite"]
    assert "| definitions | pass 13 | pass 13 |" in (merged / "summary.md").read_text()  # 9 definition checks + 4 listing versions
    assert main(["report", *folders, "--out", str(tmp_path / "explicit")]) == 0
    assert (tmp_path / "explicit" / "index.html").is_file()


@pytest.mark.parametrize(("make", "expected"), [
    (lambda p: p / "missing", "no report at"),
    (lambda p: p, "is not a kit report"),
    (lambda p: (p / "x.txt", (p / "x.txt").write_text(""))[0], "is a file, not a report folder"),
])
def test_kit_report_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, expected: str,
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    assert main(["report", str(path)]) == 2
    out = capsys.readouterr().err.strip()
    assert expected in out and out.startswith("kit: error:") and len(out.splitlines()) == 1, out


def test_kit_report_on_a_folder_of_reports_says_to_pass_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "memory", "-k", "definitions", "--no-progress", "--report-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 2
    assert f"pass them instead, e.g. kit report {tmp_path}/*" in capsys.readouterr().err.replace("\n", "")


def test_an_exception_in_kit_check_leaves_a_partial_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kit.report import CheckResult

    def crashing(backend: object, **kwargs: Any) -> None:
        kwargs["on_result"](CheckResult("definitions.a", "definitions", "t.py::T::test_a", "passed", 0.1))
        raise RuntimeError("the kit crashed")

    monkeypatch.setattr("kit.runner.run_suite", crashing)
    with pytest.raises(RuntimeError):
        main(["check", "sqlite", "--no-progress", "--report-dir", str(tmp_path)])
    folder = _only_folder(tmp_path)
    assert "partial report (incomplete)" in capsys.readouterr().out
    data = json.loads((folder / "results.json").read_text())
    assert data["complete"] is False and len(data["runs"][0]["results"]) == 1
    assert data["runs"][0]["incomplete_reason"] == "the kit stopped: RuntimeError: the kit crashed"


def test_an_interrupted_session_is_an_incomplete_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kit.runner

    real = kit.runner.run_suite

    def interrupted(backend: Any, **kwargs: Any) -> Any:
        on_result = kwargs["on_result"]

        def hook(result: Any) -> None:
            on_result(result)
            raise KeyboardInterrupt  # Ctrl-C after the first check: pytest ends the session (exit 2)

        return real(backend, **{**kwargs, "on_result": hook})

    monkeypatch.setattr(kit.runner, "run_suite", interrupted)
    main(["check", "sqlite", "-k", "definitions", "--no-progress", "--report-dir", str(tmp_path)])
    data = json.loads((_only_folder(tmp_path) / "results.json").read_text())
    assert data["complete"] is False and len(data["runs"][0]["results"]) == 1
    assert data["runs"][0]["incomplete_reason"] == "pytest stopped the session early: interrupted (exit 2)"


def test_rendering_a_merge_again_stays_in_the_merge_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    for backend in ("sqlite", "memory"):
        assert main(["check", backend, "-k", "definitions", "--no-progress", "--report-dir", str(runs)]) == 0
    folders = sorted(runs.iterdir())
    before = {f: (f / "results.json").read_text() for f in folders}
    assert main(["report", *map(str, folders), "--out", str(tmp_path / "merged")]) == 0
    assert main(["report", str(tmp_path / "merged")]) == 0
    assert {f: (f / "results.json").read_text() for f in folders} == before  # the sources are untouched
    assert json.loads((tmp_path / "merged" / "results.json").read_text())["kind"] == "merge"
    assert main(["report", str(folders[0]), "--out", str(folders[1])]) == 2
    assert "already holds another run's journal" in capsys.readouterr().err
