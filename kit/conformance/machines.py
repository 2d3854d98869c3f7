"""The fault machines as one conformance check: generated faults, compared with the reference engine."""

from __future__ import annotations

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
    def test_fault_machine_agrees_with_reference(self, kit_backend: Backend, request: pytest.FixtureRequest) -> None:
        """Under generated crashes, expired leases, stale completions, clock skew, lost acks, duplicates and
        races, every answer and the whole state match the reference engine after every step."""
        from kit.machines.bundle import make_bundle, save_bundle
        from kit.machines.machine import run_machine
        from kit.pytest_plugin import machine_settings

        profile, seed, seeds_dir, spec = machine_settings(request.config, kit_backend)
        if profile == "none":
            pytest.skip("unsupported: the fault machines were switched off (--kit-profile none)")
        outcome = run_machine(kit_backend, profile, seed)
        if outcome.error:
            pytest.fail(f"the machine itself failed (seed {seed}): {outcome.error}")
        if outcome.failure is not None:
            bundle = make_bundle(spec, kit_backend, profile, seed, outcome.failure["steps"], outcome.failure["divergence"])
            path = save_bundle(bundle, seeds_dir)
            url = request.config.getoption("kit_url", None)
            if url:
                from kit.discovery import redact

                spec = f"{spec} --url {redact(url)}"
            pytest.fail(
                f"{outcome.failure['message']}\n"
                f"seed {seed}, profile {profile}, {len(bundle['steps'])} steps after shrinking; saved to {path}\n"
                f"replay: {replay_command(path, spec)}\n"
                f"explore the same scenarios again: seed {seed} (kit check {spec} --seed {seed} --profile {profile} "
                f"-k fault_machine, or pytest --kit-seed {seed} --kit-profile {profile})",
                pytrace=False,
            )
