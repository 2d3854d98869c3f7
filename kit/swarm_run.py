"""``kit check --workers N``: the fixed checks in this process, the fault-machine explorations on N cores.

Guarantees: the fixed checks run exactly as in a one-worker run (serial, in this process, on the
backend object given: on SQLite pytest-xdist ran them slower than one process); then the machine
explorations of this shard run through pytest-xdist, one worker per exploration, each worker resolving
the backend from its spec (``--kit-backend``/``--kit-url``). The two sessions' results come back as
one :class:`~kit.runner.SuiteRun`, so the run has one table and one report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from kit.contract.protocol import Backend
from kit.report.results import CheckResult
from kit.runner import SuiteRun, run_suite

__all__ = ["combine_runs", "run_swarm"]

_NO_TESTS = int(pytest.ExitCode.NO_TESTS_COLLECTED)


def combine_runs(first: SuiteRun, second: SuiteRun) -> SuiteRun:
    """One run holding both sessions' results; its exit code is the worse of the two, where a session
    that selected nothing (the other part matched the whole ``-k``) does not count."""
    codes = [code for code in (first.exit_code, second.exit_code) if code != _NO_TESTS]
    return SuiteRun(
        backend=first.backend, description=first.description, results=[*first.results, *second.results],
        duration_s=first.duration_s + second.duration_s, exit_code=max(codes) if codes else _NO_TESTS,
        collection_errors=[*first.collection_errors, *second.collection_errors],
    )


def run_swarm(
    backend: Backend,
    workers: int,
    keyword: str | None = None,
    extra_args: Sequence[str] = (),
    on_result: Callable[[CheckResult], None] | None = None,
    on_collected: Callable[[int], None] | None = None,
) -> SuiteRun:
    """The fixed checks of ``extra_args``' shard serially, then its ``workers`` machine explorations on
    ``workers`` pytest-xdist workers (``extra_args`` must name the backend: ``--kit-backend``)."""
    counted = [0]

    def collected(n: int) -> None:
        counted[0] = n
        if on_collected is not None:
            on_collected(n)

    suite = run_suite(backend, keyword=keyword, extra_args=[*extra_args, "--kit-part", "suite"],
                      on_result=on_result, on_collected=collected)
    if suite.interrupted:
        return suite
    base = counted[0]

    def more(n: int) -> None:
        if on_collected is not None:
            on_collected(base + n)

    machines = run_suite(backend, keyword=keyword,
                         extra_args=[*extra_args, "--kit-part", "machines", "-n", str(workers), "--dist", "load"],
                         on_result=on_result, on_collected=more)
    return combine_runs(suite, machines)
