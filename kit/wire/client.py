"""The kit's side of the wire protocol: a :class:`~kit.contract.Backend` whose store runs elsewhere.

``exec:'<command>'`` starts the store as a child process speaking the protocol
on its stdin/stdout; ``wire://host:port`` connects to one serving it on TCP.
Either way the result is an ordinary Backend, so ``kit check``, the fault
machines and ``kit stress`` run against it unchanged. The protocol is
``docs/wire-protocol.md``; this module only maps it onto the Python protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kit.contract import capabilities as capabilities_module
from kit.contract import errors as E
from kit.contract.capabilities import Capabilities, Capability
from kit.contract.entities import (
    JSON,
    ClockMode,
    Command,
    CommandClaim,
    Decision,
    Definition,
    DefinitionRef,
    Event,
    Run,
    RunClaim,
    RunStatus,
    Signal,
    SignalReceipt,
    Snapshot,
    StartResult,
    Timer,
)
from kit.contract.errors import ConfigurationError, StorageError
from kit.contract.outcomes import Outcome
from kit.contract.protocol import MigrationSpec, StatementHook, Storage
from kit.wire.codec import WireTypeError, decode, encode
from kit.wire.errors import StoreProcessFault, WireProtocolError
from kit.wire.transport import RemoteError, Transport, connect_exec, connect_tcp

__all__ = ["OPERATIONS", "PROTOCOL_VERSION", "WireBackend", "WireDatabase", "WireMigration", "WireStorage", "connect"]

PROTOCOL_VERSION = 1

OPERATIONS: tuple[str, ...] = (
    # session (section 4 of docs/wire-protocol.md)
    "hello", "provision", "open", "close", "kill_session", "reset", "drop",
    # storage (section 5): every method of kit.contract.protocol.Storage
    "migrate", "verify_schema", "now", "set_test_clock", "advance_test_clock", "ensure_definition",
    "get_definition", "list_definition_versions", "start_run", "get_run", "list_runs", "request_cancel", "get_history", "claim_runs",
    "renew_run_claim", "release_run_claim", "load_claimed", "commit_decision", "claim_commands",
    "heartbeat_command", "complete_command", "fail_command", "get_command", "list_commands", "send_signal",
    "list_signals", "fire_due_timers", "list_timers", "begin", "commit", "rollback", "lock_run",
    # the fault layer's network drop
    "drop_connection",
    # sent by the store (section 6)
    "fault_point",
)
"""Every operation of wire protocol version 1."""

#: Contract error names a store may put in ``error.type``, and how each is built.
_PLAIN_ERRORS: dict[str, type[Exception]] = {
    name: getattr(E, name)
    for name in (
        "ClockModeError", "ConfigurationError", "ConnectionLost", "DefinitionMismatch", "DefinitionNotFound",
        "InvalidArgument", "InvalidDecision", "LockTimeout", "NotInTransaction", "RunAlreadyExists",
        "StorageError", "TransactionRolledBack", "TransientError",
    )
}


def _build_error(name: str, message: str, error: dict[str, Any]) -> Exception | None:
    """The contract error a store's ``error`` object names (None: not a contract error)."""
    if name == "SchemaError":
        return E.SchemaError(str(error.get("problem", "absent")), message)
    cls = _PLAIN_ERRORS.get(name)
    return None if cls is None else cls(message)


@dataclass(frozen=True)
class WireMigration:
    """A migration as the store reported it (read-only, like every MigrationSpec)."""

    version: int
    name: str
    sql: str
    checksum: str


def connect(spec: str) -> WireBackend:
    """The backend behind ``exec:'<command>'`` or ``wire://host:port``, after the handshake."""
    if spec.startswith("exec:"):
        command = spec[len("exec:"):].strip()
        return WireBackend(connect_exec(command), spec)
    if spec.startswith("wire://"):
        rest = spec[len("wire://"):].rstrip("/")
        host, sep, port = rest.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigurationError(f"malformed wire URL {spec!r}: write it like wire://127.0.0.1:7070")
        return WireBackend(connect_tcp(host.strip("[]"), int(port)), spec)
    raise ConfigurationError(f"{spec!r} is not a wire store: write exec:'<command>' or wire://host:port")


