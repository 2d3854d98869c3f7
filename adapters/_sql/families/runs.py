"""Runs started (idempotently), read, listed by code point, and their history."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from adapters._sql import rows as R
from adapters._sql.families._base import SqlPlumbing
from kit.contract import validation as v
from kit.contract.entities import (
    JSON,
    DefinitionRef,
    Event,
    Run,
    RunStatus,
    StartResult,
)
from kit.contract.errors import (
    DefinitionMismatch,
    DefinitionNotFound,
    RunAlreadyExists,
)

__all__ = ["RunSql"]


class RunSql(SqlPlumbing):
    """Runs started (idempotently), read, listed by code point, and their history."""

    def start_run(
        self,
        run_id: str,
        definition: DefinitionRef,
        input: JSON = None,
        idempotency_key: str | None = None,
    ) -> StartResult:
        v.check_text("run_id", run_id, v.MAX_RUN_ID)
        v.check_text("definition.name", definition.name, v.MAX_NAME)
        v.check_text("definition.version", definition.version, v.MAX_NAME)
        v.check_json("input", input)
        if idempotency_key is not None:
            v.check_text("idempotency_key", idempotency_key, v.MAX_KEY)
        input_text = v.encode_json(input)

        def start(cur: Any) -> StartResult:
            if idempotency_key is not None:
                existing = self._run_by_key(cur, idempotency_key)
                if existing is not None:
                    return StartResult(existing, created=False)
            with self._pipelined():  # the clock and the definition in one round trip where the dialect queues
                clock = self._clock(cur)
                stored = self._definition(cur, definition.name, definition.version)
            if stored is None:
                raise DefinitionNotFound(
                    f"definition {definition.name!r} version {definition.version!r} is unknown: "
                    "call ensure_definition() first"
                )
            if stored.digest != definition.digest:
                raise DefinitionMismatch(
                    f"definition {definition.name!r} version {definition.version!r} is stored with "
                    f"digest {stored.digest[:12]}..., not {definition.digest[:12]}...: register the "
                    "changed body under a new version"
                )
            now = self._clock_value(clock.fetchone())
            inserted = self.dialect.insert_if_absent(
                cur,
                "kit_runs",
                (
                    "tenant_id", "run_id", "def_name", "def_version", "def_digest", "status",
                    "revision", "claim_owner", "claim_generation", "claim_expires_at", "wake_at",
                    "due_at", "wakeup_pending", "cancel_requested", "cancel_reason", "input",
                    "output", "error", "idempotency_key", "created_at", "updated_at",
                ),
                (
                    self.tenant_id, run_id, stored.name, stored.version, stored.digest, "pending",
                    0, None, 0, None, now, now, 0, 0, None, input_text, "null", "null",
                    idempotency_key, now, now,
                ),
            )
            if not inserted:
                if idempotency_key is not None:
                    existing = self._run_by_key(cur, idempotency_key)
                    if existing is not None:
                        return StartResult(existing, created=False)
                raise RunAlreadyExists(
                    f"run {run_id!r} already exists: use a new run id, or repeat the original "
                    "idempotency key to get the existing run back"
                )
            run = self._run(cur, run_id)
            assert run is not None
            return StartResult(run, created=True)

        return self._write(start)

    def get_run(self, run_id: str) -> Run | None:
        return self._read_one(lambda cur: self._run(cur, run_id))

    def list_runs(
        self, status: RunStatus | None = None, after: str | None = None, limit: int = 100
    ) -> list[Run]:
        v.check_limit(limit)
        where, params = ["tenant_id = ?"], [self.tenant_id]
        if status is not None:
            where.append("status = ?")
            params.append(RunStatus(status).value)
        if after is not None:
            where.append("run_id > ?")
            params.append(after)
        sql = self.dialect.limit(
            f"SELECT {R.RUN_COLUMNS} FROM kit_runs WHERE {' AND '.join(where)} ORDER BY run_id", limit
        )
        return self._read_one(lambda cur: [R.to_run(r) for r in self._exec(cur, sql, params).fetchall()])

    def get_history(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        sql = f"SELECT {R.EVENT_COLUMNS} FROM kit_events WHERE tenant_id = ? AND run_id = ? AND seq > ? ORDER BY seq"
        if limit is not None:
            sql = self.dialect.limit(sql, v.check_limit(limit))
        return self._read_one(
            lambda cur: [R.to_event(r) for r in self._exec(cur, sql, (self.tenant_id, run_id, after_seq)).fetchall()]
        )

    def export_state(self, run_ids: Collection[str] | None = None) -> dict[str, Any]:
        """The tenant's whole observable state (see kit.inspect) in one snapshot of five queries (one round
        trip, BEGIN and COMMIT included, where the dialect queues); with ``run_ids``, only those runs (the
        ones that exist), in the same five queries."""
        from kit.inspect import assemble

        only = ""
        ids: tuple[str, ...] = ()
        if run_ids is not None:
            ids = tuple(sorted(set(run_ids)))
            if not ids:
                return {}
            only = f" AND run_id IN {self._in(ids)}"

        def export(cur: Any) -> dict[str, Any]:
            t = (self.tenant_id, *ids)
            queries = (
                (0, f"SELECT {R.EVENT_COLUMNS} FROM kit_events WHERE tenant_id = ?{only} ORDER BY run_id, seq", R.to_event),
                (1, f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ?{only} ORDER BY command_id",
                 R.to_command),
                (2, f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals WHERE tenant_id = ?{only} ORDER BY signal_id", R.to_signal),
                (3, f"SELECT {R.TIMER_COLUMNS} FROM kit_timers WHERE tenant_id = ?{only} ORDER BY timer_id", R.to_timer),
            )
            with self._pipelined(last_reads=True):  # one round trip where the dialect queues, COMMIT included
                run_rows = self._query(
                    cur, f"SELECT {R.RUN_COLUMNS} FROM kit_runs WHERE tenant_id = ?{only} ORDER BY run_id", t)
                lists = [(slot, self._query(cur, sql, t), convert) for slot, sql, convert in queries]
            runs = [R.to_run(r) for r in run_rows.fetchall()]
            if ids:  # exactly the ids asked for, whatever the column's collation matches
                runs = [r for r in runs if r.run_id in ids]
            if not runs:
                return {}
            parts: dict[str, tuple[list[Any], list[Any], list[Any], list[Any]]] = {r.run_id: ([], [], [], []) for r in runs}
            for slot, result, convert in lists:
                for row in result.fetchall():
                    item = convert(row)
                    if item.run_id in parts:
                        parts[item.run_id][slot].append(item)
            return {r.run_id: assemble(r, *parts[r.run_id]) for r in runs}

        return self._read(export)
