"""A stress history, read once and indexed for the checkers.

Each invocation is paired with its completion into an :class:`Op` (an
invocation never completed stays ``pending``: as unknown as ``info``). Claims
that claimed nothing and clock samples are not kept as ops: samples become the
store-time bounds (:meth:`HistoryIndex.store_lower` / :meth:`store_upper`);
granted claims become :class:`Grant` records per run and per command.

:class:`HistoryIndex` keeps the operations in memory (about 0.75 kB an entry: fine
for tests and short runs); :class:`kit.checkers.spill.SpilledIndex` keeps them in a
scratch file and gives the checkers the same views, one group at a time.
"""

from __future__ import annotations

import bisect
import sys
from array import array
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.checkers.groups import Groups, MemoryGroups
from kit.workload.history import INFO, INVOKE, OK, read_entries

__all__ = ["Grant", "HistoryIndex", "Op", "store_time"]

UNKNOWN = ("info", "pending")


def store_time(us: int | None) -> str:
    """A store time as a short UTC clock reading, for sentences."""
    if us is None:
        return "an unknown store time"
    from kit.clock import from_micros

    return from_micros(us).strftime("%H:%M:%S.%f")


@dataclass(slots=True)
class Op:
    """One operation: its invocation and how it ended (``ok`` / ``fail`` / ``info`` / ``pending``)."""

    index: int
    process: str
    f: str
    tenant: str
    t: float
    store_lo: int | None
    args: Any
    run: str | None
    command: str | None
    gen: int | None
    type: str = "pending"
    done_t: float | None = None
    done_index: int | None = None
    value: Any = None
    error: str | None = None

    @property
    def unknown(self) -> bool:
        return self.type in UNKNOWN

    @property
    def end_t(self) -> float:
        return self.done_t if self.done_t is not None else float("inf")

    def ref(self) -> dict[str, Any]:
        """The witness form: where it is in the history and what it said."""
        out: dict[str, Any] = {"history": [self.index] + ([self.done_index] if self.done_index is not None else []),
                               "process": self.process, "f": self.f, "tenant": self.tenant, "type": self.type,
                               "t": round(self.t, 4)}
        for key in ("run", "command", "gen"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.value is not None:
            out["value"] = self.value
        if self.error:
            out["error"] = self.error
        return out

    def where(self) -> str:
        return f"{self.process}, history #{self.index}"


@dataclass(slots=True)
class Grant:
    """A claim the store acknowledged (run or command), with its exact store times."""

    op: Op
    run: str
    command: str | None
    gen: int
    revision: int | None
    expires_us: int
    granted_us: int

    @property
    def owner(self) -> str:
        return self.op.process


class HistoryIndex:
    """See the module docstring.

    The views the checkers read (:attr:`ops`, :attr:`by_f`, :attr:`by_run`, :attr:`by_command`,
    :attr:`run_grants`, :attr:`command_grants`, :attr:`infos`) are held in memory here;
    :class:`kit.checkers.spill.SpilledIndex` keeps them on disk and reads one group at a time.
    Building streams the entries once: only invocations still waiting for their completion are
    held (bounded by the operations open at any moment), plus the clock samples as three compact
    arrays (24 bytes a sample: a store-time bound can be asked for any past moment, e.g. a
    renewal made long before the operation it judges).
    """

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._by_f: dict[str, list[Op]] = defaultdict(list)
        self._by_run: dict[tuple[str, str], list[Op]] = defaultdict(list)
        self._by_command: dict[tuple[str, str], list[Op]] = defaultdict(list)
        self._run_grants: dict[tuple[str, str], list[Grant]] = defaultdict(list)
        self._command_grants: dict[tuple[str, str], list[Grant]] = defaultdict(list)
        self._infos: list[dict[str, Any]] = []
        self._at: dict[int, Op] | None = None
        self.config: dict[str, Any] = {}
        self.dead: set[str] = set()
        self.drain: dict[str, Any] | None = None
        self.entries = 0
        self.empty_polls = 0
        self._clock_done = array("d")
        self._clock_invoked = array("d")
        self._clock_us = array("q")

    @classmethod
    def from_file(cls, path: Path) -> HistoryIndex:
        """The whole history in memory (small histories, tests); :func:`kit.checkers.check_stress` spills it."""
        return cls.from_entries(read_entries(path))

    @classmethod
    def from_entries(cls, entries: Iterable[dict[str, Any]]) -> HistoryIndex:
        index = cls()
        index._build(entries)
        return index

    def _build(self, entries: Iterable[dict[str, Any]]) -> None:
        """One pass over ``entries``: pair each invocation with its completion, keep what the checkers read."""
        pending: dict[int, Op] = {}
        clocks: dict[int, float] = {}
        for entry in entries:
            self.entries += 1
            kind = entry.get("type")
            if kind == INVOKE:
                if entry.get("f") == "now" and entry.get("process") == "clock":
                    clocks[int(entry["index"])] = float(entry["t"])
                    continue
                op = Op(int(entry["index"]), str(entry.get("process", "")), str(entry.get("f", "")),
                        sys.intern(str(entry.get("tenant", ""))), float(entry.get("t", 0.0)), entry.get("store_us"),
                        entry.get("value"), entry.get("run"), entry.get("command"), entry.get("gen"))
                pending[op.index] = op
            elif "invoke" in entry:
                invoked = int(entry["invoke"])
                if invoked in clocks:
                    t0 = clocks.pop(invoked)
                    if kind == OK and isinstance(entry.get("value"), int):
                        self._clock(t0, float(entry["t"]), int(entry["value"]))
                    continue
                found = pending.pop(invoked, None)
                if found is not None:
                    found.type, found.done_t, found.done_index = str(kind), float(entry["t"]), int(entry["index"])
                    found.value, found.error = entry.get("value"), entry.get("error")
                    self._add(found)
            elif kind == INFO:
                self._info(entry)
        for op in pending.values():  # never completed: as unknown as info
            self._add(op)
        self._built()

    def _clock(self, invoked: float, done: float, us: int) -> None:
        self._clock_invoked.append(invoked)
        self._clock_done.append(done)
        self._clock_us.append(us)

    def _info(self, entry: dict[str, Any]) -> None:
        f = entry.get("f")
        if f == "config" and isinstance(entry.get("value"), dict):
            self.config = entry["value"]
        elif f == "crash":
            self.dead.add(str(entry.get("process")))
        elif f == "drain" and isinstance(entry.get("value"), dict):
            self.drain = entry["value"]
        if f in ("crash", "fault", "heal", "drain", "config", "phase") or entry.get("process") == "nemesis":
            self._keep_info(entry)

    def _add(self, op: Op) -> None:
        if op.f in ("claim_runs", "claim_commands") and op.type == OK and not op.value:
            self.empty_polls += 1
            return
        grants: list[Grant] = []
        if op.type == OK and op.f in ("claim_runs", "claim_commands") and isinstance(op.value, list):
            lease_us = int((op.args or {}).get("lease_us", 0))
            for item in op.value:
                grants.append(Grant(op, str(item["run"]), item.get("command"), int(item["gen"]),
                                    item.get("revision"), int(item["expires_us"]),
                                    int(item["expires_us"]) - lease_us))
        self._keep(op, grants)

    # -- where the index keeps what it read (in memory here; on disk in the spilled index) --------
    def _keep(self, op: Op, grants: list[Grant]) -> None:
        self._ops.append(op)
        self._by_f[op.f].append(op)
        if op.run is not None:
            self._by_run[(op.tenant, op.run)].append(op)
        if op.command is not None:
            self._by_command[(op.tenant, op.command)].append(op)
        for grant in grants:
            if grant.command is None:
                self._run_grants[(op.tenant, grant.run)].append(grant)
            else:
                self._command_grants[(op.tenant, str(grant.command))].append(grant)

    def _keep_info(self, entry: dict[str, Any]) -> None:
        self._infos.append(entry)

    def _built(self) -> None:
        self._ops.sort(key=lambda o: o.index)

    # -- the views ------------------------------------------------------------------
    @property
    def ops(self) -> Iterable[Op]:
        """Every operation kept, in invocation order."""
        return self._ops

    @property
    def by_f(self) -> Mapping[str, Iterable[Op]]:
        """Operations by name, in the order they completed (never completed ones last)."""
        return self._by_f

    @property
    def by_run(self) -> Mapping[tuple[str, str], Sequence[Op]]:
        """Operations naming a run, per (tenant, run), groups in the order they began."""
        return self._by_run

    @property
    def by_command(self) -> Mapping[tuple[str, str], Sequence[Op]]:
        return self._by_command

    @property
    def run_grants(self) -> Mapping[tuple[str, str], Sequence[Grant]]:
        return self._run_grants

    @property
    def command_grants(self) -> Mapping[tuple[str, str], Sequence[Grant]]:
        return self._command_grants

    @property
    def infos(self) -> Iterable[dict[str, Any]]:
        """Faults, crashes, heals, phases, the config and the drain, in history order."""
        return self._infos

    def groups(self, arity: int) -> Groups[Any]:
        """Empty groups for a checker's cross-run question (:mod:`kit.checkers.groups`): in memory here, in
        the scratch file in the spilled index."""
        return MemoryGroups()

    def op_at(self, index: int) -> Op:
        """The operation invoked at history ``index`` (checkers keep indexes, not operations)."""
        if self._at is None:
            self._at = {op.index: op for op in self._ops}
        return self._at[index]

    # -- store time ---------------------------------------------------------------
    @property
    def samples(self) -> int:
        return len(self._clock_us)

    def store_lower(self, t: float) -> int | None:
        """The store time at (real) moment ``t`` was at least this: the last sample completed before ``t``."""
        i = bisect.bisect_right(self._clock_done, t)
        return self._clock_us[i - 1] if i else None

    def store_upper(self, t: float) -> int | None:
        """The store time at moment ``t`` was at most this: the first sample invoked after ``t``."""
        i = bisect.bisect_left(self._clock_invoked, t)
        return self._clock_us[i] if i < len(self._clock_us) else None

    # -- helpers -------------------------------------------------------------------
    def ok(self, f: str) -> Iterable[Op]:
        """The acknowledged operations named ``f``, in completion order."""
        return (op for op in self.by_f.get(f, ()) if op.type == OK)

    def run_ops(self, tenant: str, run: str, f: str) -> list[Op]:
        return [op for op in self.by_run.get((tenant, run), ()) if op.f == f]

    def command_ops(self, tenant: str, command: str, *fs: str) -> list[Op]:
        return [op for op in self.by_command.get((tenant, command), ()) if op.f in fs]