class WireBackend:
    """A store in another process, known by its handshake."""

    def __init__(self, transport: Transport, spec: str) -> None:
        self.transport = transport
        self.spec = spec
        try:
            hello = self._hello()
        except StoreProcessFault as exc:
            transport.close()
            raise E.BackendUnavailable(
                spec, f"the store did not complete the handshake ({exc})",
                "Check that the command runs on its own (its packages installed, e.g. npm ci) and that its "
                "database is reachable",
            ) from None
        except BaseException:
            transport.close()
            raise
        self.name: str = hello["name"]
        self.protocol: int = hello["protocol"]
        self.store_version: str = str(hello.get("version", ""))
        promises = hello.get("promises", [])
        if not isinstance(promises, list) or not all(isinstance(p, str) for p in promises):
            raise ConfigurationError(f"{spec}: the handshake's promises must be a list of names")
        self.promises: tuple[str, ...] = tuple(promises)
        """The promise families the store declares (all of them when it names none)."""
        self._describe = str(hello.get("describe", ""))
        self.capabilities = self._capabilities(hello)

    def _hello(self) -> dict[str, Any]:
        try:
            hello = self.transport.call("hello", {"protocol": PROTOCOL_VERSION, "kit": _kit_version()})
        except RemoteError as exc:
            raise ConfigurationError(
                f"{self.spec}: the store refused the handshake ({exc}): it must speak wire protocol "
                f"version {PROTOCOL_VERSION} (docs/wire-protocol.md)"
            ) from None
        if not isinstance(hello, dict) or hello.get("protocol") != PROTOCOL_VERSION or not isinstance(hello.get("name"), str):
            raise ConfigurationError(
                f"{self.spec}: the handshake answer {str(hello)[:200]!r} is not a version {PROTOCOL_VERSION} hello "
                '(it needs "protocol": 1 and a "name"; see docs/wire-protocol.md)'
            )
        return hello

    def _capabilities(self, hello: dict[str, Any]) -> Capabilities:
        names = hello.get("capabilities", [])
        known = {c.value: c for c in Capability}
        unknown = [n for n in names if n not in known]
        if not isinstance(names, list) or unknown:
            raise ConfigurationError(
                f"{self.spec}: the handshake declares unknown capabilities {unknown or names!r}: use only "
                f"{', '.join(sorted(known))}"
            )
        resolution = hello.get("clock_resolution_us", 1)
        failures = hello.get("expected_failures", {})
        if not isinstance(resolution, int) or resolution < 1 or not isinstance(failures, dict):
            raise ConfigurationError(
                f"{self.spec}: clock_resolution_us must be a positive integer and expected_failures an object"
            )
        options: dict[str, Any] = {
            "clock_resolution_us": resolution,
            "expected_failures": {str(k): str(v) for k, v in failures.items()},
        }
        promise_type = getattr(capabilities_module, "Promise", None)
        if promise_type is not None and "promises" in hello:  # the kit knows promise families
            by_name = {p.value: p for p in promise_type}
            strange = [n for n in self.promises if n not in by_name]
            if strange:
                raise ConfigurationError(
                    f"{self.spec}: the handshake promises unknown families {strange!r}: use only "
                    f"{', '.join(sorted(by_name))}"
                )
            options["promises"] = [by_name[n] for n in self.promises]
        return Capabilities.of(*(known[n] for n in names), **options)

    def describe(self) -> str:
        return f"{self.name} {self.store_version} over wire protocol {self.protocol} ({self.spec}); {self._describe}"

    def call(self, op: str, result: Any = Any, hook: StatementHook | None = None, /, **args: Any) -> Any:
        """One operation: arguments encoded, the answer decoded as ``result``, errors typed."""
        encoded = {k: encode(v, k) for k, v in args.items()}
        fired: list[BaseException] = []

        def fault_point(request: dict[str, Any]) -> str:
            statement = request["args"]["statement"]
            if hook is not None:
                try:
                    hook(statement)
                except BaseException as exc:
                    fired.append(exc)
                    raise
            return "continue"

        try:
            answer = self.transport.call(op, encoded, fault_point)
        except RemoteError as exc:
            if fired:
                raise fired[0] from None  # the hook's own exception, as an in-process store raises it
            raise _typed(exc) from None
        if fired:
            raise StorageError(
                f"{self.name}: {op} answered ok although the kit failed its statement "
                f"({fired[0]}): a store must abort the operation when a fault point answers an error"
            )
        try:
            return decode(answer, result, op)
        except WireTypeError as exc:
            raise WireProtocolError(f"{self.name} answered {op} with the wrong type: {exc}") from None

    def provision(self) -> WireDatabase:
        answer = self.call("provision", dict[str, Any])
        handle, label = answer.get("database"), answer.get("label", answer.get("database"))
        if not isinstance(handle, str) or not isinstance(label, str):
            raise WireProtocolError(
                f"{self.name} answered provision with the wrong type: database and label must be strings, "
                f"got {str(answer)[:120]}"
            )
        return WireDatabase(self, handle, label)

    def close(self) -> None:
        self.transport.close()


