"""DBOS Transact's system database under the kit: the verdict is exactly its promises and its findings.

The adapter (``adapters/thirdparty/dbos.py``) declares what DBOS promises;
every check naming a promise it withholds must be skipped as not-promised,
every other check must run, and the only failures allowed are the weakness
documented in ``docs/findings/dbos_send_to_finished_workflow.py``. Skipped
when the ``dbos`` extra is not installed; on PostgreSQL skipped when no
server answers, failed instead when ``KIT_REQUIRE_BACKENDS`` names postgres.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the dbos extra is not installed: pip install -e '.[dbos]'")

from adapters.thirdparty.dbos import DBOS_PROMISES, EXPECTED_FAILURES, make_backend
from kit.conformance import LEASE, ConformanceSuite, check_id
from kit.contract import ALL_PROMISES, Backend, BackendUnavailable, Capability, Promise, SkipKind
from kit.machines.model_free_machine import run_model_free
from kit.pytest_plugin import required_backends
from kit.runner import SuiteRun, run_suite

ROOT = Path(__file__).resolve().parents[1]
FINDING = ROOT / "docs" / "findings" / "dbos_send_to_finished_workflow.py"

#: The checks DBOS fails because of the documented weakness (a message to a finished workflow is stored).
DOCUMENTED_WEAKNESS = {"signals.terminal_run_rejects_signal", "commit.terminal_run_never_changes"}
URLS = {"sqlite": "sqlite://", "postgres": "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"}
SEED = 20261201


def _needs() -> dict[str, set[Capability | Promise]]:
    needs: dict[str, set[Capability | Promise]] = {}
    for name in dir(ConformanceSuite):
        if name.startswith("test_"):
            needs[check_id(ConformanceSuite, name)] = set(getattr(getattr(ConformanceSuite, name), "kit_requires", ()))
    return needs


def _backend(database: str) -> Backend:
    try:
        return make_backend(URLS[database])
    except BackendUnavailable as exc:
        if database in required_backends():
            pytest.fail(f"not-reachable: {exc} (required by KIT_REQUIRE_BACKENDS)", pytrace=False)
        pytest.skip(f"not-reachable: {exc}")


@pytest.fixture(scope="module", params=sorted(URLS))
def verdict(request: pytest.FixtureRequest) -> Iterator[tuple[Backend, SuiteRun]]:
    backend = _backend(request.param)
    try:
        yield backend, run_suite(backend, extra_args=["--kit-profile", "none"])
    finally:
        backend.close()


def test_only_the_documented_weakness_fails(verdict: tuple[Backend, SuiteRun]) -> None:
    """Every failure is the send-to-finished-workflow finding; nothing else fails or errors."""
    _, run = verdict
    assert not run.collection_errors, run.collection_errors
    failed = {r.check for r in run.failed}
    assert failed == DOCUMENTED_WEAKNESS, [(r.check, r.message[:200]) for r in run.failed]


def test_checks_on_withheld_promises_are_not_promised_and_the_rest_run(verdict: tuple[Backend, SuiteRun]) -> None:
    """A check is skipped as not-promised exactly when it names a promise DBOS withholds."""
    backend, run = verdict
    needs = _needs()
    withheld = ALL_PROMISES - DBOS_PROMISES
    for result in run.results:
        if result.area == "machines":
            continue
        named = needs[result.check]
        if named & withheld:
            assert result.skip_kind == SkipKind.NOT_PROMISED.value, (result.check, result.outcome, result.message)
            continue
        if result.skip_kind == SkipKind.NOT_PROMISED.value:  # skipped at run time, naming what it lacks
            mentioned = {p for p in Promise if p.value in result.message}
            assert mentioned and mentioned <= withheld, (result.check, result.message)
            continue
        if backend.capabilities.missing(list(named)):
            assert result.skip_kind == SkipKind.UNSUPPORTED.value, (result.check, result.message)
        elif result.check in EXPECTED_FAILURES:
            assert result.outcome == "xfailed", (result.check, result.outcome, result.message)
        else:
            assert result.outcome == "passed" or result.check in DOCUMENTED_WEAKNESS, (result.check, result.message)
    ran = [r for r in run.results if r.outcome == "passed"]
    assert len(ran) >= 60, f"only {len(ran)} checks passed: the adapter lost most of the suite"


def test_model_free_machine_finds_the_documented_weakness() -> None:
    """The model-free fault machine, judging only invariants, finds the same weakness on its own."""
    backend = _backend("sqlite")
    try:
        outcome = run_model_free(backend, "quick", SEED, shrink=False)
    finally:
        backend.close()
    assert outcome.error is None, outcome.error
    assert outcome.failure is not None, f"no divergence in {outcome.examples} examples"
    divergence = outcome.failure["divergence"]
    assert "was terminal" in divergence["message"] and "still changed" in divergence["message"], divergence
    step = outcome.failure["steps"][divergence["step"]]
    assert "signal" in {step["op"], *(op["op"] for op in step.get("ops", ()))}, step


def test_the_finding_reproduces_with_dbos_public_api() -> None:
    """The stand-alone reproduction (DBOS's public API only) shows the message stored for a finished workflow."""
    done = subprocess.run([sys.executable, str(FINDING)], capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FINDING: the message was stored" in done.stdout, done.stdout


@pytest.mark.parametrize("same_worker", [False, True], ids=["other-worker", "same-worker"])
def test_superseded_claim_is_fenced_by_dbos_ownership_token(same_worker: bool) -> None:
    """generation_fencing as DBOS keeps it: after a release and a new claim, the old claim changes
    nothing, and DBOS's own checkpoint write refuses the old ownership token even without the adapter."""
    from dbos._error import DBOSWorkflowConflictIDError

    from kit.contract import ClockMode, Decision, Outcome, RunStatus, digest_of

    backend = _backend("sqlite")
    database = backend.provision()
    store = database.open("tenant-a", clock=ClockMode.DATABASE)
    try:
        store.migrate()
        ref = store.ensure_definition("wf", "1", digest_of(b"wf"), b"wf").ref
        store.start_run("run-1", ref)
        old = store.claim_runs("w1", LEASE, limit=1)[0]
        assert store.release_run_claim(old) is Outcome.COMMITTED
        new = store.claim_runs("w1" if same_worker else "w2", LEASE, limit=1)[0]
        assert new.token != old.token and new.generation == old.generation + 1
        before = store.get_run("run-1")
        assert store.commit_decision(old, old.revision, Decision(RunStatus.COMPLETED, output=1)) is Outcome.CLAIM_LOST
        assert store.load_claimed(old) is Outcome.CLAIM_LOST
        assert store.get_run("run-1") == before
        step = {"workflow_uuid": "run-1", "function_id": 1, "function_name": "stale", "started_at_epoch_ms": 0,
                "output": None, "error": None, "serialization": None, "child_workflow_id": None}
        with pytest.raises(DBOSWorkflowConflictIDError):
            store._sys.record_operation_result(step, owner_xid=old.token)  # type: ignore[attr-defined]
        assert store.commit_decision(new, new.revision, Decision(RunStatus.COMPLETED, output=2)) is Outcome.COMMITTED
        done = store.get_run("run-1")
        assert done is not None and done.status is RunStatus.COMPLETED and done.output == 2
    finally:
        store.close()
        database.drop()
        backend.close()
