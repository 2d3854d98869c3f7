"""One connection to a wire store: framing, request ids, dispatch, timeouts.

Guarantees:

* Every call returns, raises the store's typed error, or raises
  :class:`StoreProcessFault` within ``timeout`` seconds of the store's last
  message for it; the kit never hangs on a dead or stuck store (an ``exec:``
  store that hangs is killed).
* Any protocol violation by the store (a line that is not JSON, an oversized
  line, a response to an id never sent or already answered, a message of the
  wrong shape) breaks the connection with a :class:`WireProtocolError` quoting
  the message; every call in flight and every later call raises it.
* ``fault_point`` requests the store sends during a call are handed to the
  thread that made the call, which answers them (so a hook may block, or make
  other calls, without stalling other threads' calls).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import queue
import shlex
import socket
import subprocess
import threading
from collections.abc import Callable
from typing import IO, Any

from kit.contract.validation import (
    _stack_independent,  # the contract's one any-stack JSON codec seam
)
from kit.wire.errors import StoreProcessFault, WireProtocolError

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_MESSAGE_BYTES", "Transport", "connect_exec", "connect_tcp"]

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The largest message (one line, newline excluded) either side may send."""
DEFAULT_TIMEOUT_S = float(os.environ.get("KIT_WIRE_TIMEOUT", "60"))
"""How long a call waits for the store's next message (``KIT_WIRE_TIMEOUT`` seconds)."""
_STDERR_LINES = 40
_TRACE = os.environ.get("KIT_WIRE_TRACE", "")
"""A file every message is appended to (``> `` sent by the kit, ``< `` sent by the store), for debugging."""
_trace_lock = threading.Lock()


def _trace(direction: str, line: bytes) -> None:
    if _TRACE:
        with _trace_lock, open(_TRACE, "ab") as out:
            out.write(direction.encode() + line.rstrip(b"\n") + b"\n")

#: Answers a store-initiated request (``fault_point``): returns the result, or raises
#: to answer with an error.
RequestHandler = Callable[[dict[str, Any]], Any]


def _quote(line: bytes | str, limit: int = 200) -> str:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.rstrip("\n")
    return repr(text if len(text) <= limit else text[:limit] + "...")


