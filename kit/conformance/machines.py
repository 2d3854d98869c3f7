"""The fault machines as conformance checks: generated faults, judged against the reference engine or by the
invariants alone.

One of the two runs per store (``--kit-machine``, default ``auto``): a store that
promises the whole contract on a test clock is compared with the reference engine
step by step; a store that declares fewer promises is driven by the model-free
machine with only the steps it promises, and judged by the invariants alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kit.conformance._harness import AreaChecks, requires
from kit.contract import Backend, Capability, Promise

__all__ = ["MachineChecks", "replay_command"]


def replay_command(path: object, spec: str) -> str:
    """The command that replays the bundle at ``path`` on the backend ``spec`` names (quoted for a shell)."""
    import shlex

    name, _, url = spec.partition(" --url ")
    tail = f" --url {shlex.quote(url)}" if url else ""
    return f"kit replay {shlex.quote(str(path))} --backend {shlex.quote(name)}{tail}"


class MachineChecks(AreaChecks):
    area = "machines"

    @requires(Capability.TEST_CLOCK, *Promise)
    def test_fault_machine_agrees_with_reference(self, kit_backend: Backend, request: pytest.FixtureRequest,
                                                 kit_exploration: int) -> None:
        """Under generated crashes, expired leases, stale completions, clock skew, lost acks, duplicates and
        races, every answer and the state of every run a step touched match the reference engine after every
        step, and the whole state at the end of each example."""
        def load() -> Any:
            from kit.machines.machine import run_machine

            return run_machine

        _run(kit_backend, request, "reference", load, kit_exploration)

    def test_fault_machine_keeps_the_invariants(self, kit_backend: Backend, request: pytest.FixtureRequest,
                                                kit_exploration: int) -> None:
        """Under generated crashes, expired leases, stale completions, clock skew, killed sessions, lost acks and
        duplicate delivery (only of what the store promises), after every step: no stale effect, at most one
        live claim per run and command, duplicates applied once, nothing acknowledged lost, history contiguous
        and append-only, terminal runs unchanged."""
        def load() -> Any:
            from kit.machines.model_free_machine import run_model_free

            return run_model_free

        _run(kit_backend, request, "model-free", load, kit_exploration)


def _run(backend: Backend, request: pytest.FixtureRequest, machine: str, load: Callable[[], Any],
         exploration: int = 0) -> None:
    """Run exploration ``exploration`` of ``machine`` if this session selected it for ``backend`` (its seed
    derived from the session's); save and name a failure's bundle. ``load`` imports the machine's runner,
    only once the machine is known to run (the import, Hypothesis with it, costs most of a second)."""
    from kit.pytest_plugin import machine_mode, machine_run, machine_settings

    profile, seed, seeds_dir, spec = machine_settings(request.config, backend)
    if profile == "none":
        pytest.skip("unsupported: the fault machines were switched off (--kit-profile none)")
    chosen = machine_mode(request.config, backend)
    if chosen != machine:
        pytest.skip(f"unsupported: the {chosen} fault machine runs for this store (kit check --machine {machine} runs this one)")
    seed, database = machine_run(request.config, seed, exploration, spec, machine, profile)
    run = load()
    from kit.machines import progress
    from kit.machines.bundle import make_bundle, prune_steps, save_bundle
    from kit.machines.machine import PROFILES

    budget = PROFILES[profile]
    with progress.running(machine, seed, budget.max_examples, budget.steps):  # pruning shows as shrinking
        outcome = run(backend, profile, seed, example_db=database)
        if outcome.failure is not None and not outcome.error:
            bundle = make_bundle(spec, backend, profile, seed, outcome.failure["steps"],
                                 outcome.failure["divergence"], machine=machine, families=outcome.extra.get("families"))
            bundle, message = prune_steps(bundle, backend)  # the minimal story: no step it does not need
    if outcome.error:
        pytest.fail(f"the {machine} machine itself failed (seed {seed}): {outcome.error}")
    if outcome.failure is not None:
        path = save_bundle(bundle, seeds_dir)
        url = request.config.getoption("kit_url", None)
        if url:
            from kit.discovery import redact

            spec = f"{spec} --url {redact(url)}"
        test = "fault_machine_agrees" if machine == "reference" else "fault_machine_keeps"
        pruned = f" ({bundle['pruned']['steps_removed']} it does not need removed)" if "pruned" in bundle else ""
        pytest.fail(
            f"{message or outcome.failure['message']}\n"
            f"{machine} machine, seed {seed}, profile {profile}, {len(bundle['steps'])} steps after shrinking{pruned}; "
            f"saved to {path}\n"
            f"{_found_in(outcome, exploration, database is not None)}\n"
            f"replay: {replay_command(path, spec)}\n"
            f"explore the same scenarios again: seed {seed} (kit check {spec} --seed {seed} --profile {profile} "
            f"--machine {machine} -k {test}, or pytest --kit-seed {seed} --kit-profile {profile} --kit-machine {machine})",
            pytrace=False,
        )


def _found_in(outcome: Any, exploration: int, with_database: bool) -> str:
    """Where the failure showed: the example (replayed ones count first) and the exploration."""
    first = getattr(outcome, "first_failing_example", None)
    where = f"first failure in example {first} of {outcome.examples}" if first else f"{outcome.examples} examples"
    where += f", exploration {exploration}"
    if with_database:
        where += " (failures saved in the example database replay first: --example-db none explores the seed alone)"
    return where
