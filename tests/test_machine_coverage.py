"""The coverage map: every check of the suite names the fault-machine rules that reach its guarantee."""

from __future__ import annotations

from kit.machines.coverage import (
    REACHED_BY,
    UNREACHED,
    all_check_ids,
    machine_rules,
    main,
    problems,
)


def test_every_check_is_mapped_and_every_named_rule_exists() -> None:
    """A new check must be mapped (to rules, or as unreached with a reason); a renamed rule breaks the map."""
    assert problems() == []


def test_the_map_sees_checks_and_rules_that_do_not_exist() -> None:
    """The map's own check fails for an unmapped check and for a rule the machine does not have."""
    checks = [*all_check_ids(), "claims.a_check_nobody_mapped"]
    rules = machine_rules() - {"interleave_wake"}
    found = problems(checks, rules)
    assert any(p.startswith("claims.a_check_nobody_mapped: not in the coverage map") for p in found)
    assert any("rule 'interleave_wake' does not exist" in p for p in found)


def test_unreached_guarantees_are_few_and_each_has_its_reason() -> None:
    """Every guarantee no rule reaches is listed with why; the rare-but-important ones are reached."""
    assert all(len(reason) > 40 for reason in UNREACHED.values())
    for check in ("commands.claim_filters_by_queue", "unit_of_work.callbacks_never_run_when_commit_fails",
                  "unit_of_work.nested_blocks_reuse_the_outer_transaction",
                  "commit.waking_write_beside_a_blocking_commit_is_not_lost",
                  "commit.overlapping_duplicate_deliveries_commit_once",
                  "commands.exhausted_attempts_fail_permanently_and_wake_run",
                  "runs.cancel_request_on_closed_or_absent_run", "timers.absolute_fire_at_round_trips"):
        assert REACHED_BY.get(check), f"{check} must be reached by a machine rule"


def test_command_prints_the_unreached(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([]) == 0
    out = capsys.readouterr().out
    assert f"{len(all_check_ids())} checks:" in out
    for check in UNREACHED:
        assert f"unreached  {check}:" in out


def test_quick_profile_reaches_the_rare_sequences(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """At the kit's pinned seed the quick profile (on the reference engine, so only the generation is judged)
    cancels and signals closed runs, fails commands until their attempts run out, lands input between a
    load and a blocking commit, runs units of work with callbacks and claims with a queue filter."""
    from kit.machines.interpreter import Interpreter
    from kit.machines.machine import run_machine
    from kit.reference import MemoryBackend
    from tests.test_machines import SEED

    seen: list[tuple[dict[str, object], object]] = []
    original = Interpreter.apply

    def apply(self: Interpreter, step: dict[str, object]):  # type: ignore[no-untyped-def]
        record = original(self, step)
        seen.append((step, record.outcome))
        return record

    monkeypatch.setattr(Interpreter, "apply", apply)
    outcome = run_machine(MemoryBackend(), "quick", SEED, shrink=False)
    assert outcome.ok, outcome.failure or outcome.error
    ops = [(step["op"], result) for step, result in seen]
    assert ("cancel", "terminal") in ops, "no cancel of a closed run"
    assert ("signal", {"outcome": "terminal", "dedup_key": None}) in ops or any(
        op == "signal" and isinstance(r, dict) and r.get("outcome") == "terminal" for op, r in ops), "no signal to a closed run"
    assert ("fail", "failed") in ops, "no command failed until its attempts ran out"
    during = [i for i, (step, _) in enumerate(seen[:-2]) if step["op"] == "load"
              and seen[i + 1][0]["op"] in ("signal", "complete", "fire_timers", "cancel")
              and seen[i + 2][0]["op"] == "commit" and seen[i + 2][1] == "committed"]
    assert during, "no input landed between a load and the commit that followed it"
    assert any(step["op"] == "unit" for step, _ in seen), "no unit of work with callbacks"
    assert any(step["op"] == "claim_commands" and step.get("queues") for step, _ in seen), "no queue filter"