def _typed(exc: RemoteError) -> Exception:
    name, message = exc.error["type"], exc.error["message"]
    built = _build_error(name, message, exc.error)
    if built is None:
        return StorageError(f"the store answered {exc.op} with an error of unknown type {name!r}: {message}")
    return built


def _kit_version() -> str:
    from kit import __version__

    return __version__


class WireDatabase:
    """One throw-away database the store provisioned."""

    def __init__(self, backend: WireBackend, handle: str, label: str) -> None:
        self.backend = backend
        self.handle = handle
        self.label = f"{label} via {backend.spec}"

    def open(
        self,
        tenant_id: str = "default",
        *,
        clock: ClockMode = ClockMode.TEST,
        migrations: Sequence[MigrationSpec] | None = None,
        statement_hook: StatementHook | None = None,
    ) -> WireStorage:
        given = None if migrations is None else [
            {"version": m.version, "name": m.name, "sql": m.sql, "checksum": m.checksum} for m in migrations
        ]
        answer = self.backend.call(
            "open", dict[str, Any], statement_hook, database=self.handle, tenant_id=tenant_id,
            clock=ClockMode(clock) if isinstance(clock, str) else clock, migrations=given,
            faults=statement_hook is not None,
        )
        try:
            applied = [WireMigration(int(m["version"]), str(m["name"]), str(m["sql"]), str(m["checksum"]))
                       for m in answer["migrations"]]
            handle = str(answer["store"])
        except (KeyError, TypeError, ValueError) as exc:
            raise WireProtocolError(f"{self.backend.name} answered open without store/migrations ({exc})") from None
        return WireStorage(self.backend, handle, tenant_id, ClockMode(clock), applied, statement_hook)

    def kill_session(self, store: Storage) -> None:
        if not isinstance(store, WireStorage):
            raise ConfigurationError("kill_session needs a store opened on this wire database")
        self.backend.call("kill_session", type(None), database=self.handle, store=store.handle)

    def reset(self) -> None:
        """Empty the kit's tables and rewind the test clock, keeping the migrated schema."""
        self.backend.call("reset", type(None), database=self.handle)

    def drop(self) -> None:
        self.backend.call("drop", type(None), database=self.handle)


class _UnitOfWork:
    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []
        self.depth = 0

    def on_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)


class _DropHandle:
    """What the fault layer's ``drop_connection`` closes (``store._conn.raw.close()``): a
    ``drop_connection`` request, so the store drops its database connection abruptly."""

    def __init__(self, storage: WireStorage) -> None:
        self._storage = storage

    @property
    def raw(self) -> _DropHandle:
        return self

    def close(self) -> None:
        self._storage._call("drop_connection", type(None))


