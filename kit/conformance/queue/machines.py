"""The queue fault machine as one conformance check (model-free: invariants only)."""

from __future__ import annotations

import pytest

from kit.conformance.queue._harness import QueueAreaChecks
from kit.queue import QueueBackend

__all__ = ["QueueMachineChecks"]


class QueueMachineChecks(QueueAreaChecks):
    area = "queue_machines"

    def test_queue_fault_machine_keeps_invariants(self, kit_backend: QueueBackend,
                                                  request: pytest.FixtureRequest) -> None:
        """Under generated crashes, duplicate deliveries, stale completions, lost acknowledgements and
        recoveries, the store's observable state keeps every promised invariant after every step."""
        from kit.machines.bundle import make_bundle, save_bundle
        from kit.machines.queue_machine import run_queue_machine
        from kit.pytest_plugin import machine_settings

        profile, seed, seeds_dir, spec = machine_settings(request.config, kit_backend)  # type: ignore[arg-type]
        if profile == "none":
            pytest.skip("unsupported: the fault machines were switched off (--kit-profile none)")
        from kit.machines import progress
        from kit.machines.queue_machine import QUEUE_PROFILES

        budget = QUEUE_PROFILES[profile]
        with progress.running("queue", seed, budget.max_examples, budget.steps):
            outcome = run_queue_machine(kit_backend, profile, seed)
        if outcome.error:
            pytest.fail(f"the queue machine itself failed (seed {seed}): {outcome.error}")
        if outcome.failure is not None:
            bundle = make_bundle(spec, kit_backend, profile, seed, outcome.failure["steps"],  # type: ignore[arg-type]
                                 outcome.failure["divergence"])
            bundle["kind"] = "queue"
            path = save_bundle(bundle, seeds_dir)
            pytest.fail(
                f"{outcome.failure['message']}\n"
                f"seed {seed}, profile {profile}, {len(bundle['steps'])} steps after shrinking; saved to {path}\n"
                f"replay: kit replay {path} --backend {spec}",
                pytrace=False,
            )
