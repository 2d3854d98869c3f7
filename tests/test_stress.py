"""``kit stress`` end to end: every fault kind, real threads, real servers, every invariant valid.

Servers are discovered as for the conformance suites: an unreachable one skips
(``not-reachable``), and fails instead when ``KIT_REQUIRE_BACKENDS`` names it.
Durations are short (a few seconds of faults); ``kit stress`` defaults to 20.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kit.checkers import Status
from kit.cli import main
from kit.contract import Backend
from kit.faults.nemesis import ALL_FAULTS
from kit.pytest_plugin import use_backend
from kit.workload import StressConfig, read_entries, run_stress

SEED = 250  # its first 3 s plan at least three faults of every kind


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from use_backend(request.param)


def test_stress_is_clean_with_every_fault_kind(backend: Backend, tmp_path: Path) -> None:
    config = StressConfig(seed=SEED, workers=3, runs=12, duration_s=4.0, fault_interval_s=0.1, drain_s=45.0)
    result = run_stress(backend, config, report_root=tmp_path)
    failing = {v.invariant: v.explanation for v in result.verdicts if v.status is not Status.VALID}
    assert not failing, f"{backend.name}: {failing} (history {result.history})"
    assert not result.errors, result.errors
    assert [v.invariant for v in result.verdicts] == list(range(1, 11))
    assert {f.kind for f in result.plan} == set(ALL_FAULTS)
    assert set(result.summary["faults_delivered"]) == {k.value for k in ALL_FAULTS}
    # A fault waits for its operation and a run starts as another ends: how many of either land in
    # the time given depends on how fast the machine is, so no count of them is asserted, only that
    # what landed was planned and that everything drained.
    applied = result.summary["faults_applied"]
    assert set(applied) <= {k.value for k in ALL_FAULTS}, applied
    assert result.drain["open"] == 0 and result.runs_started >= 1
    ops = result.summary["operations"]
    assert ops["commit"]["ok"] > 0


@pytest.fixture
def sqlite() -> Iterator[Backend]:
    yield from use_backend("sqlite")


def test_the_history_records_every_operation_with_worker_generation_and_store_time(
    sqlite: Backend, tmp_path: Path
) -> None:
    backend = sqlite
    config = StressConfig(seed=3, workers=2, runs=6, duration_s=2.0, fault_interval_s=0.15)
    result = run_stress(backend, config, report_root=tmp_path)
    assert result.ok, [v.explanation for v in result.verdicts if v.status is not Status.VALID]
    entries = list(read_entries(result.history))
    assert [e["index"] for e in entries] == list(range(len(entries)))
    invokes = {e["index"]: e for e in entries if e["type"] == "invoke"}
    completions = [e for e in entries if "invoke" in e]
    assert {e["type"] for e in completions} <= {"ok", "fail", "info"} and len(completions) == len(invokes)
    for done in completions:
        assert invokes[done["invoke"]]["process"] == done["process"] and done["t"] >= invokes[done["invoke"]]["t"]
    commits = [e for e in completions if e["f"] == "commit"]
    assert all(e["gen"] >= 1 and e["run"] and e["store_us"] for e in commits)
    nemesis = [e for e in entries if e["process"] == "nemesis"]
    assert nemesis and all(e["type"] == "info" and "process" in e["value"] for e in nemesis)
    lost = [e for e in completions if "LostAcknowledgement" in e.get("error", "")]
    assert all(e["type"] == "info" for e in lost)  # never counted as success or failure


def test_kit_stress_command_prints_the_seed_and_every_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["stress", "--backend", "sqlite", "--duration", "2", "--seed", "11", "--workers", "2", "--runs", "6",
                 "--no-progress", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "seed 11 (repeat with: kit stress --backend sqlite --seed 11" in out
    for number, name in ((1, "history append only"), (4, "single live claim"), (9, "quiescent outcome"),
                         (10, "tenant isolation")):
        assert f"{name} (CONTRACT.md 6.{number}): valid" in out  # each verdict cites its invariant's section
    assert "PASS: every invariant held" in out
    [folder] = list(tmp_path.iterdir())
    assert folder.name.endswith("-sqlite-stress")
    for name in ("history.jsonl", "plan.json", "verdicts.json", "results.json", "summary.md", "junit.xml",
                 "index.html"):
        assert (folder / name).is_file(), name
    results = json.loads((folder / "results.json").read_text())["runs"][0]
    assert len(results["results"]) == 10 and {r["outcome"] for r in results["results"]} == {"passed"}
    assert results["seed"] == 11 and results["series"] and results["timeline"]


def test_kit_stress_rejects_bad_input_naming_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stress", "--faults", "nap", "--no-progress"]) == 2
    assert "unknown fault kind 'nap'" in capsys.readouterr().err
    assert main(["stress", "--scenarios", "order,nope", "--no-progress"]) == 2
    assert "unknown scenario" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # argparse refuses it while parsing: usage line, exit 2
        main(["stress", "--workers", "0", "--no-progress"])
    assert refused.value.code == 2
    assert "'0' is not a whole number of at least 1" in capsys.readouterr().err