class Transport:
    """Newline-delimited JSON over a pair of byte streams, multiplexed by request id."""

    def __init__(
        self,
        reader: IO[bytes],
        writer: IO[bytes],
        label: str,
        *,
        on_close: Callable[[], None] | None = None,
        stderr: Callable[[], str] | None = None,
        kill: Callable[[], None] | None = None,
        exit_code: Callable[[], int | None] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.label = label
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._reader = reader
        self._writer = writer
        self._on_close = on_close
        self._stderr = stderr or (lambda: "")
        self._kill = kill
        self._exit_code = exit_code or (lambda: None)
        self._ids = itertools.count(1)
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, queue.Queue[tuple[str, Any]]] = {}
        self._answered: set[int] = set()
        self._broken: StoreProcessFault | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._read_loop, name=f"wire-reader {label}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------
    def call(self, op: str, args: dict[str, Any], on_request: RequestHandler | None = None) -> Any:
        """Send one request and wait for its answer; returns the ``ok`` value.

        Raises :class:`RemoteError` for an ``error`` answer and
        :class:`StoreProcessFault` when the store dies, hangs or breaks the protocol.
        """
        request_id = next(self._ids)
        inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        with self._lock:
            if self._broken is not None:
                raise self._broken
            self._pending[request_id] = inbox
        try:
            self._send({"id": request_id, "op": op, "args": args})
            while True:
                try:
                    kind, message = inbox.get(timeout=self.timeout)
                except queue.Empty:
                    self._break(StoreProcessFault(
                        f"{self.label} did not answer {op} (request {request_id}) within {self.timeout:g} s "
                        "(raise KIT_WIRE_TIMEOUT if the store is merely slow); the store is treated as hung"
                        + self._tail()
                    ), kill=True)
                    continue
                if kind == "broken":
                    raise message
                if kind == "request":
                    self._answer(message, on_request)
                    continue
                if "error" in message:
                    raise RemoteError(message["error"], op, request_id)
                return message["ok"]
        finally:
            with self._lock:
                self._pending.pop(request_id, None)

    def notify_broken(self) -> StoreProcessFault | None:
        return self._broken

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(Exception):
            self._writer.close()
        if self._on_close is not None:
            self._on_close()

    # ------------------------------------------------------------------
    def _answer(self, request: dict[str, Any], handler: RequestHandler | None) -> None:
        try:
            if handler is None:
                raise WireProtocolError(f"the kit expected no {request.get('op')!r} request during this call")
            result = handler(request)
        except BaseException as exc:  # noqa: BLE001 - any raise answers "fail this one"
            self._send({"id": request["id"], "error": {"type": type(exc).__name__, "message": str(exc)[:500]}})
            return
        self._send({"id": request["id"], "ok": result})

    def _send(self, message: dict[str, Any]) -> None:
        # The C encoder recurses per nesting level against the caller's stack: a payload at the contract's
        # depth limit must encode from any caller, so it re-runs on a fresh thread when the stack runs out.
        text = _stack_independent(_dumps_ascii, message)
        assert isinstance(text, str)
        line = text.encode("ascii")
        if len(line) > self.max_bytes:
            from kit.contract.errors import InvalidArgument

            raise InvalidArgument(
                f"the {message.get('op', 'answer')} message is {len(line)} bytes; the wire protocol allows "
                f"{self.max_bytes}: send smaller values"
            )
        _trace("> ", line)
        try:
            with self._write_lock:
                self._writer.write(line + b"\n")
                self._writer.flush()
        except (OSError, ValueError) as exc:
            fault = StoreProcessFault(f"{self.label} cannot be written to ({exc}){self._ended()}{self._tail()}")
            self._break(fault)
            raise fault from None

    def _tail(self) -> str:
        tail = self._stderr().strip()
        return f"; the store's stderr ends with:\n{tail}" if tail else ""

    def _ended(self) -> str:
        code = self._exit_code()
        return "" if code is None else f"; the store process exited with code {code}"

    def _break(self, fault: StoreProcessFault, kill: bool = False) -> None:
        with self._lock:
            if self._broken is None:
                self._broken = fault
            waiting = list(self._pending.values())
        for inbox in waiting:
            inbox.put(("broken", self._broken))
        if kill and self._kill is not None:
            self._kill()

    def _violation(self, what: str, line: bytes | str) -> None:
        self._break(WireProtocolError(f"{self.label} broke the wire protocol: {what}: {_quote(line)}{self._tail()}"),
                    kill=True)

    def _read_loop(self) -> None:
        while True:
            try:
                line = self._reader.readline(self.max_bytes + 2)
            except (OSError, ValueError):
                line = b""
            if not line:
                if not self._closing:
                    self._join_stderr()
                    self._break(StoreProcessFault(
                        f"{self.label} closed its output (the store process died or the connection was lost)"
                        f"{self._ended()}{self._tail()}"
                    ))
                return
            if len(line) > self.max_bytes + 1 or not line.endswith(b"\n") and len(line) > self.max_bytes:
                self._violation(f"a message longer than {self.max_bytes} bytes", line)
                return
            if not line.strip():
                continue
            if not self._dispatch(line):
                return

    def _join_stderr(self) -> None:
        with contextlib.suppress(Exception):
            import time

            time.sleep(0.05)  # let the stderr reader take the last lines of a dying process

    def _dispatch(self, line: bytes) -> bool:
        _trace("< ", line)
        try:
            message = json.loads(line)
        except ValueError as exc:
            self._violation(f"a line that is not JSON ({exc.args[0] if exc.args else exc})", line)
            return False
        if not isinstance(message, dict) or "id" not in message:
            self._violation("a message that is not an object with an id", line)
            return False
        if "op" in message:
            return self._dispatch_request(message, line)
        request_id = message["id"]
        if set(message) not in ({"id", "ok"}, {"id", "error"}):
            self._violation('a response must have "id" and exactly one of "ok" or "error"', line)
            return False
        if "error" in message and not (
            isinstance(message["error"], dict) and isinstance(message["error"].get("type"), str)
            and isinstance(message["error"].get("message"), str)
        ):
            self._violation('an "error" must be {"type": str, "message": str}', line)
            return False
        with self._lock:
            repeated = isinstance(request_id, int) and request_id in self._answered
            inbox = None if repeated or not isinstance(request_id, int) else self._pending.get(request_id)
            if inbox is not None:
                self._answered.add(request_id)
        if inbox is None:
            what = "a second response to request" if repeated else "a response to a request never sent, id"
            self._violation(f"{what} {request_id!r}", line)
            return False
        inbox.put(("response", message))
        return True

    def _dispatch_request(self, message: dict[str, Any], line: bytes) -> bool:
        op, args = message.get("op"), message.get("args")
        if op != "fault_point" or not isinstance(args, dict):
            self._send({"id": message["id"], "error": {
                "type": "UnknownOperation",
                "message": f"a store may send only fault_point requests with an args object, not {_quote(line, 80)}",
            }})
            return True
        call = args.get("call")
        with self._lock:
            inbox = self._pending.get(call) if isinstance(call, int) else None
        if inbox is None or not isinstance(args.get("statement"), str):
            self._send({"id": message["id"], "error": {
                "type": "InvalidArgument",
                "message": f"fault_point needs a statement string and the id of a call in flight: {_quote(line, 120)}",
            }})
            return True
        inbox.put(("request", message))
        return True


