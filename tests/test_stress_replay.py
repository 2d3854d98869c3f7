"""Deterministic stress: the seed fixes the interleaving, a violation saves a bundle that replays it.

The two concurrency seeded bugs (a claim without row locks; a fence checked in
one transaction and written in another) are found in deterministic mode at
fixed seeds, and each saved bundle reproduces the same violated invariant with
the same witness (history indexes, operations and store times) five replays in
a row. Durations are store-clock seconds: a run takes a few wall seconds.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kit.checkers import Status
from kit.contract import Backend, BackendUnavailable
from kit.faults.nemesis import ALL_FAULTS
from kit.pytest_plugin import required_backends
from kit.workload import StressConfig, run_stress
from kit.workload.replay import (
    load_stress_bundle,
    narrate,
    replay_bundle,
    shrink,
    witness_key,
    witness_participants,
)
from kit.workload.scheduler import Scheduler, Stalled
from tests.seeded_bugs.stress_bugs import STRESS_BUGS, StressBug

REPLAYS = 5
CASES = {
    ("postgres", "claim_without_lock"): (1, 4.0),
    ("postgres", "fence_check_then_act"): (4, 6.0),
    ("sqlite", "fence_check_then_act"): (1, 4.0),
    ("mysql", "claim_without_lock"): (1, 4.0),
    ("mysql", "fence_check_then_act"): (12, 4.0),
}
"""(backend, bug) -> (seed, store-clock seconds of faults) at which deterministic mode catches it. A schedule counts
the points a store announces, so sending fewer statements moves its windows: MySQL's fence_check_then_act was caught
at 1 of seeds 1-12 both before (seed 9) and after (seed 12) one-statement reads stopped sending BEGIN and COMMIT."""


def _config(seed: int, seconds: float, mode: str = "deterministic") -> StressConfig:
    return StressConfig(seed=seed, duration_s=seconds, workers=2, runs=4, mode=mode)


def _backend(bug: StressBug) -> Backend:
    try:
        return bug.make_backend()
    except BackendUnavailable as exc:
        if bug.backend in required_backends():
            pytest.fail(f"not-reachable: {exc} (required by KIT_REQUIRE_BACKENDS)", pytrace=False)
        pytest.skip(f"not-reachable: {exc}")


def _sqlite() -> Backend:
    from kit.backends import resolve

    return resolve("sqlite")


def _server(name: str) -> Backend:
    """A server backend, skipped when unreachable (failed when ``KIT_REQUIRE_BACKENDS`` names it)."""
    from kit.backends import resolve

    try:
        return resolve(name)
    except BackendUnavailable as exc:
        if name in required_backends():
            pytest.fail(f"not-reachable: {exc} (required by KIT_REQUIRE_BACKENDS)", pytrace=False)
        pytest.skip(f"not-reachable: {exc}")


BUGS = [b for b in STRESS_BUGS if (b.backend, b.name) in CASES]


@pytest.mark.parametrize("bug", BUGS, ids=[f"{b.backend}-{b.name}" for b in BUGS])
def test_deterministic_mode_catches_the_bug_and_its_bundle_replays_it(bug: StressBug, tmp_path: Path) -> None:
    seed, seconds = CASES[(bug.backend, bug.name)]
    backend = _backend(bug)
    try:
        result = run_stress(backend, _config(seed, seconds), report_root=tmp_path,
                            spec=f"tests.seeded_bugs.stress_bugs:{bug.backend}_{bug.name}")
        assert result.mode == "deterministic" and result.schedule
        invalid = {v.invariant: v for v in result.verdicts if v.status is Status.INVALID}
        caught = [i for i in bug.caught_by if i in invalid]
        assert caught, f"{bug.name} on {bug.backend} survived seed {seed}: {[(v.invariant, v.status.value) for v in result.verdicts]}"
        assert result.bundle is not None and result.bundle.is_file()
        bundle = load_stress_bundle(result.bundle)
        assert bundle["backend"] == f"tests.seeded_bugs.stress_bugs:{bug.backend}_{bug.name}"
        assert bundle["seed"] == seed and bundle["config"]["mode"] == "deterministic"
        assert len(bundle["schedule"]) == len(result.schedule)
        assert {v["invariant"] for v in bundle["violations"]} == set(invalid)
        assert bundle["witness_operations"], "the bundle keeps the witness's history entries"
        if bug.name == "claim_without_lock":  # claimers queued on each other's row locks, and the run went on
            assert json.loads((result.folder / "schedule.json").read_text())["blocks"] > 0
        for i in range(REPLAYS):
            outcome = replay_bundle(bundle, backend)
            assert outcome.result.skipped == 0, f"replay {i + 1}: the schedule diverged ({outcome.differences})"
            assert outcome.reproduced, f"replay {i + 1}: {outcome.differences}"
            again = {v.invariant: v for v in outcome.verdicts if v.status is Status.INVALID}
            for invariant in caught:
                assert witness_key(again[invariant]) == witness_key(invalid[invariant])
    finally:
        backend.close()


def test_the_same_seed_gives_the_same_history_with_every_fault(tmp_path: Path) -> None:
    backend = _sqlite()
    try:
        config = StressConfig(seed=5, duration_s=3.0, workers=2, runs=4, faults=ALL_FAULTS, mode="deterministic")
        first = run_stress(backend, config, report_root=tmp_path / "a")
        second = run_stress(backend, config, report_root=tmp_path / "b")
    finally:
        backend.close()
    assert first.schedule == second.schedule and len(first.schedule) > 100
    assert first.history.read_text() == second.history.read_text()
    faults = [json.loads(line) for line in first.history.read_text().splitlines() if '"f":"fault"' in line]
    assert faults, "the nemesis delivered faults during the run"


@pytest.mark.parametrize("name", ["postgres", "mysql"])
def test_the_same_seed_gives_the_same_history_on_a_server_whose_statements_wait_on_locks(
        name: str, tmp_path: Path) -> None:
    backend = _server(name)
    try:
        config = StressConfig(seed=1, duration_s=3.0, workers=2, runs=4, faults=ALL_FAULTS, mode="deterministic")
        first = run_stress(backend, config, report_root=tmp_path / "a")
        second = run_stress(backend, config, report_root=tmp_path / "b")
    finally:
        backend.close()
    assert not first.errors and not second.errors, first.errors + second.errors
    assert first.schedule == second.schedule and len(first.schedule) > 100
    assert first.history.read_text() == second.history.read_text()
    assert json.loads((first.folder / "schedule.json").read_text())["blocks"] > 0, "statements queued on locks"


_POLL_LOCK_VIEWS = {
    "mysql": "SELECT COUNT(*) FROM information_schema.innodb_trx",
    "postgres": "SELECT COUNT(*) FROM pg_locks WHERE NOT granted",
}
"""What another client (a monitor, another kit run on the same server) might poll: the lock views."""


@pytest.mark.parametrize("name", sorted(_POLL_LOCK_VIEWS))
def test_the_block_probe_sees_a_row_lock_wait_while_another_client_polls_the_lock_views(name: str) -> None:
    from kit.workload.scheduler import Participant
    from kit.workload.virtual import block_probe

    backend = _server(name)
    database: Any = backend.provision()
    server, namespace = database.backend, database.namespace
    holder, waiter, poller = (server._connect(namespace) for _ in range(3))
    stop, probe = threading.Event(), block_probe(backend, database)
    assert probe is not None
    polling: threading.Thread | None = None
    try:
        for sql in ("CREATE TABLE kit_probe_rows (id INTEGER NOT NULL PRIMARY KEY, v BIGINT NOT NULL)",
                    "INSERT INTO kit_probe_rows (id, v) VALUES (1, 0)", "BEGIN",
                    "UPDATE kit_probe_rows SET v = v + 1 WHERE id = 1"):
            holder.cursor().execute(sql)

        def poll() -> None:  # polls every millisecond, like a probe or a monitor would
            cur = poller.cursor()
            while not stop.is_set():
                cur.execute(_POLL_LOCK_VIEWS[name])
                cur.fetchall()
                time.sleep(0.001)

        polling = threading.Thread(target=poll, daemon=True)
        polling.start()
        time.sleep(0.2)
        part = Participant("waiter", 0)
        part.meta["session"] = waiter.info.backend_pid if name == "postgres" else waiter.thread_id()
        assert probe(part, True) is False, "an idle session waits on nothing"
        blocked = threading.Thread(target=lambda: _swallow(lambda: waiter.cursor().execute(
            "UPDATE kit_probe_rows SET v = v + 10 WHERE id = 1")), daemon=True)
        blocked.start()
        time.sleep(0.3)
        assert blocked.is_alive(), "the waiter's UPDATE queued on the holder's row lock"
        assert probe(part, True) is True
        holder.cursor().execute("ROLLBACK")
        blocked.join(5)
        assert probe(part, True) is False
    finally:
        stop.set()
        if polling is not None:  # the poller stops before its connection is closed under it
            polling.join(5)
        close = getattr(probe, "close", None)
        if close is not None:
            close()
        for conn in (holder, waiter, poller):
            conn.close()
        database.drop()
        backend.close()


def _swallow(fn: Any) -> None:
    """Run ``fn``; its error (the waiter may time out or be rolled back) is not what is tested."""
    import contextlib

    with contextlib.suppress(Exception):
        fn()


def test_innodb_status_text_is_read_per_session() -> None:
    from kit.workload.virtual import innodb_lock_wait

    status = ("=====\nTRANSACTIONS\n------------\nTrx id counter 9\nLIST OF TRANSACTIONS FOR EACH SESSION:\n"
              "---TRANSACTION 7, ACTIVE 2 sec inserting\nmysql tables in use 1, locked 1\n"
              "LOCK WAIT 2 lock struct(s), heap size 1128, 1 row lock(s)\n"
              "MariaDB thread id 41, OS thread handle 1, query id 3 127.0.0.1 root Update\n"
              "---TRANSACTION 6, ACTIVE 2 sec\n2 lock struct(s), heap size 1128, 1 row lock(s)\n"
              "MySQL thread id 4, OS thread handle 2, query id 5 127.0.0.1 root\n"
              "--------\nFILE I/O\n--------\nMariaDB thread id 5, LOCK WAIT \n")
    assert innodb_lock_wait(status, 41) is True
    assert innodb_lock_wait(status, 4) is False
    assert innodb_lock_wait(status, 5) is False  # only the transaction list counts
    cut = status.split("---TRANSACTION 6")[0] + "\n...truncated...\n--------\nFILE I/O\n"  # the server's cap
    assert innodb_lock_wait(cut, 41) is True
    assert innodb_lock_wait(cut, 4) is None
    assert innodb_lock_wait("no transactions section", 41) is None


def test_a_shortened_schedule_ends_the_run_and_a_diverging_one_is_counted(tmp_path: Path) -> None:
    backend = _sqlite()
    try:
        config = StressConfig(seed=2, duration_s=2.0, workers=1, runs=2, faults=(), mode="deterministic")
        full = run_stress(backend, config, report_root=tmp_path / "full")
        half = run_stress(backend, config, report_root=tmp_path / "half", schedule=full.schedule[: len(full.schedule) // 2])
        bogus = run_stress(backend, config, report_root=tmp_path / "bogus", schedule=["nobody"] * 5 + full.schedule[:50])
    finally:
        backend.close()
    assert half.schedule == full.schedule[: len(full.schedule) // 2] and half.skipped == 0
    lines = half.history.read_text().splitlines()
    assert lines[1:40] == full.history.read_text().splitlines()[1:40]  # the first line says "replay"
    assert bogus.skipped == 5 and bogus.schedule == full.schedule[:50]


def test_shrinking_keeps_the_invariant_and_narrates_the_interleaving(tmp_path: Path) -> None:
    bug = next(b for b in STRESS_BUGS if (b.backend, b.name) == ("sqlite", "fence_check_then_act"))
    seed, seconds = CASES[("sqlite", "fence_check_then_act")]
    backend = bug.make_backend()
    try:
        result = run_stress(backend, _config(seed, seconds), report_root=tmp_path, spec="sqlite-fence")
        assert result.bundle is not None
        bundle = load_stress_bundle(result.bundle)
        target = int(bundle["violations"][0]["invariant"])
        shrunk = shrink(bundle, backend, budget_s=8.0)
        assert shrunk.invariant == target and shrunk.verdict is not None
        assert shrunk.verdict.status is Status.INVALID and shrunk.verdict.invariant == target
        assert len(shrunk.schedule) < len(result.schedule)
        focus = sorted(witness_participants(shrunk.verdict.witness))
        lines, replayed = narrate(backend, StressConfig.from_json(bundle["config"]), shrunk.schedule, focus=focus)
    finally:
        backend.close()
    assert any(v.invariant == target and v.status is Status.INVALID for v in replayed.verdicts)
    assert focus and lines
    who = [re.match(r"\s*(?:\d+\.)?\s*(\S+)", line) for line in lines]
    assert all(m is not None and m.group(1) in (*focus, "clock") for m in who), lines
    assert any(" -> " in line and ("OK" in line or "INFO" in line) for line in lines)


def test_kit_replay_reproduces_a_stress_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kit.cli import main

    bug = next(b for b in STRESS_BUGS if (b.backend, b.name) == ("sqlite", "fence_check_then_act"))
    seed, seconds = CASES[("sqlite", "fence_check_then_act")]
    backend = bug.make_backend()
    try:
        result = run_stress(backend, _config(seed, seconds), report_root=tmp_path,
                            spec="tests.seeded_bugs.stress_bugs:sqlite_fence_check_then_act")
    finally:
        backend.close()
    assert result.bundle is not None
    code = main(["replay", str(result.bundle), "--times", "1", "--shrink", "0"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "reproduced" in out and "same witness" in out and "mode deterministic" in out


@pytest.mark.parametrize("mode", ["free", "deterministic"])
def test_every_report_names_the_mode(mode: str, tmp_path: Path) -> None:
    backend = _sqlite()
    try:
        result = run_stress(backend, StressConfig(seed=3, duration_s=0.5, drain_s=5.0, quiet_s=1.0, workers=1,
                                                  runs=1, faults=(), mode=mode), report_root=tmp_path)
    finally:
        backend.close()
    assert result.mode == mode
    results = json.loads((result.folder / "results.json").read_text())
    assert f'"mode": "{mode}"' in json.dumps(results)
    assert f"({mode} mode)" in (result.folder / "summary.md").read_text()
    assert f"({mode} mode)" in (result.folder / "index.html").read_text()
    config = json.loads(result.history.read_text().splitlines()[0])
    assert config["f"] == "config" and config["value"]["config"]["mode"] == mode


def test_a_participant_stuck_outside_the_database_stalls_the_scheduler_instead_of_wedging_it() -> None:
    scheduler = Scheduler(1, stall_s=0.5)
    release = threading.Event()
    part = scheduler.register("slow")

    def body() -> None:
        scheduler.attach(part)
        scheduler.park("begin")
        release.wait(10)  # neither parked nor inside a statement
        scheduler.leave()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    assert scheduler.step() == "slow"
    started = time.monotonic()
    with pytest.raises(Stalled, match="no progress"):
        scheduler.settle()
    assert time.monotonic() - started < 5
    release.set()
    thread.join(5)


def test_deterministic_mode_refuses_a_store_it_cannot_schedule_naming_the_fix(
        capsys: pytest.CaptureFixture[str]) -> None:
    from kit.cli import main

    assert main(["stress", "--backend", "memory", "--duration", "1", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "--mode free" in captured.err + captured.out


def test_a_wait_inside_a_statement_hook_keeps_the_statement_for_the_block_probe() -> None:
    """A pause fault parks inside the statement's hook; once granted the statement runs and may queue on
    a lock, so that step must be probed like any statement (else it waits out the server's lock timeout)."""
    import sqlite3

    from kit.connections import HookedConnection

    scheduler = Scheduler(1, stall_s=5.0)
    part = scheduler.register("paused")
    seen: list[Any] = []

    def hook(statement: str) -> None:
        scheduler.statement(statement)
        if statement.startswith("SELECT"):
            scheduler.park("pause 1.000 s")  # what a pause fault does inside the hook

    def body() -> None:
        scheduler.attach(part)
        conn = HookedConnection(sqlite3.connect(":memory:"), hook)
        try:
            scheduler.park("begin")
            conn.cursor().execute("SELECT 1")
        finally:
            conn.close()
            scheduler.leave()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    for _ in range(3):  # begin, the statement's turn, the pause
        assert scheduler.step() == "paused"
        scheduler.settle()
        seen.append(part.cursor)
    thread.join(5)
    assert seen[0] is not None and seen[1] is seen[0], "the pause's step runs the statement: probed on its cursor"
    assert type(seen[0]).__name__ == "HookedCursor"
