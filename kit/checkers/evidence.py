"""What every checker reads: the indexed history, the final state, and how to judge a run's end.

:meth:`Evidence.machine` runs the fault machines' state checks
(:func:`kit.machines.invariants.violations`) once on the final state and hands
each invariant its sentences: sequence contiguity (1), duplicate keys (6),
timers fired before their time (5), acknowledged starts and signals that are
gone (7). The stress checkers add what only the history can show.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from kit.checkers.groups import Groups
from kit.checkers.index import HistoryIndex, Op
from kit.checkers.model import Findings
from kit.checkers.state import FinalState
from kit.runtime.module import Registry
from kit.runtime.scenarios import SCENARIOS, Scenario
from kit.workload.history import OK

__all__ = ["Evidence", "plain", "scenario_from_run_id"]

_INVARIANT = re.compile(r"\(invariant (\d+)")
_RUN = re.compile(r"run '([^']+)'")
_TENANT = re.compile(r"\(tenant ([^)]+)\)")
_SIGNAL = re.compile(r"signal '([^']+)'")


def scenario_from_run_id(run_id: str) -> Scenario | None:
    """The scenario of a stress run id ``<tenant>-<scenario>-<n>``."""
    parts = run_id.split("-")
    return SCENARIOS.get(parts[1]) if len(parts) >= 3 else None


@dataclass
class Evidence:
    history: HistoryIndex
    state: FinalState
    registry: Registry | None = None
    scenario_of: Callable[[str], Scenario | None] = scenario_from_run_id
    replay_limit: int = 200
    _machine: dict[int, list[str]] | None = field(default=None, repr=False)

    # -- the history, per run ---------------------------------------------------------
    def commits(self, tenant: str, run_id: str) -> tuple[list[Op], list[Op]]:
        """(acknowledged, unknown) commits of a run."""
        ops = self.history.run_ops(tenant, run_id, "commit")
        return [o for o in ops if o.type == OK], [o for o in ops if o.unknown]

    def started(self) -> Groups[tuple[str, str]]:
        """(tenant, run id) of every run whose start was invoked through that tenant's store (whatever the
        outcome); ask ``(tenant, run_id) in started``."""
        out: Groups[tuple[str, str]] = self.history.groups(2)
        for op in self.history.by_f.get("start", ()):
            if op.run is not None:
                out.add((op.tenant, op.run), None)
        return out

    def groups(self, arity: int) -> Groups[Any]:
        """Empty groups for a cross-run question, kept where the history is (:mod:`kit.checkers.groups`)."""
        return self.history.groups(arity)

    # -- the fault machines' state checks ------------------------------------------------
    def machine(self, invariant: int) -> list[str]:
        if self._machine is None:
            self._machine = self._run_machine_checks()
        return self._machine.get(invariant, [])

    def _run_machine_checks(self) -> dict[int, list[str]]:
        from kit.machines.invariants import acknowledged_violations, violations

        if self.state.now is None:
            return {}
        committed = _Committed(self)
        tenants = cast(dict[str, dict[str, Any]], dict(self.state.tenants))
        # every acknowledged start and signal is looked up as it streams by; only the missing ones are
        # kept, and the machines' check sorts and words them as it would the whole set
        missing: set[tuple[str, str, str]] = set()
        for item in self._acknowledged():
            if item not in missing and acknowledged_violations(tenants, {item}):
                missing.add(item)
        found: dict[int, list[str]] = defaultdict(list)
        for sentence in violations(None, tenants, self.state.now, cast(dict[tuple[str, str], int], committed),
                                   missing):
            match = _INVARIANT.search(sentence)
            found[int(match.group(1)) if match else 0].append(sentence)
        return found

    def _acknowledged(self) -> Iterator[tuple[str, str, str]]:
        """(tenant, "run", run id) of each acknowledged start, (tenant, "signal", run id + dedup key) of each
        acknowledged signal, as :func:`kit.machines.invariants.acknowledged_violations` takes them."""
        for op in self.history.ok("start"):
            yield op.tenant, "run", str(op.run)
        for op in self.history.ok("signal"):
            if isinstance(op.args, dict):
                yield op.tenant, "signal", f"{op.run}\x1f{op.args.get('dedup')}"

    def findings(self, invariant: int, name: str) -> Findings:
        """A checker's findings, starting with what the fault machines' invariant checks say of the final state."""
        found = Findings(invariant, name)
        for sentence in self.machine(invariant):
            found.violation(sentence, *self.machine_witness(sentence))
        return found

    def machine_witness(self, sentence: str) -> tuple[dict[str, Any], ...]:
        """The witness of a fault-machine sentence: the run's state and the operations it names."""
        run_match = _RUN.search(sentence)
        if run_match is None:
            return ({"sentence": sentence},)
        run_id = run_match.group(1)
        tenant_match = _TENANT.search(sentence)
        tenants = [tenant_match.group(1)] if tenant_match else [t for t in self.state.tenants
                                                                if run_id in self.state.tenants[t]] or [""]
        witness: list[dict[str, Any]] = [self.run_witness(tenants[0], run_id, self.state.run(tenants[0], run_id))]
        if "acknowledged" in sentence:
            key = _SIGNAL.search(sentence)
            for op in self.history.by_run.get((tenants[0], run_id), ()):
                if op.type == OK and (op.f == "start" if key is None else
                                      op.f == "signal" and (op.args or {}).get("dedup") == key.group(1)):
                    witness.append(op.ref())
                    break
        return tuple(witness)

    @staticmethod
    def run_witness(tenant: str, run_id: str, state: dict[str, Any] | None, *fields: str) -> dict[str, Any]:
        """A final-state fragment for a witness: the run's row, only ``fields`` of it."""
        if state is None:
            return {"state": {"tenant": tenant, "run": run_id, "present": False}}
        run = state["run"]
        shown = {k: run.get(k) for k in (fields or ("status", "revision", "claim_owner", "claim_generation"))}
        return {"state": {"tenant": tenant, "run": run_id, **{k: plain(v) for k, v in shown.items()}}}


class _Committed(Mapping[tuple[str, str], int]):
    """Run -> the decisions the history says it committed, worked out when asked (not held for every run).

    Lost acknowledgements: any revision between the acknowledged and the possible counts.
    """

    def __init__(self, ev: Evidence) -> None:
        self._ev = ev

    def __getitem__(self, key: tuple[str, str]) -> int:
        st = self._ev.state.run(*key)
        if st is None:
            raise KeyError(key)
        ok, unknown = self._ev.commits(*key)
        revision = int(st["run"]["revision"])
        return revision if len(ok) <= revision <= len(ok) + len(unknown) else len(ok)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return ((tenant, run_id) for tenant, runs in self._ev.state.tenants.items() for run_id in runs)

    def __len__(self) -> int:
        return sum(len(runs) for runs in self._ev.state.tenants.values())


def plain(value: Any) -> Any:
    """A state value as JSON-ish data: an enum's value, a datetime's ISO text, anything else as it is."""
    if hasattr(value, "value"):
        return value.value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
