"""More cores and CI jobs for the fault machines: derived seeds, shards, and failures shared through
Hypothesis's example databases (a folder, and a real Redis at 127.0.0.1:6379)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kit.cli import main
from kit.contract.errors import ConfigurationError
from kit.machines.machine import run_machine
from kit.report import load_report, merge_reports
from kit.seeds import MAX_SEED, derive_seed
from kit.swarm import Shard, exploration_indices, exploration_of, parse_shard
from tests.seeded_bugs.registry import all_bugs

BUG = "timer_fires_early"
SPEC = f"tests.seeded_bugs.registry:{BUG}"
SEED = 20261129
"""Exploration 0 (the seed itself) kills the bug in its 12th example; exploration 1 only in its 9th."""
ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("KIT_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


# -- seeds and shards -------------------------------------------------------------
def test_derived_seeds_are_distinct_stable_and_accepted_back_as_seeds() -> None:
    assert derive_seed(SEED, 0) == SEED  # one worker explores exactly what --seed always explored
    seeds = [derive_seed(SEED, i) for i in range(64)]
    assert len(set(seeds)) == 64
    assert seeds == [derive_seed(SEED, i) for i in range(64)]
    assert all(0 <= s <= MAX_SEED for s in seeds)
    assert derive_seed(SEED + 1, 1) != derive_seed(SEED, 1)


@pytest.mark.parametrize(("workers", "count"), [(1, 1), (2, 1), (1, 2), (2, 3), (3, 2)])
def test_shards_split_the_explorations_of_one_run_with_workers_times_shards(workers: int, count: int) -> None:
    """N shards with --workers W run, between them, each exploration of one --workers W*N run exactly once."""
    per_shard = [exploration_indices(workers, Shard(i, count)) for i in range(1, count + 1)]
    assert all(len(indices) == workers for indices in per_shard)
    flat = sorted(i for indices in per_shard for i in indices)
    assert flat == exploration_indices(workers * count, Shard()) == list(range(workers * count))
    assert exploration_of(f"x::test_fault_machine_agrees_with_reference[exploration{flat[-1]}]") == flat[-1]


@pytest.mark.parametrize("text", ["3/2", "0/2", "x", "1/0", "1-2", "/2", "1/2/3"])
def test_a_bad_shard_is_refused_naming_the_fix(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigurationError, match="I/N"):
        parse_shard(text)
    code = main(["check", "memory", "--shard", text, "--no-report", "--no-progress"])
    out = capsys.readouterr()
    text_out = (out.out + out.err).strip()
    assert code == 2, text_out
    assert len(text_out.splitlines()) == 1 and "--shard 1/2" in text_out and "Traceback" not in text_out


def test_a_bad_or_unreachable_example_db_is_refused_before_any_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "memory", "--example-db", "ftp://x", "--no-report", "--no-progress"]) == 2
    assert "redis://HOST:PORT" in capsys.readouterr().err
    assert main(["check", "memory", "--example-db", __file__, "--no-report", "--no-progress"]) == 2
    assert "is a file" in capsys.readouterr().err
    assert main(["check", "memory", "--example-db", "redis://127.0.0.1:1", "--no-report", "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "--example-db DIR" in err and len(err.strip().splitlines()) == 1


RECORD_STEPS = textwrap.dedent("""
    import importlib, json, sys
    seed, db = int(sys.argv[1]), sys.argv[2]
    for name in sys.argv[3:]:  # what the kit check route loads besides the machine
        importlib.import_module(name)
    import kit.machines.machine as machine
    from kit.reference import MemoryBackend
    from kit.swarm import open_example_db

    steps = []
    real = machine._Machine.step

    def recording(self, step):
        steps.append(step)
        return real(self, step)

    machine._Machine.step = recording
    database = open_example_db(None if db == "-" else db, "memory/reference/pinned")
    outcome = machine.run_machine(MemoryBackend(), machine.Profile("pinned", 8, 30), seed, shrink=False,
                                  example_db=database)
    print(json.dumps({"error": outcome.error, "steps": steps}, sort_keys=True, default=str))
