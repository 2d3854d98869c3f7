"""``--kit-profile none`` switches the fault machines off, and then loads none of them: the machine modules
(and Hypothesis' state machines with them) cost most of a second to import under pytest's assertion
rewriting, which a check run without machines should not pay."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, sys
from kit.backends import resolve
from kit.runner import run_suite
backend = resolve("sqlite")
try:
    run = run_suite(backend, keyword="fault_machine", extra_args=["--kit-profile", "none"])
finally:
    backend.close()
loaded = [m for m in ("kit.machines.bundle", "kit.machines.machine", "kit.machines.model_free_machine",
                      "hypothesis.stateful") if m in sys.modules]
print(json.dumps({"outcomes": [r.outcome for r in run.results], "loaded": loaded}))
"""


def test_switched_off_machines_are_skipped_without_loading_them() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["outcomes"] and set(seen["outcomes"]) == {"skipped"}, seen
    assert seen["loaded"] == [], f"machine modules loaded although the machines were switched off: {seen['loaded']}"
