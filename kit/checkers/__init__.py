"""Checkers: CONTRACT.md section 6 over a stress history and the database's final state.

One checker per invariant, each returning a :class:`Verdict` (valid / unknown /
invalid) with a minimal witness and one sentence explaining the contradiction;
verdicts merge invalid > unknown > valid (:func:`merge`). Checkers are sound:
``invalid`` only when no execution of a correct store explains what was seen.

    from kit.checkers import Evidence, HistoryIndex, check_all, read_final_state
    verdicts = check_all(Evidence(HistoryIndex.from_file(path), read_final_state(db, tenants)))
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence

from kit.checkers.claims import check_no_stale_effect, check_single_live_claim
from kit.checkers.evidence import Evidence, scenario_from_run_id
from kit.checkers.index import Grant, HistoryIndex, Op
from kit.checkers.inputs import check_consumption, check_dedup, check_durable
from kit.checkers.model import GUARANTEES, Findings, Status, Verdict, merge
from kit.checkers.outcome import check_quiescent, check_tenancy
from kit.checkers.revisions import check_history, check_revisions, check_terminal
from kit.checkers.state import FinalState, read_final_state

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
