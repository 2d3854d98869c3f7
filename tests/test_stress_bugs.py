"""Seeded bugs only real concurrency reveals: ``kit stress`` must catch each, well within its default duration.

Each run uses a fixed seed and a few seconds of faults (the default is 20 s):
the claim without row locks is caught within the first claims; the
check-then-act fence needs a worker paused between its two transactions after
its lease was taken over, which the nemesis does several times a run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.checkers import Status
from kit.contract import BackendUnavailable
from kit.pytest_plugin import required_backends
from kit.workload import StressConfig, run_stress
from tests.seeded_bugs.stress_bugs import STRESS_BUGS, StressBug

DEFAULT = StressConfig()
SEEDS = {"claim_without_lock": (3, 3.0), "fence_check_then_act": (10, 10.0)}
"""Bug -> (seed, seconds of faults). Free mode is timed by real threads: on a loaded machine the check-then-act
window is hit less often, so its run lasts 10 s (under a CPU hog, seed 10 caught it in 6 of 6 runs of 10 s, and in 4
of 6 runs of 6 s once the fenced writes sent their locks and clock in one round trip)."""


@pytest.mark.parametrize("bug", STRESS_BUGS, ids=[f"{b.backend}-{b.name}" for b in STRESS_BUGS])
def test_kit_stress_catches_seeded_concurrency_bug(bug: StressBug, tmp_path: Path) -> None:
    try:
        backend = bug.make_backend()
    except BackendUnavailable as exc:
        if bug.backend in required_backends():
            pytest.fail(f"not-reachable: {exc} (required by KIT_REQUIRE_BACKENDS)", pytrace=False)
        pytest.skip(f"not-reachable: {exc}")
    seed, seconds = SEEDS[bug.name]
    assert seconds < DEFAULT.duration_s
    try:
        result = run_stress(backend, StressConfig(seed=seed, duration_s=seconds), report_root=tmp_path,
                            spec=f"tests.seeded_bugs.stress_bugs:{bug.backend}_{bug.name}")
    finally:
        backend.close()
    invalid = {v.invariant: v for v in result.verdicts if v.status is Status.INVALID}
    caught = [invalid[i] for i in bug.caught_by if i in invalid]
    assert caught, (f"seeded bug {bug.name} on {bug.backend} ({bug.description}) survived {seconds} s of seed {seed}: "
                    f"verdicts {[(v.invariant, v.status.value) for v in result.verdicts]}, history {result.history}")
    for verdict in caught:
        assert verdict.explanation and verdict.witness
        first = min(float(w["t"]) for w in verdict.witness if "t" in w)
        assert first < DEFAULT.duration_s  # caught within the default duration