class WireStorage:
    """One store opened in the store process; every method is one request."""

    def __init__(
        self, backend: WireBackend, handle: str, tenant_id: str, clock: ClockMode,
        migrations: list[WireMigration], hook: StatementHook | None,
    ) -> None:
        self.backend = backend
        self.handle = handle
        self.tenant_id = tenant_id
        self.clock_mode = clock
        self._migrations = migrations
        self._hook = hook
        self._uow: _UnitOfWork | None = None
        self._conn = _DropHandle(self)

    def _call(self, op: str, result: Any = Any, /, **args: Any) -> Any:
        return self.backend.call(op, result, self._hook, store=self.handle, **args)

    @property
    def migrations(self) -> Sequence[MigrationSpec]:
        return list(self._migrations)

    def close(self) -> None:
        if self.backend.transport.notify_broken() is None:
            try:
                self._call("close", type(None))
            except E.KitError:
                pass

    # -- schema lifecycle -------------------------------------------------
    def migrate(self) -> list[str]:
        return self._call("migrate", list[str])  # type: ignore[no-any-return]

    def verify_schema(self) -> None:
        self._call("verify_schema", type(None))

    # -- clock --------------------------------------------------------------
    def now(self) -> datetime:
        return self._call("now", datetime)  # type: ignore[no-any-return]

    def set_test_clock(self, at: datetime) -> None:
        self._call("set_test_clock", type(None), at=at)

    def advance_test_clock(self, by: timedelta) -> datetime:
        return self._call("advance_test_clock", datetime, by=by)  # type: ignore[no-any-return]

    # -- definitions --------------------------------------------------------
    def ensure_definition(self, name: str, version: str, digest: str, body: bytes) -> Definition:
        return self._call("ensure_definition", Definition, name=name, version=version,  # type: ignore[no-any-return]
                          digest=digest, body=body)

    def get_definition(self, name: str, version: str) -> Definition | None:
        return self._call("get_definition", Definition | None, name=name, version=version)  # type: ignore[no-any-return]

    def list_definition_versions(self, name: str) -> list[Definition]:
        return self._call("list_definition_versions", list[Definition], name=name)  # type: ignore[no-any-return]

    # -- runs ---------------------------------------------------------------
    def start_run(self, run_id: str, definition: DefinitionRef, input: JSON = None,
                  idempotency_key: str | None = None) -> StartResult:
        return self._call("start_run", StartResult, run_id=run_id, definition=definition,  # type: ignore[no-any-return]
                          input=input, idempotency_key=idempotency_key)

    def get_run(self, run_id: str) -> Run | None:
        return self._call("get_run", Run | None, run_id=run_id)  # type: ignore[no-any-return]

    def list_runs(self, status: RunStatus | None = None, after: str | None = None, limit: int = 100) -> list[Run]:
        return self._call("list_runs", list[Run], status=status, after=after, limit=limit)  # type: ignore[no-any-return]

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome:
        return self._call("request_cancel", Outcome, run_id=run_id, reason=reason)  # type: ignore[no-any-return]

    def get_history(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        return self._call("get_history", list[Event], run_id=run_id, after_seq=after_seq,  # type: ignore[no-any-return]
                          limit=limit)

    # -- decision claims ----------------------------------------------------
    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        return self._call("claim_runs", list[RunClaim], worker_id=worker_id, lease=lease,  # type: ignore[no-any-return]
                          limit=limit)

    def renew_run_claim(self, claim: RunClaim, lease: timedelta) -> Outcome:
        return self._call("renew_run_claim", Outcome, claim=claim, lease=lease)  # type: ignore[no-any-return]

    def release_run_claim(self, claim: RunClaim) -> Outcome:
        return self._call("release_run_claim", Outcome, claim=claim)  # type: ignore[no-any-return]

    def load_claimed(self, claim: RunClaim) -> Snapshot | Outcome:
        answer = self._call("load_claimed", dict[str, Any], claim=claim)
        if set(answer) == {"outcome"}:
            return decode(answer["outcome"], Outcome, "load_claimed.outcome")  # type: ignore[no-any-return]
        if set(answer) == {"snapshot"}:
            return decode(answer["snapshot"], Snapshot, "load_claimed.snapshot")  # type: ignore[no-any-return]
        raise WireProtocolError(f"{self.backend.name} answered load_claimed with neither outcome nor snapshot")

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        if not isinstance(decision, Decision):
            raise E.InvalidDecision(f"expected a Decision, got {type(decision).__name__}")
        return self._call("commit_decision", Outcome, claim=claim,  # type: ignore[no-any-return]
                          expected_revision=expected_revision, decision=decision)

    # -- commands -------------------------------------------------------------
    def claim_commands(self, worker_id: str, lease: timedelta, limit: int = 1,
                       queues: Sequence[str] | None = None) -> list[CommandClaim]:
        return self._call("claim_commands", list[CommandClaim], worker_id=worker_id,  # type: ignore[no-any-return]
                          lease=lease, limit=limit, queues=None if queues is None else list(queues))

    def heartbeat_command(self, claim: CommandClaim, lease: timedelta) -> Outcome:
        return self._call("heartbeat_command", Outcome, claim=claim, lease=lease)  # type: ignore[no-any-return]

    def complete_command(self, claim: CommandClaim, result: JSON = None) -> Outcome:
        return self._call("complete_command", Outcome, claim=claim, result=result)  # type: ignore[no-any-return]

    def fail_command(self, claim: CommandClaim, error: JSON = None, retry_after: timedelta | None = None,
                     retryable: bool = True) -> Outcome:
        return self._call("fail_command", Outcome, claim=claim, error=error,  # type: ignore[no-any-return]
                          retry_after=retry_after, retryable=retryable)

    def get_command(self, command_id: str) -> Command | None:
        return self._call("get_command", Command | None, command_id=command_id)  # type: ignore[no-any-return]

    def list_commands(self, run_id: str) -> list[Command]:
        return self._call("list_commands", list[Command], run_id=run_id)  # type: ignore[no-any-return]

    # -- signals ----------------------------------------------------------------
    def send_signal(self, run_id: str, name: str, payload: JSON, dedup_key: str) -> SignalReceipt:
        return self._call("send_signal", SignalReceipt, run_id=run_id, name=name,  # type: ignore[no-any-return]
                          payload=payload, dedup_key=dedup_key)

    def list_signals(self, run_id: str) -> list[Signal]:
        return self._call("list_signals", list[Signal], run_id=run_id)  # type: ignore[no-any-return]

    # -- timers -----------------------------------------------------------------
    def fire_due_timers(self, limit: int = 100) -> list[Timer]:
        return self._call("fire_due_timers", list[Timer], limit=limit)  # type: ignore[no-any-return]

    def list_timers(self, run_id: str) -> list[Timer]:
        return self._call("list_timers", list[Timer], run_id=run_id)  # type: ignore[no-any-return]

    # -- unit of work -------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[_UnitOfWork]:
        """``begin``/``commit``/``rollback`` requests; the store nests them (CONTRACT.md unit of work)
        and the kit runs ``on_commit`` callbacks after the outermost commit answered ok."""
        self._call("begin", type(None))
        uow = self._uow or _UnitOfWork()
        self._uow, uow.depth = uow, uow.depth + 1
        try:
            yield uow
        except BaseException:
            uow.depth -= 1
            if not uow.depth:
                self._uow = None
            try:
                self._call("rollback", type(None))
            except E.KitError:
                pass  # the original error says more; the store rolled back or its session is gone
            raise
        uow.depth -= 1
        if not uow.depth:
            self._uow = None
        self._call("commit", type(None))
        if not uow.depth:
            for callback in uow.callbacks:
                callback()

    def lock_run(self, run_id: str) -> Run | None:
        return self._call("lock_run", Run | None, run_id=run_id)  # type: ignore[no-any-return]
