"""Promise families: a store that withholds some gets exactly the checks needing them reported
not-promised, and passes every other check; opaque claim tokens travel back untouched.

The stores are the reference engine behind :mod:`tests.promise_stores`, which really breaks
what it withholds (its operations raise, its behaviours are switched off), so a check that
uses a withheld family without naming it fails here instead of passing by luck.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from kit.cli import main
from kit.conformance import LEASE, ConformanceSuite, check_id
from kit.contract import ALL_PROMISES, Capabilities, Capability, Promise, SkipKind, digest_of
from kit.runner import SuiteRun, run_suite
from tests.promise_stores import WithholdingBackend, WrongToken

NO_MACHINE = ["--kit-profile", "none"]


def _needs() -> dict[str, set[Capability | Promise]]:
    """Each check id with every capability and promise it names."""
    needs: dict[str, set[Capability | Promise]] = {}
    for name in dir(ConformanceSuite):
        if name.startswith("test_"):
            fn = getattr(ConformanceSuite, name)
            needs[check_id(ConformanceSuite, name)] = set(getattr(fn, "kit_requires", ()))
    return needs


def _outcomes(run: SuiteRun) -> dict[str, tuple[str, str | None]]:
    return {r.nodeid: (r.outcome, r.skip_kind) for r in run.results}


@pytest.fixture(scope="module")
def baseline() -> SuiteRun:
    """The wrapper keeping every promise: what each check does when nothing is withheld."""
    run = run_suite(WithholdingBackend(), extra_args=NO_MACHINE)
    assert run.ok, [(r.check, r.message) for r in run.failed]
    return run


@pytest.mark.parametrize("withheld", [Promise.TIMERS, Promise.LEASES, Promise.WAKE_ON_INPUT, Capability.TEST_CLOCK],
                         ids=lambda w: w.value)
def test_withheld_promise_skips_exactly_its_checks_and_the_rest_pass(
    baseline: SuiteRun, withheld: Promise | Capability
) -> None:
    if isinstance(withheld, Promise):
        backend, kind = WithholdingBackend([withheld]), SkipKind.NOT_PROMISED.value
    else:
        backend, kind = WithholdingBackend(test_clock=False), SkipKind.UNSUPPORTED.value
    run = run_suite(backend, extra_args=NO_MACHINE)
    assert not run.failed, "checks failed on a store keeping every promise they name: " + "; ".join(
        f"{r.check}: {r.message}" for r in run.failed)
    needing = {check for check, needs in _needs().items() if withheld in needs}
    assert needing, f"no check names {withheld.value}"
    skipped_for_it = {r.check for r in run.results if r.skip_kind == kind and withheld.value in r.message}
    ran_before = {r.check for r in baseline.results if r.outcome == "passed"}
    assert skipped_for_it & ran_before == needing & ran_before, "the checks skipped are not those naming it"
    assert needing <= skipped_for_it | {r.check for r in run.results if r.outcome != "passed"}
    before = _outcomes(baseline)
    changed = {r.nodeid: (before[r.nodeid], now) for r in run.results
               if r.check not in needing and (now := (r.outcome, r.skip_kind)) != before[r.nodeid]}
    assert not changed, f"checks not needing {withheld.value} changed outcome: {changed}"
    passed = sum(r.outcome == "passed" for r in run.results)
    lost = sum(r.outcome == "passed" and r.check in needing for r in baseline.results)
    assert passed == sum(r.outcome == "passed" for r in baseline.results) - lost


#: Checks that build their state from what the store promises and prove the rest of their guarantee
#: without the missing families: they must pass, not skip, on a store keeping almost nothing.
SPLIT_BY_PROMISE = {
    "keys_and_payloads.mutating_arguments_after_writes_changes_nothing_stored",
    "keys_and_payloads.mutating_read_results_changes_nothing_stored",
    "keys_and_payloads.json_deeper_than_the_limit_is_refused_everywhere",
    "keys_and_payloads.unstorable_text_is_refused_in_every_payload",
    "keys_and_payloads.unstorable_text_is_refused_in_every_key_and_name",
    "keys_and_payloads.numbers_at_every_boundary_round_trip_at_top_level",
    "keys_and_payloads.json_values_round_trip",
}


@pytest.mark.parametrize("kept", [frozenset(), frozenset({Promise.GENERATION_FENCING, Promise.SIGNALS}),
                                  frozenset({Promise.COMMANDS}), frozenset({Promise.DEFINITIONS, Promise.TENANCY})],
                         ids=lambda kept: "+".join(sorted(p.value for p in kept)) or "nothing")
def test_a_store_keeping_few_promises_skips_exactly_what_it_withholds(kept: frozenset[Promise]) -> None:
    """Withholding many families at once (all, or all but a few, as a third-party store does): every check
    naming one is not-promised, every check skipped at run time names only withheld ones, and the rest
    pass; checks split by promise still prove their guarantee for what is kept."""
    withheld = ALL_PROMISES - kept
    run = run_suite(WithholdingBackend(withheld), extra_args=NO_MACHINE)
    assert not run.failed, "checks used a family they do not name: " + "; ".join(
        f"{r.check}: {r.message[:300]}" for r in run.failed)
    needs = _needs()
    for result in run.results:
        if result.area == "machines":
            continue
        if needs[result.check] & withheld:
            assert result.skip_kind == SkipKind.NOT_PROMISED.value, (result.check, result.outcome)
        elif result.skip_kind == SkipKind.NOT_PROMISED.value:
            mentioned = {p for p in Promise if p.value in result.message}
            assert mentioned and mentioned <= withheld, (result.check, result.message)
    passed = {r.check for r in run.results if r.outcome == "passed"}
    assert SPLIT_BY_PROMISE <= passed, f"split checks skipped or failed: {sorted(SPLIT_BY_PROMISE - passed)}"


def test_checks_without_time_run_on_the_database_clock() -> None:
    run = run_suite(WithholdingBackend(test_clock=False),
                    keyword="run_ids_are_byte_exact or store_clock_is_aware_utc or test_clock_set_is_exact "
                            "or start_creates_pending_run")
    outcomes = {r.check: (r.outcome, r.skip_kind) for r in run.results}
    assert outcomes == {
        "keys_and_payloads.run_ids_are_byte_exact": ("passed", None),
        "clock.store_clock_is_aware_utc": ("passed", None),
        "runs.start_creates_pending_run": ("passed", None),
        "clock.test_clock_set_is_exact": ("skipped", SkipKind.UNSUPPORTED.value),
    }


def test_claim_tokens_are_passed_back_untouched(baseline: SuiteRun) -> None:
    """Every claim carries a random token the store checks on each fenced call: the suite and the fault
    machine never lose or change one."""
    run = run_suite(WithholdingBackend(tokens=True), extra_args=["--kit-profile", "quick", "--kit-seed", "7"])
    assert not run.failed, "; ".join(f"{r.check}: {r.message}" for r in run.failed)
    passed = {r.nodeid for r in run.results if r.outcome == "passed"}
    assert {r.nodeid for r in baseline.results if r.outcome == "passed"} <= passed
    assert any(r.check == "machines.fault_machine_agrees_with_reference" and r.outcome == "passed"
               for r in run.results)


def test_token_store_refuses_a_changed_token() -> None:
    """The token store can fail: a claim whose token was changed is refused (so the test above proves something)."""
    database = WithholdingBackend(tokens=True).provision()
    store = database.open("t")
    store.migrate()
    store.start_run("run-1", store.ensure_definition("wf", "1", digest_of(b"x"), b"x").ref)
    (claim,) = store.claim_runs("w1", LEASE)
    assert claim.token
    with pytest.raises(WrongToken):
        store.load_claimed(replace(claim, token=None))
    with pytest.raises(WrongToken):
        store.load_claimed(replace(claim, token=claim.token + "x"))
    assert store.load_claimed(claim) is not None


def test_capabilities_declare_promises() -> None:
    full = Capabilities.of(Capability.TEST_CLOCK)
    assert full.promises == ALL_PROMISES, "a store promises every family unless it says otherwise"
    assert Capability.TENANCY in full and Capability.UNIT_OF_WORK in full, "the legacy capabilities follow"
    few = Capabilities.of(Capability.TEST_CLOCK, promises=[Promise.SIGNALS, Promise.TENANCY])
    assert few.promises == {Promise.SIGNALS, Promise.TENANCY} and Capability.TENANCY in few
    withheld = full.without(Promise.UNIT_OF_WORK)
    assert Promise.UNIT_OF_WORK not in withheld and Capability.UNIT_OF_WORK not in withheld
    assert Capability.TENANCY not in Capabilities.of(Capability.TENANCY, withhold=[Promise.TENANCY])
    assert full.not_promised([Promise.LEASES, Capability.SKIP_LOCKED]) == []
    assert few.not_promised([Promise.LEASES, Capability.SKIP_LOCKED, Promise.SIGNALS]) == [Promise.LEASES]
    assert few.missing([Promise.LEASES, Capability.SKIP_LOCKED]) == [Capability.SKIP_LOCKED]


def test_kit_check_shows_not_promised_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "tests.promise_stores:no_timers", "-k", "timers", "--no-progress",
                 "--profile", "none", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "not promised" in out and "not promised: timers" in out
    not_promised = sum(1 for check, needs in _needs().items() if Promise.TIMERS in needs and "timers" in check)
    assert not_promised >= 9
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    data = json.loads((folder / "results.json").read_text())
    (run,) = data["runs"]
    assert run["tally"]["not-promised"] == data["tally"]["not-promised"] >= not_promised
    assert run["tally"]["failed"] == 0
    assert f"{run['tally']['not-promised']} not promised" in out
    summary = (folder / "summary.md").read_text()
    assert "| not promised |" in summary and "## Not promised" in summary and "| timers |" in summary
    suite = ET.parse(folder / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["not_promised"] == str(run["tally"]["not-promised"])
    assert sum(1 for s in suite.iter("skipped") if s.get("type") == "not-promised") == run["tally"]["not-promised"]
    html = (folder / "index.html").read_text()
    assert "<h2>Not promised</h2>" in html and "id=not-promised" in html
