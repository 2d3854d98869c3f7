"""The store side of the wire protocol for any Python backend: ``python -m kit.wire.serve BACKEND``.

It serves a backend the kit can already resolve (``memory``, ``sqlite``, ``postgres``,
``package.module:factory``) on stdin/stdout, or on TCP with ``--listen PORT``, so

    kit check exec:'python -m kit.wire.serve memory'

runs the whole kit through the bridge against the reference engine: a check of the
protocol and its codec in both directions, with no other language involved. Each
store gets its own thread (drivers such as SQLite are bound to one), fault points
are real ``fault_point`` requests, and answers are encoded exactly as a store in
another language must encode them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import queue
import socketserver
import sys
import threading
import typing
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import IO, Any

from kit.contract import errors as E
from kit.contract.entities import ClockMode, Snapshot
from kit.contract.outcomes import Outcome
from kit.contract.protocol import Backend, Database, Storage
from kit.wire.client import OPERATIONS, PROTOCOL_VERSION
from kit.wire.codec import PAYLOAD_FIELDS, WireTypeError, decode, decode_value, encode
from kit.wire.transport import MAX_MESSAGE_BYTES

__all__ = ["Server", "main"]

_STORAGE_OPS = frozenset(OPERATIONS) - {"hello", "provision", "open", "kill_session", "reset", "drop", "fault_point"}
_ERROR_NAMES = frozenset(
    {"ClockModeError", "ConfigurationError", "ConnectionLost", "DefinitionMismatch", "DefinitionNotFound",
     "InvalidArgument", "InvalidDecision", "LockTimeout", "NotInTransaction", "RunAlreadyExists", "SchemaError",
     "StorageError", "TransactionRolledBack", "TransientError"}
)


class _Refused(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, _Refused):
        return {"type": exc.kind, "message": str(exc)}
    if isinstance(exc, WireTypeError):
        return {"type": "InvalidArgument", "message": str(exc)}
    name = next((c.__name__ for c in type(exc).__mro__ if c.__name__ in _ERROR_NAMES), "StorageError")
    out = {"type": name, "message": str(exc) or type(exc).__name__}
    if isinstance(exc, E.SchemaError):
        out["problem"] = exc.problem
    return out


class _StoreWorker:
    """One open store and the thread that runs every request for it."""

    def __init__(self, server: Server, handle: str) -> None:
        self.server = server
        self.handle = handle
        self.store: Storage | None = None
        self.database: Database | None = None
        self.call: Any = None
        self.units: list[AbstractContextManager[Any]] = []
        self.jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        threading.Thread(target=self._run, name=f"wire-serve {handle}", daemon=True).start()

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            job()

    def hook(self, statement: str) -> None:
        self.server.fault_point(self.call, self.handle, statement)


class Server:
    """Serves one backend to one connection."""

    def __init__(self, backend: Backend, write: Callable[[bytes], None]) -> None:
        self.backend = backend
        self._write = write
        self._write_lock = threading.Lock()
        self.databases: dict[str, Database] = {}
        self.stores: dict[str, _StoreWorker] = {}
        self.seen: set[Any] = set()
        self.waiting: dict[str, queue.Queue[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        with self._write_lock:
            self._write(line)

    # -- requests -----------------------------------------------------------------
    def line(self, raw: bytes) -> None:
        """Handle one line from the kit."""
        if not raw.strip():
            return
        if len(raw.rstrip(b"\n")) > MAX_MESSAGE_BYTES:
            self.send({"id": None, "error": {"type": "ProtocolError", "message": f"a message over {MAX_MESSAGE_BYTES} bytes"}})
            return
        try:
            message = json.loads(raw)
        except ValueError as exc:
            self.send({"id": None, "error": {"type": "ProtocolError", "message": f"malformed JSON ({exc}): {raw[:120]!r}"}})
            return
        if not isinstance(message, dict) or not isinstance(message.get("id"), int | str) or isinstance(message.get("id"), bool):
            self.send({"id": None, "error": {"type": "ProtocolError", "message": f"a message needs an id: {raw[:120]!r}"}})
            return
        rid = message["id"]
        if "op" not in message:
            with self._lock:
                inbox = self.waiting.pop(rid, None) if isinstance(rid, str) else None
            if inbox is None:
                self.send({"id": None, "error": {"type": "ProtocolError", "message": f"a response to a request never sent: {raw[:120]!r}"}})
            else:
                inbox.put(message)
            return
        with self._lock:
            repeated = rid in self.seen
            self.seen.add(rid)
        op, args = message.get("op"), message.get("args", {})
        if repeated:
            self.send({"id": rid, "error": {"type": "ProtocolError", "message": f"request id {rid!r} was already used"}})
        elif not isinstance(op, str) or not isinstance(args, dict):
            self.send({"id": rid, "error": {"type": "ProtocolError", "message": '"op" must be a string and "args" an object'}})
        elif op not in OPERATIONS or op == "fault_point":
            self.send({"id": rid, "error": {"type": "UnknownOperation", "message": f"unknown operation {op!r}"}})
        elif op in _STORAGE_OPS:
            worker = self.stores.get(str(args.get("store")))
            if worker is None:
                self.send({"id": rid, "error": {"type": "InvalidArgument", "message": f"no open store {args.get('store')!r}"}})
            elif op == "drop_connection":  # from inside a fault point of the store's own call
                threading.Thread(target=self._answer, args=(rid, lambda: self._drop(worker)), daemon=True).start()
            else:
                worker.jobs.put(lambda: self._storage(worker, rid, op, args))
        else:
            threading.Thread(target=self._answer, args=(rid, lambda: self._session(rid, op, args)), daemon=True).start()

    def _answer(self, rid: Any, fn: Callable[[], Any]) -> None:
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - every failure is an error answer
            self.send({"id": rid, "error": _error(exc)})
            return
        self.send({"id": rid, "ok": result})

    def fault_point(self, call: Any, store: str, statement: str) -> None:
        """Ask the kit whether ``statement`` may run; raise if it answers with an error."""
        fid = f"f{next(self._ids)}"
        inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self.waiting[fid] = inbox
        self.send({"id": fid, "op": "fault_point", "args": {"call": call, "store": store, "statement": statement}})
        answer = inbox.get()
        if "error" in answer:
            raise E.StorageError(f"the kit failed this statement ({answer['error'].get('type')}: {answer['error'].get('message')})")

    # -- session operations -----------------------------------------------------------
    def _database(self, args: dict[str, Any]) -> Database:
        database = self.databases.get(str(args.get("database")))
        if database is None:
            raise E.InvalidArgument(f"no database {args.get('database')!r} was provisioned on this connection")
        return database

    def _session(self, rid: Any, op: str, args: dict[str, Any]) -> Any:
        if op == "hello":
            if args.get("protocol") != PROTOCOL_VERSION:
                raise _Refused("ProtocolError", f"this store speaks wire protocol {PROTOCOL_VERSION}")
            caps = self.backend.capabilities
            promises = getattr(caps, "promises", None)
            return {
                "protocol": PROTOCOL_VERSION, "name": f"python-{self.backend.name}", "version": "1",
                "describe": self.backend.describe(), "capabilities": sorted(c.value for c in caps.supported),
                "clock_resolution_us": caps.clock_resolution_us, "expected_failures": dict(caps.expected_failures),
                **({"promises": sorted(p.value for p in promises)} if promises is not None else {}),
            }
        if op == "provision":
            database = self.backend.provision()
            handle = f"db{next(self._ids)}"
            self.databases[handle] = database
            return {"database": handle, "label": database.label}
        database = self._database(args)
        if op == "open":
            return self._open(rid, database, args)
        if op == "kill_session":
            worker = self.stores.get(str(args.get("store")))
            if worker is None or worker.store is None:
                raise E.InvalidArgument(f"no open store {args.get('store')!r}")
            database.kill_session(worker.store)
            return None
        if op == "reset":
            reset = getattr(database, "reset", None)
            if reset is None:
                raise E.ConfigurationError("this database cannot be reset: provision a new one")
            reset()
            return None
        for handle, worker in list(self.stores.items()):
            if worker.database is database:
                self._close(worker)
                self.stores.pop(handle, None)
        database.drop()
        self.databases.pop(str(args["database"]), None)
        return None

    def _open(self, rid: Any, database: Database, args: dict[str, Any]) -> Any:
        from kit.migrate import Migration

        handle = f"s{next(self._ids)}"
        worker = _StoreWorker(self, handle)
        worker.database, worker.call = database, rid
        given = args.get("migrations")
        migrations = None if given is None else [Migration(int(m["version"]), str(m["name"]), str(m["sql"])) for m in given]
        done: queue.Queue[BaseException | None] = queue.Queue()

        def open_it() -> None:
            try:
                worker.store = database.open(
                    args.get("tenant_id", "default"), clock=ClockMode(args.get("clock", "test")), migrations=migrations,
                    statement_hook=worker.hook if args.get("faults") else None,
                )
                done.put(None)
            except BaseException as exc:  # noqa: BLE001 - reported to the kit
                done.put(exc)

        worker.jobs.put(open_it)
        failure = done.get()
        if failure is not None:
            worker.jobs.put(None)
            raise failure
        assert worker.store is not None
        self.stores[handle] = worker
        return {"store": handle, "session": None, "migrations": [
            {"version": m.version, "name": m.name, "sql": m.sql, "checksum": m.checksum} for m in worker.store.migrations
        ]}

    def _close(self, worker: _StoreWorker) -> None:
        if worker.store is not None:
            store = worker.store
            worker.jobs.put(store.close)
        worker.jobs.put(None)

    @staticmethod
    def _drop(worker: _StoreWorker) -> None:
        from kit.faults.points import can_drop, drop_connection

        if worker.store is None or not can_drop(worker.store):
            raise E.ConfigurationError("this store has no client connection to drop")
        drop_connection(worker.store)

    # -- storage operations ---------------------------------------------------------------
    def _storage(self, worker: _StoreWorker, rid: Any, op: str, args: dict[str, Any]) -> None:
        worker.call = rid
        store = worker.store
        assert store is not None
        if op == "close":
            self.stores.pop(worker.handle, None)
            self._answer(rid, store.close)
            worker.jobs.put(None)
            return
        self._answer(rid, lambda: self._invoke(worker, store, op, args))

    def _invoke(self, worker: _StoreWorker, store: Storage, op: str, args: dict[str, Any]) -> Any:
        if op == "begin":
            unit = store.transaction()
            unit.__enter__()
            worker.units.append(unit)
            return None
        if op in ("commit", "rollback"):
            if not worker.units:
                raise E.NotInTransaction(f"{op} without begin: open a unit of work with begin first")
            unit = worker.units.pop()
            if op == "commit":
                unit.__exit__(None, None, None)
            else:
                with contextlib.suppress(_RolledBack):
                    unit.__exit__(_RolledBack, _RolledBack("rolled back by the kit"), None)
            return None
        method = getattr(store, op)
        hints = typing.get_type_hints(getattr(Storage, op), _namespace())
        kwargs = {}
        for name, value in args.items():
            if name == "store":
                continue
            if name not in hints:
                raise E.InvalidArgument(f"{op} has no argument {name!r}")
            kwargs[name] = decode_value(value, name) if name in PAYLOAD_FIELDS else _arg(value, hints[name], name)
        result = method(**kwargs)
        if op == "load_claimed":
            return {"snapshot": encode(result)} if isinstance(result, Snapshot) else {"outcome": Outcome(result).value}
        return encode(result)


class _RolledBack(Exception):
    """Thrown into a unit of work to roll it back on the kit's ``rollback``."""


