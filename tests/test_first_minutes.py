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
                           "--no-report", "--seed", "3", "--profile", "smoke"], cwd=tmp_path, env=env,
                          stdin=follower, stdout=follower, stderr=follower) as proc:
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
    # the machine has its own line while it runs: examples done of the budget, the step, the seed
    # (how often it moves is the watcher's business: tests/test_first_minutes.py's progress test counts every step)
    assert re.search(r"reference machine: example \d+/15, step \d+, seed 3 ", screen), "no machine line drawn"


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


def test_a_running_machine_reports_examples_steps_and_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever watches hears each new example (of the budget), the steps of the current one and the seed:
    what keeps kit check's progress line moving while a machine runs."""
    from kit.machines import progress
    from kit.machines.machine import PROFILES, run_machine
    from kit.reference import MemoryBackend

    monkeypatch.setattr(progress, "MIN_INTERVAL_S", 0.0)  # every step told, however fast the machine

    heard: list[progress.MachineProgress] = []
    budget = PROFILES["smoke"]
    with progress.watching(heard.append), progress.running("reference", 7, budget.max_examples, budget.steps):
        outcome = run_machine(MemoryBackend(), "smoke", 7)
    assert outcome.ok, outcome.failure
    assert {h.seed for h in heard} == {7} and {h.budget for h in heard} == {budget.max_examples}
    assert [h.examples for h in heard if h.steps == 0][:3] == [0, 1, 2], "each new example is told at once"
    assert max(h.examples for h in heard) >= budget.max_examples
    assert any(h.steps > 0 for h in heard), "steps within an example were never told"
    assert heard[-1].line().startswith(f"reference machine: example {budget.max_examples}/{budget.max_examples}")
    progress.step_applied()  # nobody watching, no run: a no-op (kit replay, the pytest route)


