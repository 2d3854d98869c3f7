"""The concurrent fault workload (``kit stress``): real deciders, workers and timer loops under a nemesis.

* :class:`StressConfig` -- one run's settings (every random choice comes from its seed).
* :func:`run_stress` -- provision, run with faults, heal, drain, stop, read the state, check.
* :class:`Recorder` / :func:`read_entries` -- the JSONL operation history.

Two modes (``StressConfig.mode``): ``free`` (below) and ``deterministic``, where
the same threads and connections move one statement at a time as a seeded
scheduler decides, on the store's test clock, so a seed replays the same
interleaving (:mod:`kit.workload.deterministic`, :mod:`kit.workload.scheduler`,
:mod:`kit.workload.replay`).

Workers are threads of this process. Every race the contract is about is
between transactions in the database server: each statement is a network
round trip (or an SQLite call) during which the driver releases the GIL, so the
interleavings between workers' statements are as real as between processes.
Processes would only add something if the adapter had in-process critical
sections, which the SQL adapters do not; threads keep the nemesis, the history
and the checkers in one place and start in milliseconds.
"""

from typing import Any

from kit.workload.config import DEFAULT_SCENARIOS, StressConfig
from kit.workload.history import Recorder, read_entries

__all__ = [
    "DEFAULT_SCENARIOS",
    "Progress",
    "Recorder",
    "StressConfig",
    "StressResult",
    "read_entries",
    "run_stress",
]


def __getattr__(name: str) -> Any:
    # The runner imports the checkers, which read the history format defined here:
    # importing it lazily keeps ``kit.checkers`` importable on its own.
    if name in ("Progress", "StressResult", "run_stress"):
        from kit.workload import runner

        return getattr(runner, name)
    raise AttributeError(name)
