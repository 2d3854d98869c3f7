"""A fault-machine failure prints the command that replays its saved bundle, and the seed, on both routes."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from adapters.sqlite import SqliteBackend
from kit.backends import resolve, spec_of
from kit.commands.check import reproduce_lines
from kit.conformance.machines import replay_command
from kit.reference import MemoryBackend
from kit.report.results import CheckResult
from tests._cli_fixtures.custom_backend import CustomBackend


def test_builtin_backends_made_directly_are_named_as_kit_replay_accepts() -> None:
    assert spec_of(MemoryBackend()) == "memory"
    assert spec_of(SqliteBackend()) == "sqlite"
    assert spec_of(resolve("memory")) == "memory"


def test_a_third_party_backend_made_in_a_fixture_is_named_by_its_import_path() -> None:
    spec = spec_of(CustomBackend())
    assert spec == "tests._cli_fixtures.custom_backend:CustomBackend"
    assert isinstance(resolve(spec), CustomBackend)  # what `kit replay --backend` does with it


def test_a_backend_nothing_can_import_is_not_given_a_name_replay_rejects() -> None:
    def make() -> Any:
        class Local(MemoryBackend):
            name = "local"

        return Local()

    assert spec_of(make()) is None
    local = make()
    local.kit_spec = "tests.seeded_bugs.registry:some_bug"
    assert spec_of(local) == "tests.seeded_bugs.registry:some_bug"


def _machine_failure(details: str) -> CheckResult:
    return CheckResult("machines.fault_machine_agrees_with_reference", "machines",
                       "x::TestConformance::test_fault_machine_agrees_with_reference", "failed",
                       message="step 3 (...): the adapter answered ...", details=details)


def test_kit_check_prints_the_bundles_replay_command_and_the_seed() -> None:
    args = argparse.Namespace(backend="sqlite", seed=424242, profile="quick", url=None)
    details = "step 3 diverged\nseed 424242, profile quick, 9 steps after shrinking; saved to s/b.json\n" \
              f"replay: {replay_command('scenarios/seeds/sqlite-seed424242.json', 'sqlite')}\n"
    lines = reproduce_lines(_machine_failure(details), args, "test_fault_machine_agrees_with_reference", "")
    assert lines[0] == "reproduce: kit replay scenarios/seeds/sqlite-seed424242.json --backend sqlite"
    assert "--seed 424242" in lines[1]


@pytest.mark.parametrize("details", ["", "a machine failure without a saved bundle"])
def test_a_machine_failure_without_a_bundle_still_names_the_seed(details: str) -> None:
    args = argparse.Namespace(backend="memory", seed=7, profile="thorough", url=None)
    lines = reproduce_lines(_machine_failure(details), args, "test_fault_machine_agrees_with_reference", "")
    assert lines == ["reproduce: kit check memory --seed 7 --profile thorough -k test_fault_machine_agrees_with_reference"]


def test_the_replay_command_keeps_a_redacted_url_and_quotes_paths() -> None:
    command = replay_command("my seeds/b.json", "postgres --url postgresql+psycopg://u:***@h/db")
    assert command == "kit replay 'my seeds/b.json' --backend postgres --url 'postgresql+psycopg://u:***@h/db'"
