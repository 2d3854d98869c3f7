"""The first minutes with the kit: a local adapter imports, output fits CI logs, nothing is left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kit.cli import main

LOCAL_ADAPTER = textwrap.dedent("""
    from adapters.sqlite import SqliteBackend

    def make_backend():
        return SqliteBackend()
""")


def test_an_adapter_module_in_the_current_folder_is_importable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kit check mystore:make_backend` finds mystore.py in the current folder without PYTHONPATH."""
    (tmp_path / "kit_local_store.py").write_text(LOCAL_ADAPTER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    code = main(["check", "kit_local_store:make_backend", "-k", "definitions", "--no-progress", "--no-report",
                 "--seed", "1"])
    captured = capsys.readouterr()
    assert "cannot import" not in captured.out + captured.err
    assert code == 0, captured.out


def _kit(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The kit as CI runs it: not on a terminal, COLUMNS unset."""
    return _run(["-m", "kit.cli", *args], cwd=cwd, env=env)


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, **(env or {})}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_outside_a_terminal_lines_are_whole_and_errors_go_to_stderr(tmp_path: Path) -> None:
    """With COLUMNS unset and no TTY, a 250-character error line is one line, on stderr; stdout stays empty."""
    module = "m" * 250
    done = _kit("check", f"{module}:make_backend", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith("kit: error:") and f"'{module}'" in line


def test_no_report_leaves_the_working_folder_unchanged(tmp_path: Path) -> None:
    """`--no-report` writes no .hypothesis/ and no scenarios/seeds/ where it runs, even when a machine fails
    (the bundle goes to the temporary folder)."""
    work, temp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    temp.mkdir()
    repo = Path(__file__).resolve().parents[1]
    done = _kit("check", "tests.seeded_bugs.registry:timer_fires_early", "-k", "fault_machine", "--no-report",
                "--no-progress", "--seed", "20261129", cwd=work,
                env={"PYTHONPATH": str(repo), "TMPDIR": str(temp)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert list(work.iterdir()) == []
    assert len(list((temp / "kit-seeds").glob("*.json"))) == 1, "the failing scenario was not saved"


def test_a_failing_fixed_check_shows_the_values_it_compared(tmp_path: Path) -> None:
    """`kit check` names what a failed assert compared (pytest's assertion rewriting), not a bare AssertionError."""
    repo = Path(__file__).resolve().parents[1]
    done = _kit("check", "tests.seeded_bugs.registry:pagination_inclusive", "-k", "pagination_is_stable",
                "--no-report", "--no-progress", cwd=tmp_path, env={"PYTHONPATH": str(repo)})
    assert done.returncode == 1, done.stdout + done.stderr
    (error,) = [line for line in done.stdout.splitlines() if line.strip().startswith("error:")]
    assert "assert [" in error and "== [" in error and "'Run-x'" in error, error


def test_on_a_terminal_the_bar_moves_while_checks_run_and_the_machines_come_last(tmp_path: Path) -> None:
    """The progress bar knows its total and moves check by check (it used to stay at 0/? until the end,
    drawn into pytest's capture); the fault machines, the slow part, run after every fixed check."""
    import pty
    import re

    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
    with subprocess.Popen([sys.executable, "-m", "kit.cli", "check", "sqlite", "-k", "definitions or fault_machine",
                           "--no-report", "--seed", "3"], cwd=tmp_path, env=env, stdin=follower, stdout=follower,
                          stderr=follower) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=600) == 0
    os.close(leader)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    frames = [(area, int(done), int(total)) for area, done, total in re.findall(r"(\w+) \S+ (\d+)/(\d+) ", screen)]
    assert any(0 < done < total for _, done, total in frames), f"the bar never moved before the end: {frames}"
    first_done = next(area for area, done, _ in frames if done > 0)
    assert first_done != "machines", "the fault machines ran before the fixed checks"


def test_verdicts_without_timings_draw_no_empty_durations_chart(tmp_path: Path) -> None:
    """A stress report's invariant verdicts take no time of their own: no empty chart, no 0.000 s 'slowest checks'."""
    from kit.report import CheckResult, ReportWriter

    writer = ReportWriter.create(tmp_path, "stress")
    writer.start_run(backend="sqlite", tool="stress")
    for name in ("fencing", "history"):
        writer.add(CheckResult(f"invariants.{name}", "invariants", name, "passed", 0.0, "holds"))
    writer.end_run(duration_s=1.0, exit_code=0)
    html = (writer.finish() / "index.html").read_text()
    assert "No check durations recorded." in html
    assert "0.000 s" not in html and "slowest checks" not in html


def test_a_third_party_adapter_has_no_blank_server_or_driver(tmp_path: Path) -> None:
    from kit.report.meta import environment_versions

    class Custom:
        name = "mystore"

        def describe(self) -> str:
            return "MyStore 2.1 on a file"

    versions = environment_versions(Custom())
    assert versions["server"] == "MyStore 2.1 on a file"
    assert versions["driver"] and "versions()" in versions["driver"]


def test_a_saved_bundle_is_named_by_its_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay line keeps working from another folder (a merged report is read from anywhere)."""
    from kit.machines.bundle import save_bundle

    monkeypatch.chdir(tmp_path)
    path = save_bundle({"backend": "sqlite", "seed": 1, "steps": []}, "scenarios/seeds")
    assert path.is_absolute() and path.exists()


def test_kit_run_marks_failed_runs_its_scenarios_expect(tmp_path: Path) -> None:
    """`kit run all` shows '1 failed' next to PASS only as what the scenario expects."""
    from kit.commands.run import run_statuses

    assert run_statuses({"completed": 6, "failed": 1, "cancelled": 1}, ok=True) == \
        "1 cancelled as their scenario expects, 6 completed, 1 failed as their scenario expects"
    assert run_statuses({"completed": 6, "failed": 1}, ok=False) == "6 completed, 1 failed"
    done = _kit("run", "all", "--backend", "memory", "--runs", "8", "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = next(line for line in done.stdout.splitlines() if "runs" in line and "completed" in line)
    assert "failed" not in runs or "failed as their scenario expects" in runs, runs