def _arg(value: Any, hint: Any, name: str) -> Any:
    """An argument decoded by its declared type; a naive datetime is handed over naive (the store refuses it)."""
    if hint is datetime and isinstance(value, dict) and isinstance(value.get("$dt"), str) and not value["$dt"].endswith("Z"):
        return datetime.fromisoformat(value["$dt"])
    try:
        return decode(value, hint, name)
    except WireTypeError as exc:
        raise E.InvalidArgument(str(exc)) from None


def _namespace() -> dict[str, Any]:
    from kit.contract import entities, protocol

    return {**vars(entities), **vars(protocol), "timedelta": timedelta, "datetime": datetime}


def _serve(backend: Backend, reader: IO[bytes] | io.BufferedIOBase, write: Callable[[bytes], None]) -> None:
    server = Server(backend, write)
    for raw in iter(lambda: reader.readline(MAX_MESSAGE_BYTES + 2), b""):
        server.line(raw)
    for worker in list(server.stores.values()):
        server._close(worker)
    for database in list(server.databases.values()):
        with contextlib.suppress(Exception):
            database.drop()


BRIDGE_LOCK_WAIT_S = 1.0
"""The served reference engine's wait for another store's unit of work.

In process, a second store's write on the thread that holds a unit is taken at once; served,
every store runs on a thread of its own, so such a write waits for a unit whose client is
waiting on that very write, until the engine's bound refuses it. The engine's own bound
(10 s) would make each such refusal cost 10 s; a client's unit held across a few round trips
ends far sooner than 1 s."""