""")


def _steps(seed: int, db: str, *modules: str) -> list[object]:
    done = subprocess.run([sys.executable, "-c", RECORD_STEPS, str(seed), db, *modules], check=False,
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONHASHSEED": "random"})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["error"] is None, result["error"]
    steps: list[object] = result["steps"]
    return steps


def test_a_derived_seed_is_one_scenario_whatever_is_loaded_and_with_an_empty_example_db(tmp_path: Path) -> None:
    """pinned_generation holds for derived seeds: exploration 1 generates the same steps alone (no
    database, nothing else loaded) as on the kit check route (its modules loaded, an empty example
    database in use), and other steps than exploration 0."""
    seed = derive_seed(SEED, 1)
    alone = _steps(seed, "-")
    routed = _steps(seed, str(tmp_path / "db"), "kit.cli", "kit.commands.check", "kit.conformance", "kit.swarm_run")
    assert len(alone) > 30 and alone == routed
    assert _steps(SEED, "-")[:len(alone)] != alone


# -- failures shared through the example database ------------------------------------
def _redis_or_skip() -> Any:
    try:
        from redis import Redis

        client = Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure to reach Redis is a skip (or a failure if required)
        if os.environ.get("KIT_REQUIRE_REDIS") == "1":
            pytest.fail(f"Redis at {REDIS_URL} is not reachable ({type(exc).__name__}: {exc}); "
                        "KIT_REQUIRE_REDIS=1 requires it", pytrace=False)
        pytest.skip(f"not-reachable: Redis at {REDIS_URL} ({type(exc).__name__}); start it or set KIT_TEST_REDIS_URL")
    return client


@pytest.fixture(params=["directory", "redis"])
def example_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh example database: a folder, or a real Redis (its own database URL, keys removed after)."""
    if request.param == "directory":
        yield str(tmp_path / "example-db")
        return
    client = _redis_or_skip()
    # the kit namespaces keys per backend spec: a unique spec keeps this test's keys apart from any other run
    pattern = f"kit-example:*{BUG}*"
    for key in client.scan_iter(pattern):  # leftovers of an earlier, interrupted run of this test
        client.delete(key)
    yield REDIS_URL
    for key in client.scan_iter(pattern):
        client.delete(key)
    client.close()


def _shard(shard: str, db: str, root: Path) -> tuple[int, dict[str, Any]]:
    """Run one shard of the reference machine on the seeded bug; (exit code, its failed machine result)."""
    reports = root / f"reports-{shard.replace('/', 'of')}-{uuid.uuid4().hex[:6]}"
    code = main(["check", SPEC, "--shard", shard, "--seed", str(SEED), "--example-db", db, "--machine", "reference",
                 "-k", "fault_machine_agrees", "--no-progress", "--report-dir", str(reports),
                 "--seeds-dir", str(root / "seeds")])
    (folder,) = [p for p in reports.iterdir() if p.name != "example-db"]
    failed = load_report(folder).runs[0].failed
    return code, failed[0] if failed else {}


