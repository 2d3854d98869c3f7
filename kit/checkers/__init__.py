"""Checkers: CONTRACT.md section 6 over a stress history and the database's final state.

One checker per invariant, each returning a :class:`Verdict` (valid / unknown /
invalid) with a minimal witness and one sentence explaining the contradiction;
verdicts merge invalid > unknown > valid (:func:`merge`). Checkers are sound:
``invalid`` only when no execution of a correct store explains what was seen.

    from kit.checkers import Evidence, HistoryIndex, check_all, read_final_state
    verdicts = check_all(Evidence(HistoryIndex.from_file(path), read_final_state(db, tenants)))

A stress run checks with :func:`check_stress` instead: the history and the final state
go to a scratch file as they are read and come back one run at a time, and every
cross-run question (which runs were started, which keys created, which timers fired)
is answered from groups kept in that file (:mod:`kit.checkers.groups`), so memory is
bounded by the largest run and the operations open at once (plus 24 bytes per store
clock sample), not by the history's length or the number of runs
(:mod:`kit.checkers.spill`). The verdicts are the same.
"""

from __future__ import annotations

import gc
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from kit.checkers.claims import check_no_stale_effect, check_single_live_claim
from kit.checkers.evidence import Evidence, scenario_from_run_id
from kit.checkers.index import Grant, HistoryIndex, Op
from kit.checkers.inputs import check_consumption, check_dedup, check_durable
from kit.checkers.model import GUARANTEES, Findings, Status, Verdict, merge
from kit.checkers.outcome import check_quiescent, check_tenancy
from kit.checkers.revisions import check_history, check_revisions, check_terminal
from kit.checkers.state import FinalState, read_final_state
from kit.runtime.module import Registry

__all__ = [
    "CHECKERS",
    "GUARANTEES",
    "Evidence",
    "FinalState",
    "Findings",
    "Grant",
    "HistoryIndex",
    "Op",
    "Status",
    "Verdict",
    "check_all",
    "check_stress",
    "merge",
    "read_final_state",
    "scenario_from_run_id",
]

Checker = Callable[[Evidence], Verdict]

#: (invariant, name, checker), in CONTRACT.md order.
CHECKERS: tuple[tuple[int, str, Checker], ...] = (
    (1, "history_append_only", check_history),
    (2, "one_decision_per_revision", check_revisions),
    (3, "no_stale_effect", check_no_stale_effect),
    (4, "single_live_claim", check_single_live_claim),
    (5, "exactly_once_consumption", check_consumption),
    (6, "deduplication", check_dedup),
    (7, "acknowledged_durable", check_durable),
    (8, "terminal_immutable", check_terminal),
    (9, "quiescent_outcome", check_quiescent),
    (10, "tenant_isolation", check_tenancy),
)


def check_all(evidence: Evidence, only: Sequence[int] = ()) -> list[Verdict]:
    """Every checker's verdict (or those of ``only``), in invariant order.

    A final state that could not be read makes every verdict unknown; a checker
    that raises gives an unknown verdict carrying the error (never a crash).
    """
    verdicts = []
    for invariant, name, checker in CHECKERS:
        if only and invariant not in only:
            continue
        if evidence.state.error is not None:
            verdicts.append(Verdict(invariant, name, Status.UNKNOWN, evidence.state.error))
            continue
        try:
            verdicts.append(checker(evidence))
        except Exception as exc:  # noqa: BLE001 - a checker bug must not hide the other verdicts
            detail = traceback.format_exc(limit=3)
            verdicts.append(Verdict(invariant, name, Status.UNKNOWN,
                                    f"the checker failed ({type(exc).__name__}: {exc}); report it to the kit",
                                    ({"traceback": detail},)))
    return verdicts


def check_stress(history: Path, read_state: Callable[[Path], FinalState], registry: Registry | None = None,
                 replay_limit: int = 200) -> list[Verdict]:
    """:func:`check_all` of a recorded stress history in bounded memory.

    The history file is indexed in one streaming pass into a scratch SQLite file, and
    ``read_state(spill)`` must read the final state with ``spill`` (see :func:`read_final_state`);
    both live in a temporary folder beside the history, removed before this returns.
    """
    from kit.checkers.spill import SpilledIndex, SpilledRuns

    _between_phases()  # the workload's leftovers first
    with tempfile.TemporaryDirectory(prefix=".check-", dir=history.parent) as scratch:
        state = read_state(Path(scratch) / "state.sqlite")
        _between_phases()
        index = SpilledIndex.from_history(history, Path(scratch) / "history.sqlite")
        _between_phases()
        try:
            return check_all(Evidence(index, state, registry, replay_limit=replay_limit))
        finally:
            index.close()
            if isinstance(state.tenants, SpilledRuns):
                state.tenants.close()
            _between_phases()


def _between_phases() -> None:
    """A full collection before each phase of a check (and after the last), so a phase does not start on
    top of the last one's leftovers: CPython keeps up to 2000 freed tuples of each size (20 sizes, up to about 4.5 MB)
    in free lists that only a full collection empties, and the last phase's cyclic garbage (a
    workload's crashed sessions) waits for one too. Reading a long run's state filled them with 1.5 MB
    that the checkers' peak then sat on."""
    gc.collect()