def test_the_smoke_profile_gives_a_verdict_with_a_short_machine_run(tmp_path: Path) -> None:
    """`kit check --profile smoke` runs the fixed checks and a short fault-machine run (fewer, shorter
    examples than quick), and says so in its JSON summary."""
    import json

    from kit.machines.machine import PROFILES
    from kit.machines.queue_machine import QUEUE_PROFILES

    for profiles in (PROFILES, QUEUE_PROFILES):
        smoke, quick = profiles["smoke"], profiles["quick"]
        assert smoke.max_examples < quick.max_examples and smoke.steps <= quick.steps
    done = _kit("check", "sqlite", "--profile", "smoke", "-k", "fault_machine or definitions", "--json",
                "--no-report", "--seed", "5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["profile"] == "smoke" and summary["verdict"] == "pass"
    assert summary["totals"]["passed"] >= 2 and summary["totals"]["failed"] == 0


def test_json_summary_on_stdout_and_the_human_output_on_stderr(tmp_path: Path) -> None:
    """`kit check --json`: stdout is one JSON object a script parses; the table and verdict go to stderr; a
    failure names its check, the contract section it proves, the compared values and how to reproduce."""
    import json

    repo = Path(__file__).resolve().parents[1]
    done = _kit("check", "tests.seeded_bugs.registry:pagination_inclusive", "-k", "pagination_is_stable",
                "--json", "--no-report", "--seed", "9", cwd=tmp_path, env={"PYTHONPATH": str(repo)})
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    summary = json.loads(line)
    assert summary["verdict"] == "fail" and summary["ok"] is False and summary["exit_code"] == 1
    assert summary["seed"] == 9 and summary["report"] is None and summary["format"] == 1
    assert summary["totals"] == {"passed": 0, "failed": 1, "not_promised": 0, "skipped": 0}
    (failure,) = summary["failures"]
    assert failure["check"] == "runs.pagination_is_stable"
    assert failure["contract"] == "docs/CONTRACT.md section 3.3 (Runs)"
    assert "assert [" in failure["message"] and failure["reproduce"][0].startswith("reproduce: kit check ")
    assert "FAILED runs.pagination_is_stable" in done.stderr and "FAIL:" in done.stderr
    assert "  contract: docs/CONTRACT.md section 3.3 (Runs)" in done.stderr


def test_every_check_cites_a_section_the_contract_has() -> None:
    """docs/CONTRACT.md is versioned, and every area of the suites (and every stress invariant) cites a
    numbered section that exists in it, under the title the kit prints."""
    import re

    from kit.checkers import CHECKERS
    from kit.conformance import ConformanceSuite
    from kit.conformance.queue import QueueSuite
    from kit.contract.sections import AREA_SECTIONS, CONTRACT_VERSION, section_of

    text = (Path(__file__).resolve().parents[1] / "docs" / "CONTRACT.md").read_text(encoding="utf-8")
    assert text.splitlines()[0] == "# The durable-workflow storage contract"
    assert f"**Version {CONTRACT_VERSION}**" in text and f"- **{CONTRACT_VERSION}**:" in text
    headings = {m.group(1): m.group(2) for m in re.finditer(r"^#{2,3} (\d+(?:\.\d+)?)\.? (.+)$", text, re.MULTILINE)}
    areas = {klass.area for suite in (ConformanceSuite, QueueSuite) for klass in suite.__mro__[1:]
             if "area" in vars(klass) and any(name.startswith("test_") for name in vars(klass))}
    assert areas - set(AREA_SECTIONS) == set(), "an area of the suite cites no section"
    for area in areas:
        number, title = AREA_SECTIONS[area]
        assert number in headings and headings[number].startswith(title), (area, number, title)
        assert section_of(f"{area}.x") == f"docs/CONTRACT.md section {number} ({title})"
    invariants = text.split("\n## 6. ", 1)[1].split("\n## ", 1)[0]
    listed = [int(n) for n in re.findall(r"^(\d+)\. ", invariants, re.MULTILINE)]
    assert listed == [number for number, _, _ in CHECKERS] == list(range(1, 11))
    assert section_of("stress.invariant_03_no_stale_effect") == "docs/CONTRACT.md section 6.3 (Invariants)"


def test_a_report_names_the_contract_section_of_each_failure(tmp_path: Path) -> None:
    from kit.report import CheckResult, ReportWriter

    writer = ReportWriter.create(tmp_path, "sqlite")
    writer.start_run(backend="sqlite", tool="check")
    writer.add(CheckResult("signals.duplicate_send_is_idempotent", "signals", "x", "failed", 0.1,
                            message="assert 1 == 2"))
    writer.end_run(duration_s=1.0, exit_code=1)
    folder = writer.finish()
    for name in ("index.html", "summary.md"):
        assert "docs/CONTRACT.md section 3.6 (Signals)" in (folder / name).read_text(), name


TIMER_FIRES_EARLY = [  # the reference machine's shrunk story for the seeded bug timer_fires_early
    {"body": "v1", "name": "wf", "op": "define", "worker": "w0"},
    {"op": "start", "run": "r0", "worker": "w0", "input": {"n": 1}},
    {"limit": 1, "op": "claim_runs", "worker": "w0"},
    {"decision": {"status": "blocked", "timers": [{"delay_ms": 1, "key": "t0"}]}, "op": "commit", "run": "r0",
     "worker": "w0"},
    {"offset_us": -1, "op": "advance_to", "target": "timer", "which": 0},
    {"limit": 1, "op": "fire_timers", "worker": "w0"},
]
#: what the bug needs: with a 1 ms timer it fires it at once, no clock move needed
MINIMAL = [step for step in TIMER_FIRES_EARLY if step["op"] != "advance_to"]
NO_OPS = {  # steps that do nothing at these places: a worker with no claim, a clock move with no deadline ahead
    1: {"offset_us": 0, "op": "advance_to", "target": "timer", "which": 0},
    3: {"decision": {"status": "completed", "output": 1}, "op": "commit", "run": "r0", "worker": "w2"},
    5: {"op": "renew", "run": "r0", "worker": "w1"},
}


def _with_no_ops() -> list[dict[str, object]]:
    steps = [dict(s) for s in TIMER_FIRES_EARLY]
    for at in sorted(NO_OPS, reverse=True):
        steps.insert(at, NO_OPS[at])
    return steps


def test_a_saved_bundle_drops_the_steps_that_did_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Shrinking keeps rules whose worker held no claim or whose clock move had no deadline ahead; the saved
    bundle drops them when the shorter story still reproduces, and `kit replay` reproduces it."""
    from kit.machines.bundle import load_bundle, make_bundle, prune_steps, replay, save_bundle
    from tests.seeded_bugs.registry import timer_fires_early

    backend = timer_fires_early()
    try:
        noisy = make_bundle("tests.seeded_bugs.registry:timer_fires_early", backend, "quick", 1, _with_no_ops(),
                            {"kind": "outcome", "step": 8})
        full = replay(noisy, backend)
        assert full.reproduced and [line for line in full.narration
                                    if "no claim held" in line or "no such deadline ahead" in line], full.narration
        pruned, message = prune_steps(noisy, backend)
    finally:
        backend.close()
    assert pruned["steps"] == MINIMAL  # the three no-ops, and the clock move the bug does not need
    assert pruned["pruned"] == {"steps_removed": 4, "steps_before": 9}
    assert message is not None and message.startswith("step 4 (w0 fires due timers")
    path = save_bundle(pruned, tmp_path)
    assert load_bundle(path)["steps"] == MINIMAL
    assert main(["replay", str(path)]) == 1, "the pruned bundle no longer reproduces"
    assert "reproduced the recorded divergence" in capsys.readouterr().out


def test_a_bundle_that_does_not_reproduce_when_pruned_is_kept_whole() -> None:
    """Pruning never trades the story for a shorter one that shows nothing: on a store where the steps do not
    diverge (or diverge otherwise) the bundle is saved as the machine recorded it."""
    from kit.machines.bundle import make_bundle, prune_steps
    from kit.reference import MemoryBackend

    backend = MemoryBackend()
    noisy = make_bundle("memory", backend, "quick", 1, _with_no_ops(), {"kind": "outcome", "step": 8})
    assert prune_steps(noisy, backend) == (noisy, None)


def test_the_browser_checks_say_why_they_skip_without_chromium(tmp_path: Path) -> None:
    """Under README command 2 without Chromium, the skipped browser checks say what they need, how to get it,
    and that CI installs it (pytest's -ra summary shows the reason)."""
    repo = Path(__file__).resolve().parents[1]
    empty = tmp_path / "bin"
    empty.mkdir()
    done = _run(["-m", "pytest", str(repo / "tests" / "test_report_browser.py"), "-n", "0", "-p", "no:randomly",
                 "-p", "no:cacheprovider"], cwd=repo, env={"PATH": str(empty), "KIT_REQUIRE_BROWSER": ""})
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED [")]
    assert len(skipped) == 3, done.stdout
    for line in skipped:
        assert "need Chromium" in line and "apt-get install -y chromium" in line and ".ci/run installs it" in line


def test_kit_check_runs_a_queue_store_with_its_queue_machine(tmp_path: Path) -> None:
    """`kit check` on a queue store (queue_promises, no capabilities) runs the queue machine, here at the smoke
    profile; it used to stop with an AttributeError while choosing a workflow machine."""
    import json

    done = _kit("check", "kit.queue.reference:MemoryQueueBackend", "--profile", "smoke", "-k", "machine", "--json",
                "--no-report", "--seed", "4", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["machine"] == "queue" and summary["verdict"] == "pass" and summary["totals"]["passed"] == 1
    assert "queue fault machine, profile smoke" in done.stderr


def test_a_saved_bundle_drops_the_steps_its_failure_does_not_need(tmp_path: Path) -> None:
    """Steps that did something the failure does not depend on (a refused duplicate start, reads, another
    run) go too, one at a time, each shorter story replayed; the steps the failure needs all stay."""
    from kit.machines.bundle import make_bundle, prune_steps
    from tests.seeded_bugs.registry import timer_fires_early

    extra = [
        (2, {"op": "start", "run": "r0", "worker": "w1"}),  # refused: RunAlreadyExists
        (4, {"op": "load", "run": "r0", "worker": "w0"}),  # a read
        (6, {"op": "start", "run": "r9", "worker": "w1", "input": [1]}),  # another run, after the claim
        (7, {"op": "list_page", "worker": "w2"}),  # another read
    ]
    steps = [dict(s) for s in TIMER_FIRES_EARLY]
    for at, step in extra:
        steps.insert(at, step)
    backend = timer_fires_early()
    try:
        noisy = make_bundle("tests.seeded_bugs.registry:timer_fires_early", backend, "quick", 1, steps,
                            {"kind": "outcome", "step": len(steps) - 1})
        pruned, message = prune_steps(noisy, backend)
    finally:
        backend.close()
    assert pruned["steps"] == MINIMAL, pruned["steps"]
    assert pruned["pruned"] == {"steps_removed": 5, "steps_before": 10}
    assert message is not None and "fires due timers" in message


def test_a_taken_state_equals_asdict_and_shares_nothing_mutable() -> None:
    """kit.inspect's entity conversion (a quarter of the fault machines' time was dataclasses.asdict) gives
    exactly what asdict gives, and the taken state shares no list, dict or set with the entity."""
    from dataclasses import asdict
    from datetime import UTC, datetime

    from kit.contract.entities import DefinitionRef, Run, RunStatus
    from kit.contract.json_exact import json_equal
    from kit.contract.json_samples import NUMBER_BOUNDARIES
    from kit.inspect import as_dict

    at = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    payload = {"numbers": list(NUMBER_BOUNDARIES), "flags": [True, False, None], "nested": [[{"k": "é"}]],
               "tuple": (1, [2]), "set": {3}}
    run = Run("r0", "t", DefinitionRef("wf", "1", "d" * 64), RunStatus.BLOCKED, 2, "w1", 3, at, None, False, True,
              "why", payload, [payload["nested"]], None, "k", at, at)
    taken, expected = as_dict(run), asdict(run)
    assert taken == expected and json_equal(taken["input"]["numbers"], expected["input"]["numbers"])
    assert type(taken["definition"]) is dict and taken["status"] is RunStatus.BLOCKED
    payload["nested"][0][0]["k"] = "changed"
    payload["tuple"][1].append(9)
    payload["set"].add(4)
    run.output[0].append("more")
    assert taken == expected, "the taken state changed with the entity"
