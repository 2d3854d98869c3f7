"""Execute a workflow module against a history: the pure core of every decision.

:func:`execute` runs the module from the start in a fresh wasmtime store.
Each await whose answer is recorded returns it; the first await that is not
recorded is answered from :class:`Inputs` if it can be (command result, fired
timer, pending signal, then an undelivered cancellation), and the answer is
recorded in the plan; otherwise the await is scheduled (command or timer) and
the execution suspends. The :class:`Plan` is the decision: events, commands,
timers, what it consumes, and the next status.

Guarantee: the plan is a function of (module bytes, run input, history,
inputs) only. Nothing else is visible to the module, which is what makes
:func:`kit.runtime.determinism.check_replay` possible.
"""

from __future__ import annotations

import ctypes
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NoReturn

import wasmtime

from kit.contract import JSON, NewCommand, NewEvent, NewTimer, RunStatus
from kit.runtime import abi
from kit.runtime.history import (
    AWAIT_KINDS,
    END_KEY,
    RecordedHistory,
    await_key,
    canonical,
    read_history,
    resolved_key,
    same_request,
)
from kit.runtime.module import WorkflowModule, engine
from kit.runtime.plan import CommandResult, Inputs, Plan, SignalInput

__all__ = ["CommandResult", "Inputs", "Plan", "SignalInput", "execute"]

#: wasmtime-py hands a host function's exception to the caller through one process-global
#: slot, so two executions on two threads could swap their endings. Executions are short
#: and bound by the GIL anyway: one at a time per process, and the ending is also read
#: from the session itself, never only from the exception.
_EXECUTION_LOCK = threading.Lock()


class _Suspend(Exception):
    """The module reached an await nothing can answer yet."""


class _End(Exception):
    def __init__(self, status: RunStatus, value: JSON) -> None:
        self.status, self.value = status, value