def main(argv: list[str] | None = None) -> int:
    from kit.backends import resolve
    from kit.reference import MemoryBackend
    from kit.seeds import seconds_type

    parser = argparse.ArgumentParser(prog="python -m kit.wire.serve", description=__doc__.splitlines()[0])
    parser.add_argument("backend", help="a backend the kit resolves: memory, sqlite, postgres, package.module:factory")
    parser.add_argument("--url", help="the backend's server URL")
    parser.add_argument("--listen", type=int, help="serve on 127.0.0.1:PORT instead of stdin/stdout (0: any port)")
    parser.add_argument("--lock-wait", type=seconds_type(), default=BRIDGE_LOCK_WAIT_S, metavar="SECONDS",
                        help="memory only: how long a unit of work waits for another store's before LockTimeout "
                             f"(default {BRIDGE_LOCK_WAIT_S:g})")
    args = parser.parse_args(argv)
    backend = resolve(args.backend, args.url)
    if isinstance(backend, MemoryBackend):
        backend.lock_wait_s = args.lock_wait
    if args.listen is None:
        out = sys.stdout.buffer

        def write(line: bytes) -> None:
            out.write(line)
            out.flush()

        _serve(backend, sys.stdin.buffer, write)
        backend.close()
        return 0

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            def write(line: bytes) -> None:
                self.wfile.write(line)
                self.wfile.flush()

            _serve(backend, self.rfile, write)

    with socketserver.ThreadingTCPServer(("127.0.0.1", args.listen), Handler) as tcp:
        print(f"python-{backend.name}: wire protocol {PROTOCOL_VERSION} on 127.0.0.1:{tcp.server_address[1]}",
              file=sys.stderr, flush=True)
        tcp.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
