"""The fault machines as one conformance check: generated faults, compared with the reference engine."""

from __future__ import annotations

import pytest

from kit.conformance._harness import AreaChecks, requires
from kit.contract import Backend, Capability, Promise

__all__ = ["MachineChecks"]


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
            pytest.fail(
                f"{outcome.failure['message']}\n"
                f"seed {seed}, profile {profile}, {len(bundle['steps'])} steps after shrinking; saved to {path}\n"
                f"replay: kit replay {path} --backend {spec}",
                pytrace=False,
            )