class _Abort(Exception):
    """The module broke the ABI or the replay; its run fails with ``kind`` and the message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_END_EVENTS = {
    RunStatus.COMPLETED: ("run_completed", "output"),
    RunStatus.FAILED: ("run_failed", "error"),
    RunStatus.CANCELLED: ("run_cancelled", "error"),
}


class _Session:
    """The host side of one execution."""

    def __init__(self, history: RecordedHistory, run_input: JSON, inputs: Inputs, plan: Plan) -> None:
        self.history, self.inputs, self.plan = history, inputs, plan
        self.value = canonical(run_input)
        self.seen: set[int] = set()
        self.cancel_done = history.cancel_delivered
        self.signals = list(inputs.signals)
        self.memory: wasmtime.Memory | None = None
        self.store: wasmtime.Store | None = None
        self.stop: BaseException | None = None
        """How the execution ended, when the host ended it (suspend, end, abort)."""

    def halt(self, reason: BaseException) -> NoReturn:
        self.stop = reason
        raise reason

    # -- memory -----------------------------------------------------------
    def read(self, ptr: int, length: int, what: str) -> bytes:
        assert self.memory is not None and self.store is not None
        ptr, length = ptr & 0xFFFFFFFF, length & 0xFFFFFFFF
        if ptr + length > self.memory.data_len(self.store):
            self.halt(_Abort("abi", f"{what} [{ptr}, {ptr + length}) is outside linear memory"))
        if not length:
            return b""
        base = ctypes.addressof(self.memory.data_ptr(self.store).contents)  # re-read: memory may move
        return ctypes.string_at(base + ptr, length)

    def read_json(self, ptr: int, length: int, what: str) -> JSON:
        raw = self.read(ptr, length, what)
        if not raw:
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            self.halt(
                _Abort("abi", f"{what} is not UTF-8 JSON ({exc}): pass JSON text, or length 0 for null")
            )

    def read_name(self, ptr: int, length: int, what: str) -> str:
        raw = self.read(ptr, length, what)
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.halt(_Abort("abi", f"{what} is not UTF-8"))
        if not name:
            self.halt(_Abort("abi", f"{what} is empty: give a name"))
        return name

    # -- imports ----------------------------------------------------------
    def value_len(self) -> int:
        return len(self.value)

    def value_read(self, ptr: int) -> None:
        assert self.memory is not None and self.store is not None
        ptr &= 0xFFFFFFFF
        if ptr + len(self.value) > self.memory.data_len(self.store):
            self.halt(_Abort("abi", f"value_read: [{ptr}, {ptr + len(self.value)}) is outside linear memory"))
        self.memory.write(self.store, self.value, ptr)

    def perform(self, op: int, name_ptr: int, name_len: int, in_ptr: int, in_len: int) -> int:
        name = self.read_name(name_ptr, name_len, "perform: command name")
        if in_len == abi.PASS_VALUE:
            data = json.loads(self.value)
        else:
            data = self.read_json(in_ptr, in_len, "perform: input")
        return self.await_(op, {"await": "command", "name": name, "input": data})

    def sleep(self, op: int, millis: int) -> int:
        if millis < 0:
            self.halt(_Abort("abi", f"sleep: {millis} ms is negative: pass a duration >= 0"))
        return self.await_(op, {"await": "timer", "millis": millis})

    def wait_signal(self, op: int, name_ptr: int, name_len: int) -> int:
        name = self.read_name(name_ptr, name_len, "wait_signal: signal name")
        return self.await_(op, {"await": "signal", "name": name})

    def ending(self, status: RunStatus) -> Callable[[int, int], None]:
        def end(ptr: int, length: int) -> None:
            self.halt(_End(status, self.read_json(ptr, length, f"{status.value}: value")))

        return end

    # -- awaits -----------------------------------------------------------
    def await_(self, op: int, request: dict[str, JSON]) -> int:
        if op < 0:
            self.halt(_Abort("abi", f"operation id {op} is negative: use ids >= 0"))
        if op in self.seen:
            self.halt(
                _Abort("abi", f"operation id {op} was awaited twice in one run: give every await its own id")
            )
        self.seen.add(op)
        rec = self.history.ops.get(op)
        if rec is not None and rec.request is not None and not same_request(rec.request, request):
            self.halt(
                _Abort(
                    "nondeterminism",
                    f"operation {op} was recorded as {rec.request} but the module now awaits {request}",
                )
            )
        if rec is not None and rec.resolution is not None:
            payload = rec.resolution.payload if isinstance(rec.resolution.payload, dict) else {}
            return self.answer(rec.resolution.kind, payload)
        if rec is None or rec.request is None:
            self.plan.events.append(
                NewEvent(AWAIT_KINDS[str(request["await"])], {"op": op, **request}, await_key(op))
            )
            scheduled = False
        else:
            scheduled = True
        resolved = self.resolve(op, request)
        if resolved is not None:
            kind, payload = resolved
            self.plan.events.append(NewEvent(kind, payload, resolved_key(op)))
            return self.answer(kind, payload)
        if self.inputs.cancel and not self.cancel_done:
            self.cancel_done = True
            payload = {"op": op, "reason": self.inputs.cancel_reason, "request": request}
            if not scheduled:
                self.plan.events.pop()  # never schedule what is cancelled before it starts
            elif request["await"] == "timer" and abi.op_key(op) in self.inputs.open_timers:
                self.plan.cancel_timers.append(self.inputs.open_timers[abi.op_key(op)])
            self.plan.events.append(NewEvent("cancel_delivered", payload, resolved_key(op)))
            return self.answer("cancel_delivered", payload)
        if not scheduled:
            if request["await"] == "command":
                self.plan.commands.append(
                    NewCommand(
                        abi.op_key(op), str(request["name"]), request["input"], max_attempts=abi.MAX_ATTEMPTS
                    )
                )
            elif request["await"] == "timer":
                self.plan.timers.append(
                    NewTimer(abi.op_key(op), delay=timedelta(milliseconds=int(request["millis"])))
                )
        self.halt(_Suspend())

    def resolve(self, op: int, request: dict[str, JSON]) -> tuple[str, dict[str, JSON]] | None:
        key = abi.op_key(op)
        if request["await"] == "command" and key in self.inputs.command_results:
            result = self.inputs.command_results[key]
            if result.command_id is not None:
                self.plan.consume_commands.append(result.command_id)
            if result.ok:
                return "command_completed", {"op": op, "result": result.value}
            return "command_failed", {"op": op, "error": result.value}
        if request["await"] == "timer" and key in self.inputs.fired_timers:
            timer_id = self.inputs.fired_timers[key]
            if timer_id is not None:
                self.plan.consume_timers.append(timer_id)
            return "timer_fired", {"op": op}
        if request["await"] == "signal":
            for i, signal in enumerate(self.signals):
                if signal.name == request["name"]:
                    del self.signals[i]
                    if signal.signal_id is not None:
                        self.plan.consume_signals.append(signal.signal_id)
                    return "signal_received", {"op": op, "name": signal.name, "payload": signal.payload}
        return None

    def answer(self, kind: str, payload: Mapping[str, JSON]) -> int:
        if kind == "command_completed":
            self.value = canonical(payload.get("result"))
            return abi.STATUS_OK
        if kind == "command_failed":
            self.value = canonical(payload.get("error"))
            return abi.STATUS_FAILED
        if kind == "signal_received":
            self.value = canonical(payload.get("payload"))
            return abi.STATUS_OK
        if kind == "cancel_delivered":
            self.value = canonical({"reason": payload.get("reason")})
            return abi.STATUS_CANCELLED
        self.value = canonical(None)
        return abi.STATUS_OK


_TYPES = {"i32": wasmtime.ValType.i32, "i64": wasmtime.ValType.i64}

_ENDINGS = {"complete": RunStatus.COMPLETED, "fail": RunStatus.FAILED, "cancel": RunStatus.CANCELLED}

_current: _Session | None = None
"""The session of the one execution running now (executions are one at a time: ``_EXECUTION_LOCK``)."""

_linkers: dict[wasmtime.Engine, wasmtime.Linker] = {}
_linkers_lock = threading.Lock()


def _dispatch(name: str) -> Callable[..., Any]:
    """The host function ``name`` of the ABI, calling into the session of the execution running now."""
    status = _ENDINGS.get(name)
    if status is not None:
        def end(ptr: int, length: int) -> None:
            assert _current is not None
            _current.ending(status)(ptr, length)
        return end

    def call(*args: int) -> Any:
        assert _current is not None
        return getattr(_current, name)(*args)
    return call


def _linker(engine_: wasmtime.Engine) -> wasmtime.Linker:
    """Every ABI import, defined once per engine: a fresh ``Func`` per import and execution cost about a
    fifth of an execution (each wasmtime-py call is a ctypes call, which also lets go of the GIL)."""
    with _linkers_lock:
        linker = _linkers.get(engine_)
        if linker is None:
            linker = _linkers[engine_] = wasmtime.Linker(engine_)
            for name, (params, results) in abi.IMPORTS.items():
                ty = wasmtime.FuncType([_TYPES[p]() for p in params], [_TYPES[r]() for r in results])
                linker.define_func(abi.NAMESPACE, name, ty, _dispatch(name))
        return linker


def execute(
    module: WorkflowModule,
    run_input: JSON,
    history: Sequence[Any],
    inputs: Inputs | None = None,
    fuel: int = abi.DEFAULT_FUEL,
) -> Plan:
    """Replay ``history`` through ``module`` and decide what comes next (see the module docstring)."""
    inputs = inputs or Inputs()
    recorded = read_history(history)
    plan = Plan()
    if recorded.ended is not None:
        raise ValueError("this history already ended: a terminal run has nothing left to decide")
    session = _Session(recorded, run_input, inputs, plan)
    store = wasmtime.Store(engine())
    store.set_fuel(fuel)
    store.set_limits(memory_size=abi.MAX_MEMORY_BYTES, instances=1, memories=1, tables=1)
    session.store = store
    raised: BaseException | None = None
    global _current
    with _EXECUTION_LOCK:
        _current = session
        try:
            instance = _linker(store.engine).instantiate(store, module.compiled)
            exports = instance.exports(store)
            memory, run = exports[abi.EXPORT_MEMORY], exports[abi.EXPORT_RUN]
            assert isinstance(memory, wasmtime.Memory) and isinstance(run, wasmtime.Func)
            session.memory = memory
            run(store)
        except BaseException as exc:  # noqa: BLE001 -- classified below, outside the lock
            raised = exc
        finally:
            plan.fuel_used = fuel - store.get_fuel()
            # The session references the store and the store's memory: drop both, and free the store now.
            session.memory = session.store = None
            _current = None
            store.close()
    stop, session.stop = session.stop, None
    _conclude(plan, stop, raised, fuel)
    _forget_frames(stop, raised)
    _consume_stale(plan, recorded, inputs)
    return plan


def _conclude(plan: Plan, stop: BaseException | None, raised: BaseException | None, fuel: int) -> None:
    """Record how the execution ended in ``plan``: the ending the host chose (``stop``), else what the
    module's call raised; an exception that is neither the module's nor an ending is re-raised."""
    if isinstance(stop, _Suspend):
        plan.status = RunStatus.BLOCKED
    elif isinstance(stop, _End):
        _finish(plan, stop.status, stop.value)
    elif isinstance(stop, _Abort):
        _fail(plan, stop.kind, str(stop))
    elif raised is None:
        _finish(plan, RunStatus.COMPLETED, None)
    elif isinstance(raised, wasmtime.Trap):
        if raised.trap_code is wasmtime.TrapCode.OUT_OF_FUEL:
            _fail(plan, "fuel_exhausted", f"the module used all {fuel} units of fuel of one execution")
        else:
            _fail(plan, "trap", _first_line(str(raised), raised.trap_code))
    elif isinstance(raised, wasmtime.WasmtimeError):
        _fail(plan, "trap", _first_line(str(raised), None))
    else:
        raise raised  # a host bug, not the module's fault: never recorded as the run's end


def _forget_frames(*endings: BaseException | None) -> None:
    """Drop what an ending's traceback holds, once the ending is recorded in the plan.

    An ending is an exception raised by a frame that still holds it (``halt``'s ``reason``,
    wasmtime's ``maybe_raise_last_exn``'s ``exn``), so its traceback and those frames form a
    reference cycle holding the session, the plan and wasmtime's ctypes values. Only the cyclic
    collector frees such cycles, and it runs rarely once the heap is large: a long stress run's
    checking replays thousands of executions and held megabytes of them until then. A host bug
    is re-raised by :func:`_conclude` before this runs and keeps its traceback.
    """
    for ending in endings:
        while ending is not None:
            context = ending.__context__
            ending.__traceback__ = ending.__context__ = None
            ending = context


def _first_line(message: str, code: object) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    detail = lines[-1] if lines else message
    return f"{detail} ({code})" if code is not None else detail


def _fail(plan: Plan, kind: str, message: str) -> None:
    _finish(plan, RunStatus.FAILED, {"kind": kind, "message": message})


def _finish(plan: Plan, status: RunStatus, value: JSON) -> None:
    kind, field_name = _END_EVENTS[status]
    plan.status = status
    plan.commands.clear()
    plan.timers.clear()
    plan.events.append(NewEvent(kind, {field_name: value}, END_KEY))
    if status is RunStatus.COMPLETED:
        plan.output = value
    else:
        plan.error = value


def _consume_stale(plan: Plan, recorded: RecordedHistory, inputs: Inputs) -> None:
    """Results and fired timers of operations already answered (e.g. pre-empted by a cancellation)."""
    done = recorded.resolved_ops() | {
        int(e.operation_key[3:].split("/", 1)[0])
        for e in plan.events
        if e.operation_key and e.operation_key.endswith("/resolved")
    }
    for key, result in inputs.command_results.items():
        op = key[3:]
        if (
            result.command_id
            and result.command_id not in plan.consume_commands
            and op.isdigit()
            and int(op) in done
        ):
            plan.consume_commands.append(result.command_id)
    for key, timer_id in inputs.fired_timers.items():
        op = key[3:]
        if timer_id and timer_id not in plan.consume_timers and op.isdigit() and int(op) in done:
            plan.consume_timers.append(timer_id)
