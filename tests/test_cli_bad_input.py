"""Bad input is exit 2 with one line naming the fix; an interrupted run is exit 130, never "FAIL".

Every case here once ended in a traceback with exit 1 (the code for failed checks), in a
divergence blamed on the adapter, or in "PASS"/"FAIL" verdicts for runs that never ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kit.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    code = main(argv)
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code == 2, f"kit {' '.join(argv)} exited {code}: {text}"
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    for needle in needles:
        assert needle in text, text
    return text


# -- backends ----------------------------------------------------------------
def test_a_factory_that_raises_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_exit_2(capsys, ["check", "tests._cli_fixtures.raising_factory:make_backend", "--no-report"],
                     "RuntimeError", "not finished", "fix the factory")


def test_a_module_that_raises_on_import_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_exit_2(capsys, ["check", "tests._cli_fixtures.raising_module:make_backend", "--no-report"],
                     "raised RuntimeError", "fails on import")


def test_a_url_for_a_backend_that_takes_none_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_exit_2(capsys, ["check", "memory", "--url", "sqlite:///tmp", "--no-report"], "drop --url")


# -- selections ----------------------------------------------------------------
def test_a_selection_matching_nothing_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["check", "memory", "-k", "nosuchcheck", "--report-dir", str(tmp_path), "--no-progress"])
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code == 2, text
    assert "no check matches -k 'nosuchcheck'" in out.err.strip().splitlines()[-1]  # error lines go to stderr
    assert "FAIL" not in text and "PASS" not in text and "Traceback" not in text


def test_a_malformed_selection_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_exit_2(capsys, ["check", "memory", "-k", "and or", "--no-report"], "not a valid selection")


# -- numbers and seeds -----------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["stress", "--duration", "nan"], ["stress", "--duration", "inf"], ["stress", "--duration", "0"],
    ["stress", "--duration", "-1"], ["stress", "--lease", "nan"], ["stress", "--fault-interval", "inf"],
    ["stress", "--drain", "-inf"], ["stress", "--workers", "0"], ["stress", "--seed", "-5"],
    ["run", "x", "--timeout", "nan"], ["run", "x", "--timeout", "0"], ["run", "x", "--replay-sample", "-1"],
    ["check", "--seed", "abc"], ["check", "--seed", "-5"],
], ids=lambda argv: " ".join(argv))
def test_non_finite_or_out_of_range_numbers_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert "error: argument" in capsys.readouterr().err


@pytest.mark.parametrize("raw", ["abc", "-5", "1.5", "99999999999999999999"])
def test_a_malformed_kit_seed_is_refused_like_seed(raw: str, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_SEED", raw)
    _one_line_exit_2(capsys, ["check", "memory", "--no-report"], "KIT_SEED")


def test_a_malformed_kit_seed_is_refused_by_the_pytest_route(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.contract import ConfigurationError
    from kit.seeds import env_seed, parse_seed

    monkeypatch.setenv("KIT_SEED", "-5")
    with pytest.raises(ConfigurationError):
        env_seed()
    with pytest.raises(ConfigurationError):
        parse_seed("abc", "--kit-seed")
    assert parse_seed("0", "--kit-seed") == 0


# -- replay bundles ----------------------------------------------------------------
GOOD_STEPS: list[dict[str, Any]] = [
    {"op": "define", "worker": "w0", "name": "wf", "body": "v1"},
    {"op": "start", "worker": "w0", "run": "r0"},
]


def _bundle(tmp_path: Path, **changes: Any) -> str:
    bundle: dict[str, Any] = {"format": 1, "backend": "memory", "seed": 1, "steps": GOOD_STEPS}
    bundle.update(changes)
    for key in [k for k, v in changes.items() if v is _DROP]:
        del bundle[key]
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle), encoding="utf-8")
    return str(path)


_DROP = object()


@pytest.mark.parametrize(("changes", "needle"), [
    ({"steps": [*GOOD_STEPS, {"op": "teleport", "worker": "w0"}]}, "unknown op 'teleport'"),
    ({"steps": [*GOOD_STEPS, "start r0"]}, "not an object"),
    ({"steps": [*GOOD_STEPS, {"op": "signal", "worker": "w0", "key": "s"}]}, "lacks field 'run'"),
    ({"steps": [*GOOD_STEPS, {"op": "cancel", "worker": "w9", "run": "r0"}]}, "worker 'w9'"),
    ({"steps": [*GOOD_STEPS, {"op": "lost_ack", "inner": {"op": "cancel", "run": "r0"}}]}, "lacks field 'worker'"),
    ({"steps": []}, "no steps"),
], ids=["unknown-op", "step-not-object", "step-missing-run", "unknown-worker", "inner-missing-worker", "no-steps"])
def test_malformed_bundles_are_bad_input_never_an_adapter_divergence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], needle: str,
) -> None:
    text = _one_line_exit_2(capsys, ["replay", _bundle(tmp_path, **changes), "--backend", "memory"], needle)
    assert "adapter" not in text and "reproduced" not in text and "no divergence" not in text


def test_a_bundle_without_a_backend_needs_one_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_exit_2(capsys, ["replay", _bundle(tmp_path, backend=_DROP)], "--backend")
    assert main(["replay", _bundle(tmp_path, backend=_DROP), "--backend", "memory"]) == 0


def test_a_step_value_neither_side_can_apply_is_blamed_on_the_step(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    steps = [*GOOD_STEPS, {"op": "advance", "us": "soon"}, {"op": "claim_runs", "worker": "w0", "lease_s": "x"}]
    for broken in (2, 3):
        code = main(["replay", _bundle(tmp_path, steps=steps[:2] + [steps[broken]]), "--backend", "sqlite"])
        out = capsys.readouterr()
        text = (out.out + out.err).strip()
        assert code == 2, text
        last = out.err.strip().splitlines()[-1]  # error lines go to stderr
        assert "step 2" in last and "malformed" in last and "adapter" not in text and "Traceback" not in text


# -- interrupted runs -----------------------------------------------------------------
INTERRUPTING_KIT = textwrap.dedent("""
    import os, signal, sys
    import kit.runner as runner

    real = runner.run_suite
    SIGNAL = getattr(signal, sys.argv[1])

    def interrupted(backend, keyword=None, extra_args=(), on_result=None, on_collected=None):
        seen = []

        def hook(result):
            on_result(result)
            seen.append(result)
            if len(seen) == 3:
                os.kill(os.getpid(), SIGNAL)  # Ctrl-C, or what a CI timeout sends

        return real(backend, keyword=keyword, extra_args=extra_args, on_result=hook, on_collected=on_collected)

    runner.run_suite = interrupted
    from kit.cli import main
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_an_interrupted_check_is_exit_130_without_a_verdict(signame: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTING_KIT, signame, "check", "memory", "--no-progress", "--report-dir",
         str(tmp_path), "--profile", "none"],
        check=False, capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "KIT_SEED": "7"},
    )
    text = done.stdout + done.stderr
    assert done.returncode == 130, text
    assert "interrupted" in text and "FAIL" not in text and "PASS" not in text and "Traceback" not in text, text
    assert signal.SIGTERM  # both signals unwind the same way
