"""One seed, one scenario: the fault machine generates the same steps whatever else is loaded.

Hypothesis biases some draws toward constants it finds in the source of every local module
in ``sys.modules``; unpinned, ``kit check`` (which loads the CLI and report modules) and the
pytest route (which loads a user's own modules) generated different steps from one seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RECORD_STEPS = textwrap.dedent("""
    import importlib, json, sys
    if len(sys.argv) > 1:  # what another route loads first: the CLI and report modules, a user's own code
        sys.path.insert(0, sys.argv[1])
        for name in sys.argv[2:]:
            importlib.import_module(name)
    import kit.machines.machine as machine
    from kit.reference import MemoryBackend

    steps = []
    real = machine._Machine.step

    def recording(self, step):
        steps.append(step)
        return real(self, step)

    machine._Machine.step = recording
    outcome = machine.run_machine(MemoryBackend(), machine.Profile("pinned", 20, 30), 20261201, shrink=False)
    print(json.dumps({"ok": outcome.ok, "error": outcome.error, "steps": steps}, sort_keys=True, default=str))
""")

USER_MODULE = "\n".join(  # small numbers, as indexes and counters in anyone's code are
    [f"C{i} = {i}" for i in range(300)] + [f"S{i} = 'text-{i}'" for i in range(50)] + ["F = (0.25, 1e300)"]
) + "\n"


def _steps(*argv: str) -> list[object]:
    done = subprocess.run(
        [sys.executable, "-c", RECORD_STEPS, *argv], check=False, capture_output=True, text=True, timeout=900,
        cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": "random"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["error"] is None, result["error"]
    steps: list[object] = result["steps"]
    return steps


def test_one_seed_generates_the_same_steps_whatever_modules_are_loaded() -> None:
    folder = tempfile.mkdtemp(prefix="kit_user_code_")
    try:
        Path(folder, "kit_user_constants.py").write_text(USER_MODULE, encoding="utf-8")
        plain = _steps()
        loaded = _steps(folder, "kit.cli", "kit.commands.check", "kit.conformance", "kit.runner", "kit_user_constants")
    finally:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)
    assert len(plain) > 50
    first = next((i for i, (a, b) in enumerate(zip(plain, loaded)) if a != b), None)
    assert first is None and len(plain) == len(loaded), (
        f"the step lists diverge at step {first} of {len(plain)}: "
        f"{plain[first] if first is not None else ''} vs {loaded[first] if first is not None else ''}"
    )
