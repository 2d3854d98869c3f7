"""``--kit-profile none`` switches the fault machines off, and then loads none of them: the machine modules
(and Hypothesis' state machines with them) cost most of a second to import under pytest's assertion
rewriting, which a check run without machines should not pay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


_CLI_PROBE = """
import json, sys
from kit.cli import main
try:
    main(["check", "sqlite", "--profile", "none", "--no-report", "--no-progress", "-k", "definitions"])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = ("hypothesis", "wasmtime", "kit.runtime.decider", "kit.runtime.module", "kit.machines.interpreter",
         "kit.reference", "kit_probe_plugin")
print(json.dumps({"code": code, "loaded": [m for m in heavy if m in sys.modules]}))
"""


def _fake_plugin(site: Path) -> None:
    """An installed distribution with a pytest11 plugin, as a user's environment may hold (coverage, timeouts)."""
    (site / "kit_probe_plugin.py").write_text("def pytest_configure(config):\n    raise SystemExit('auto-loaded')\n")
    info = site / "kit_probe_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kit-probe-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nkit_probe = kit_probe_plugin\n")


def test_a_check_without_machines_loads_no_machine_runtime_or_foreign_plugin(tmp_path: Path) -> None:
    """``kit check --profile none`` imports neither Hypothesis, nor the WASM runtime, nor the interpreters
    (each is paid by every such run), and no pytest plugin the environment auto-loads runs inside it."""
    _fake_plugin(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", _CLI_PROBE], capture_output=True, text=True, check=False,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["code"] == 0, done.stdout[-2000:]
    assert seen["loaded"] == [], f"loaded by a check without machines: {seen['loaded']}"


def test_the_fake_plugin_is_auto_loaded_by_plain_pytest(tmp_path: Path) -> None:
    """The probe above means something: the same environment makes a plain pytest session load the plugin."""
    _fake_plugin(tmp_path)
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, check=False, timeout=300, env=env, cwd=tmp_path)
    assert "auto-loaded" in done.stdout + done.stderr, done.stdout[-2000:]
