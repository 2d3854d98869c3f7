"""Run the conformance suite in-process against one backend and collect typed results.

Used by ``kit check`` and by the kit's own seeded-bug tests. pytest runs with
its own empty configuration (the caller's project settings never leak in),
without its terminal output or cache, and with the backend injected rather
than resolved a second time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kit.contract.errors import ConfigurationError
from kit.contract.protocol import Backend
from kit.report.results import CheckResult, ResultCollector

__all__ = ["BACKEND_KEY", "SuiteRun", "check_keyword", "run_suite"]

BACKEND_KEY: pytest.StashKey[Backend] = pytest.StashKey()

_HERE = Path(__file__).parent / "conformance"


class _Inject:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[BACKEND_KEY] = self.backend


@dataclass
class SuiteRun:
    backend: str
    description: str
    results: list[CheckResult] = field(default_factory=list)
    duration_s: float = 0.0
    exit_code: int = 0
    collection_errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome in ("failed", "error")]

    @property
    def interrupted(self) -> bool:
        """The run was stopped (Ctrl-C or SIGTERM) before it finished: it has no verdict."""
        return self.exit_code == int(pytest.ExitCode.INTERRUPTED)

    @property
    def ok(self) -> bool:
        """Every collected check ran and none failed (an interrupted or broken session is not ok)."""
        return self.exit_code == 0 and not self.failed and not self.collection_errors and bool(self.results)

    def by_check(self) -> dict[str, CheckResult]:
        return {r.nodeid: r for r in self.results}


def check_keyword(keyword: str) -> None:
    """Refuse a ``-k`` expression pytest cannot parse, in one line naming the fix."""
    from _pytest.mark.expression import Expression

    try:
        Expression.compile(keyword)
    except SyntaxError as exc:
        detail = str(exc.msg if hasattr(exc, "msg") else exc).split(" (<", 1)[0]
        raise ConfigurationError(
            f"-k {keyword!r} is not a valid selection ({detail}): write check or area names joined by "
            "and / or / not, e.g. -k 'claims and not race'"
        ) from None


def _plugins(extra_args: Sequence[str]) -> list[str]:
    """The only pytest plugins a suite run loads: the kit's, Hypothesis's, and pytest-xdist's when the run is
    spread over workers (``-n``). Plugins installed beside the kit (coverage, timeouts, reordering...) are
    not auto-loaded: they would change how checks run, and importing them is paid by every ``kit check``."""
    names = ["kit.pytest_plugin", "_hypothesis_pytestplugin"]
    if "-n" in extra_args or any(str(a).startswith("--numprocesses") for a in extra_args):
        names += ["xdist.plugin", "xdist.looponfail"]
    return ["--disable-plugin-autoload", *(arg for name in names for arg in ("-p", name))]


def run_suite(
    backend: Backend,
    keyword: str | None = None,
    extra_args: Sequence[str] = (),
    on_result: Callable[[CheckResult], None] | None = None,
    on_collected: Callable[[int], None] | None = None,
) -> SuiteRun:
    """Run every conformance check (or those matching ``keyword``, pytest ``-k``) against ``backend``.

    The profile follows what the backend implements: a queue backend (``queue_promises``) runs the
    queue suite and the queue machine, any other backend the workflow suite and its machines."""
    from kit.queue import is_queue_backend

    collector = ResultCollector(on_result=on_result, on_collected=on_collected)
    target = _HERE / "queue" / "_target.py" if is_queue_backend(backend) else _HERE / "_target.py"
    args = [
        str(target),
        "-c", str(_HERE / "_pytest.ini"),
        "--rootdir", str(_HERE),
        *_plugins(extra_args),
        "-p", "no:cacheprovider",
        "-p", "no:terminal",
        "-p", "no:randomly",
        "-p", "no:faulthandler",  # nested: never reinstall process-wide signal handlers (wasmtime traps)
        "--capture=sys",  # not fd: the caller's progress display keeps its terminal while checks run
        "--import-mode=importlib",
        "-W", "ignore::pytest.PytestRemovedIn10Warning",
    ]
    if keyword:
        args += ["-k", keyword]
    args += list(extra_args)
    started = time.monotonic()
    code = pytest.main(args, plugins=[_Inject(backend), collector])
    run = SuiteRun(
        backend=getattr(backend, "name", "?"),
        description=backend.describe() if hasattr(backend, "describe") else "",
        results=collector.results,
        duration_s=time.monotonic() - started,
        exit_code=int(code),
        collection_errors=collector.collection_errors,
    )
    return run