def test_a_failure_found_by_one_shard_fails_the_first_example_of_the_next(example_db: str, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Shard 1/2 finds the bug and saves the failing example; shard 2/2, exploring another seed, replays it
    first and fails in its first example (alone, that seed first fails in a later example)."""
    code, first = _shard("1/2", example_db, tmp_path)
    assert code == 1 and first, capsys.readouterr().out
    assert "exploration 0" in first["details"]
    code, second = _shard("2/2", example_db, tmp_path)
    assert code == 1 and second, capsys.readouterr().out
    assert "exploration 1" in second["details"], second["details"]
    assert "first failure in example 1 of" in second["details"], second["details"]

    # without the database, shard 2/2's own seed first fails later: the replay is what made it example 1
    bug = next(b for b in all_bugs() if b.name == BUG)
    backend = bug.make_backend()
    try:
        alone = run_machine(backend, "quick", derive_seed(SEED, 1), shrink=False)
    finally:
        backend.close()
    assert alone.first_failing_example is not None and alone.first_failing_example > 1


def test_workers_run_the_explorations_at_once_into_one_report(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--workers 2 runs explorations 0 and 1 in two pytest-xdist workers, each with its own printed seed,
    and both land in one table and one report (here both replay the failure a first run saved)."""
    db = str(tmp_path / "example-db")
    code, _ = _shard("1/2", db, tmp_path)
    assert code == 1
    capsys.readouterr()
    reports = tmp_path / "workers"
    code = main(["check", SPEC, "--workers", "2", "--seed", str(SEED), "--example-db", db, "--machine", "reference",
                 "-k", "fault_machine_agrees", "--no-progress", "--report-dir", str(reports),
                 "--seeds-dir", str(tmp_path / "seeds")])
    out = capsys.readouterr().out
    assert code == 1, out
    assert f"1: seed {derive_seed(SEED, 1)}" in out
    assert f"--seed {derive_seed(SEED, 1)}" in out  # the reproduce line of exploration 1 names its own seed
    (folder,) = [p for p in reports.iterdir() if p.name != "example-db"]
    (run,) = load_report(folder).runs
    failed = sorted(r["nodeid"].rsplit("[", 1)[-1] for r in run.failed)
    assert failed == ["exploration0]", "exploration1]"], failed
    assert all("first failure in example 1 of" in r["details"] for r in run.failed)


# -- shards merged by kit report ----------------------------------------------------
def _verdicts(folder: Path) -> dict[str, str]:
    (run,) = load_report(folder).runs
    return {f"{r['check']}{r['nodeid'][r['nodeid'].find('['):] if '[' in r['nodeid'] else ''}": r["outcome"]
            for r in run.results}


def test_two_shards_merged_give_the_verdicts_of_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fixed checks split between two shards, the machine explorations too; `kit report` merges the two
    folders into one run per backend whose verdicts are those of one unsharded --workers 2 run."""
    common = [SPEC, "--seed", str(SEED), "--profile", "none", "-k", "timers or claims or machines", "--no-progress",
              "--example-db", "none"]
    assert main(["check", *common, "--workers", "2", "--report-dir", str(tmp_path / "whole")]) == 1
    for shard in ("1/2", "2/2"):
        main(["check", *common, "--shard", shard, "--report-dir", str(tmp_path / shard.replace("/", "of"))])
    whole = next((tmp_path / "whole").iterdir())
    shards = [next((tmp_path / name).iterdir()) for name in ("1of2", "2of2")]
    split = [_verdicts(folder) for folder in shards]
    assert split[0] and split[1] and not set(split[0]) & set(split[1])  # every check in exactly one shard
    capsys.readouterr()
    out = tmp_path / "merged"
    assert main(["report", str(shards[0]), str(shards[1]), "--out", str(out)]) == 0
    assert "complete" in capsys.readouterr().out
    merged = load_report(out).runs
    assert len(merged) == 1, [r.label for r in merged]  # one run for the backend, not one per shard
    assert merged[0].complete
    verdicts = {f"{r['check']}{r['nodeid'][r['nodeid'].find('['):] if '[' in r['nodeid'] else ''}": r["outcome"]
                for r in merged[0].results}
    assert verdicts == _verdicts(whole)
    assert "machines.fault_machine_agrees_with_reference[exploration1]" in verdicts
    assert verdicts["timers.timer_never_fires_early"] == "failed"
    assert "--workers 2" in merged[0].meta["command"] and "--shard" not in merged[0].meta["command"]


def test_a_missing_shard_leaves_the_merged_run_incomplete(tmp_path: Path) -> None:
    main(["check", "memory", "--profile", "none", "-k", "timers", "--shard", "1/2", "--no-progress",
          "--report-dir", str(tmp_path)])
    (folder,) = [p for p in tmp_path.iterdir() if p.name != "example-db"]
    other = tmp_path / "other"
    main(["check", "sqlite", "--profile", "none", "-k", "timers", "--no-progress", "--report-dir", str(other)])
    merged = merge_reports([load_report(folder), load_report(next(p for p in other.iterdir() if p.name != "example-db"))])
    by_backend = {run.backend: run for run in merged.runs}
    assert not by_backend["memory"].complete
    assert "shard 2/2 missing" in str(by_backend["memory"].incomplete_reason)
    assert by_backend["sqlite"].complete