class RemoteError(Exception):
    """An ``error`` answer, before the client maps it to the contract's typed error."""

    def __init__(self, error: dict[str, Any], op: str, request_id: int) -> None:
        super().__init__(f"{error.get('type')}: {error.get('message')}")
        self.error = error
        self.op = op
        self.request_id = request_id


# ----------------------------------------------------------------------
# connecting
# ----------------------------------------------------------------------
def connect_exec(command: str, timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = MAX_MESSAGE_BYTES) -> Transport:
    """Start ``command`` (split like a shell, no shell) and talk to it over its stdin/stdout."""
    from kit.contract.errors import ConfigurationError

    argv = shlex.split(command)
    if not argv:
        raise ConfigurationError("exec: names no command: write exec:'node path/to/store.js'")
    try:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise ConfigurationError(f"cannot start {command!r} ({exc.strerror or exc}): check the command and its path") from None
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    tail: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
    err = process.stderr

    def read_stderr() -> None:
        for raw in iter(err.readline, b""):
            tail.append(raw.decode("utf-8", "replace").rstrip("\n"))

    threading.Thread(target=read_stderr, name=f"wire-stderr {argv[0]}", daemon=True).start()

    def kill() -> None:
        with contextlib.suppress(OSError):
            process.kill()

    def on_close() -> None:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            kill()
            process.wait(timeout=5)

    return Transport(
        process.stdout, process.stdin, f"store process {command!r} (pid {process.pid})",
        on_close=on_close, stderr=lambda: "\n".join(tail), kill=kill, exit_code=process.poll, timeout=timeout,
        max_bytes=max_bytes,
    )


def connect_tcp(host: str, port: int, timeout: float = DEFAULT_TIMEOUT_S) -> Transport:
    """Connect to a store serving the protocol on ``host:port``."""
    from kit.contract.errors import BackendUnavailable

    try:
        sock = socket.create_connection((host, port), timeout=10)
    except OSError as exc:
        raise BackendUnavailable(
            f"wire://{host}:{port}", f"nothing accepts connections there ({exc})",
            "Start the store server first, or check the host and port",
        ) from None
    sock.settimeout(None)
    reader, writer = sock.makefile("rb"), sock.makefile("wb")

    def on_close() -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    return Transport(reader, writer, f"store server wire://{host}:{port}", on_close=on_close, timeout=timeout)


def _dumps_ascii(message: object) -> str:
    return json.dumps(message, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
