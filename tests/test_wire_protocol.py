"""The wire protocol's own guarantees: the spec covers every operation with an example that parses,
values round-trip exactly, and every malformed message (from the store or to it) is one clear error
naming the message, never a hung kit."""

from __future__ import annotations

import inspect
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from kit.conformance import ConformanceSuite
from kit.contract import (
    Backend,
    ConfigurationError,
    Decision,
    DefinitionRef,
    InvalidArgument,
    LockTimeout,
    NewCommand,
    NewTimer,
    Run,
    RunStatus,
    Storage,
    StorageError,
)
from kit.wire import StoreProcessFault, WireBackend, WireProtocolError, connect
from kit.wire.client import OPERATIONS
from kit.wire.codec import WireTypeError, decode, encode
from kit.wire.transport import connect_exec

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs" / "wire-protocol.md"
FAKE = Path(__file__).resolve().parent / "_wire_fake_store.py"


# ----------------------------------------------------------------------
# the spec
# ----------------------------------------------------------------------
def _examples() -> list[list[str]]:
    return [block.strip().splitlines() for block in re.findall(r"```wire-example\n(.*?)```", SPEC.read_text(), re.DOTALL)]


def test_every_operation_has_an_example_in_the_spec() -> None:
    """Each operation of the protocol appears as a request in an example exchange of docs/wire-protocol.md."""
    shown = {json.loads(line[2:]).get("op") for block in _examples() for line in block if line[:2] in ("> ", "< ")}
    missing = [op for op in OPERATIONS if op not in shown]
    assert not missing, f"docs/wire-protocol.md has no example exchange for {missing}"
    headings = set(re.findall(r"^### ([\w, ]+)$", SPEC.read_text(), re.MULTILINE))
    named = {name.strip() for heading in headings for name in heading.split(",")}
    assert not [op for op in OPERATIONS if op not in named and op != "fault_point"], "an operation has no section"


def test_every_example_line_parses_and_responses_pair_with_requests() -> None:
    """Every example line is one JSON message (``>!`` marks one deliberately out of protocol), and every
    response answers a request of its own example (or carries id null for an unattributable message)."""
    for block in _examples():
        sent: set[Any] = set()
        for line in block:
            assert line[:3] == ">! " or line[:2] in ("> ", "< "), f"example line without direction: {line!r}"
            if line.startswith(">! "):
                continue  # deliberately malformed or answering nothing: the example shows the store's reply
            message = json.loads(line[2:])
            assert isinstance(message, dict) and "id" in message, line
            if "op" in message:
                sent.add(message["id"])
            else:
                assert message["id"] in sent or message["id"] is None, f"a response to a request not in its example: {line}"
                assert ("ok" in message) != ("error" in message), line


def test_every_storage_operation_of_the_python_protocol_is_a_wire_operation() -> None:
    """The wire covers the whole Storage protocol (kit/contract/protocol.py), one operation per method."""
    methods = {name for name, _ in inspect.getmembers(Storage, inspect.isfunction) if not name.startswith("_")}
    methods -= {"transaction"}  # begin / commit / rollback
    assert not sorted(methods - set(OPERATIONS)), "a storage operation has no wire operation"
    assert {"begin", "commit", "rollback", "hello", "provision", "drop", "open", "kill_session", "reset",
            "fault_point"} <= set(OPERATIONS)


# ----------------------------------------------------------------------
# values
# ----------------------------------------------------------------------
def test_values_have_one_exact_encoding_and_round_trip() -> None:
    """Datetimes (UTC, microseconds), durations, big integers, bytes and $-keyed objects round-trip exactly."""
    at = datetime(2031, 6, 1, 12, 0, 0, 1, tzinfo=timezone(timedelta(hours=2)))
    assert encode(at) == {"$dt": "2031-06-01T10:00:00.000001Z"}
    assert decode(encode(at), datetime) == at
    assert encode(timedelta(seconds=1, microseconds=5)) == {"$us": 1_000_005}
    assert encode(2**53 - 1) == 2**53 - 1 and encode(2**53) == {"$int": str(2**53)} and encode(-(2**70)) == {"$int": str(-(2**70))}
    assert decode({"$int": str(2**70)}, int) == 2**70
    assert encode(b"\x00\xff") == {"$bytes": "AP8="} and decode({"$bytes": "AP8="}, bytes) == b"\x00\xff"
    payload = {"$dt": "not a date", "n": 2**64, "f": float("nan")}
    wire = encode(payload, "input")
    assert wire == {"$obj": {"$dt": "not a date", "n": {"$int": str(2**64)}, "f": {"$float": "NaN"}}}
    back = decode(wire, Any)
    assert back["$dt"] == "not a date" and back["n"] == 2**64
    decision = Decision(RunStatus.BLOCKED, commands=(NewCommand("op", "x", {"k": [1]}),),
                        timers=(NewTimer("t", fire_at=datetime(2031, 1, 1, tzinfo=UTC)),))
    assert decode(encode(decision), Decision) == decision


def test_values_without_a_json_form_are_refused_before_sending() -> None:
    """Tuples, sets, bytes and non-str keys inside payloads have no JSON form: InvalidArgument."""
    for bad in [("t",), {1}, b"x", {1: "int key"}]:
        with pytest.raises(InvalidArgument):
            encode({"v": bad}, "input")


def test_answers_of_the_wrong_shape_are_refused_naming_the_field() -> None:
    """A store's answer with a missing field, an unknown field or a wrong type is a WireTypeError naming it."""
    run = Run("r", "t", DefinitionRef("d", "1", "0" * 64), RunStatus.PENDING, 0, None, 0, None, None, False, False,
              None, None, None, None, None, datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC))
    assert decode(encode(run), Run) == run
    with pytest.raises(WireTypeError, match=r"result\.status: 5 is not one of"):
        decode({**encode(run), "status": 5}, Run)
    with pytest.raises(WireTypeError, match="has no field 'colour'"):
        decode({**encode(run), "colour": "red"}, Run)
    with pytest.raises(WireTypeError, match="lacks field"):
        decode({"run_id": "r"}, Run)
    with pytest.raises(WireTypeError, match="is not a datetime"):
        decode({"$dt": "2030-01-02 03:04:05"}, datetime)


# ----------------------------------------------------------------------
# the kit side: a store that misbehaves
# ----------------------------------------------------------------------
def _fake(mode: str, timeout: float = 30.0, max_bytes: int = 1 << 24) -> WireBackend:
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE))} {mode}"
    return WireBackend(connect_exec(command, timeout=timeout, max_bytes=max_bytes), f"exec:{command}")


@pytest.mark.parametrize(("mode", "fault", "names"), [
    ("garbage", WireProtocolError, "a line that is not JSON"),
    ("never_sent", WireProtocolError, "a response to a request never sent, id 1002"),
    ("oversized", WireProtocolError, "a message longer than 1000 bytes"),
    ("wrong_type", WireProtocolError, "answered provision with the wrong type"),
    ("both", WireProtocolError, 'exactly one of "ok" or "error"'),
    ("die", StoreProcessFault, "exited with code 3"),
    ("hang", StoreProcessFault, "did not answer provision (request 2) within 1 s"),
])
def test_a_misbehaving_store_is_a_typed_fault_naming_the_message(mode: str, fault: type[Exception], names: str) -> None:
    """Garbage, oversized lines, unknown ids, wrong types, a dying or hanging store: each is one typed
    fault (a ConnectionLost) naming what happened; the call returns, and every later call fails the same way."""
    backend = _fake(mode, timeout=1.0, max_bytes=1000)
    try:
        with pytest.raises(fault, match=re.escape(names)) as info:
            backend.provision()
        with pytest.raises(StoreProcessFault) as again:
            backend.provision()
        assert str(again.value) == str(info.value)
    finally:
        backend.close()


def test_a_dying_store_leaves_its_stderr_tail_in_the_fault() -> None:
    """The last lines the store wrote to stderr are part of the fault's message (and so of the report)."""
    backend = _fake("die")
    try:
        with pytest.raises(StoreProcessFault, match="out of cheese"):
            backend.provision()
    finally:
        backend.close()


def test_a_second_response_to_one_request_breaks_the_connection_naming_it() -> None:
    """A store answering one request twice is a protocol violation naming the repeated id."""
    backend = _fake("repeat")
    try:
        assert backend.provision().handle == "db1"
        with pytest.raises(WireProtocolError, match="a second response to request 2"):
            backend.provision()
    finally:
        backend.close()


def test_store_errors_map_to_the_contract_errors() -> None:
    """An error answer becomes the contract error it names; an unknown type is a StorageError saying so."""
    backend = _fake("typed_error")
    try:
        with pytest.raises(LockTimeout, match="the fake lock wait timed out"):
            backend.provision()
    finally:
        backend.close()
    backend = _fake("unknown_error")
    try:
        with pytest.raises(StorageError, match="unknown type 'Gremlins'"):
            backend.provision()
    finally:
        backend.close()


def test_a_store_speaking_another_version_is_refused_at_the_handshake() -> None:
    """A hello answer with another protocol version is a ConfigurationError naming the version."""
    with pytest.raises(ConfigurationError, match="not a version 1 hello"):
        _fake("bad_hello")


def test_bad_wire_specs_name_the_fix() -> None:
    """A malformed wire URL or an exec: without a command is bad input naming the right form."""
    from kit.backends import resolve

    with pytest.raises(ConfigurationError, match="wire://127.0.0.1:7070"):
        resolve("wire://nohost")
    with pytest.raises(ConfigurationError, match="exec:'node path/to/store.js'"):
        resolve("exec:  ")
    with pytest.raises(ConfigurationError, match="takes no URL"):
        resolve("exec:node x.js", "postgresql://x")


# ----------------------------------------------------------------------
# the store side: the Node reference store answers malformed requests clearly
# ----------------------------------------------------------------------
def _node_exchange(lines: list[str]) -> list[dict[str, Any]]:
    from tests._wire_node import NODE, STORE, require_node_store

    require_node_store()
    done = subprocess.run([NODE or "node", str(STORE)], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_the_node_store_answers_each_malformed_request_with_one_error_naming_it() -> None:
    """Malformed JSON, a non-object, a missing id, unknown operation, wrong types, a repeated id, an
    oversized message and a response to a request never sent: one error each, quoting the message."""
    from kit.pytest_plugin import skip_module_unless_reachable

    skip_module_unless_reachable("postgres")
    hello = '{"id":1,"op":"hello","args":{"protocol":1}}'
    cases = {
        "bad json": ('{"id":2,"op":"now"', None, "ProtocolError", "malformed JSON"),
        "not an object": ("[1, 2]", None, "ProtocolError", "must be a JSON object"),
        "no id": ('{"op":"now"}', None, "ProtocolError", 'needs an integer or string "id"'),
        "unknown op": ('{"id":3,"op":"frobnicate","args":{}}', 3, "UnknownOperation", '"frobnicate"'),
        "args not object": ('{"id":4,"op":"provision","args":[1]}', 4, "ProtocolError", '"args" must be an object'),
        "wrong type": ('{"id":5,"op":"open","args":{"database":7}}', 5, "InvalidArgument", "no database 7"),
        "repeated id": ('{"id":3,"op":"provision","args":{}}', 3, "ProtocolError", "request id 3 was already used"),
        "never sent": ('{"id":"f99","ok":"continue"}', None, "ProtocolError", "never sent (id \\\"f99\\\")"),
        "oversized": ('{"id":6,"op":"now","args":{"x":"' + "x" * (16 * 1024 * 1024) + '"}}', None, "ProtocolError",
                      "exceeds the protocol's 16777216"),
    }
    answers = _node_exchange([hello, *(line for line, *_ in cases.values())])
    errors = [a for a in answers if "error" in a]
    for name, (_line, rid, kind, says) in cases.items():
        found = [e for e in errors if e["id"] == rid and e["error"]["type"] == kind and says.replace("\\", "") in e["error"]["message"]]
        assert found, f"{name}: no {kind} answer naming {says!r} in {errors}"
    assert len(errors) == len(cases)  # one error per malformed message, no more


def test_a_store_that_dies_before_the_handshake_is_unreachable_with_its_stderr() -> None:
    """A store that exits at start is 'not reachable' (kit check exits 3), quoting its stderr and exit code."""
    from kit.backends import resolve
    from kit.contract import BackendUnavailable

    script = "import sys; sys.stderr.write('cannot find module pg\\n'); sys.exit(4)"
    with pytest.raises(BackendUnavailable, match=r"(?s)exited with code 4.*cannot find module pg"):
        resolve(f"exec:{shlex.quote(sys.executable)} -c {shlex.quote(script)}")


# ----------------------------------------------------------------------
# both directions at once: a Python backend served over the wire
# ----------------------------------------------------------------------
class TestReferenceEngineThroughTheBridge(ConformanceSuite):
    """The whole suite and the fault machines against the reference engine served by
    ``python -m kit.wire.serve memory``: every entity, outcome, error and fault point crosses the
    wire both ways, with no other language involved."""

    @pytest.fixture(scope="class")
    @classmethod
    def kit_backend(cls) -> Iterator[Backend]:
        backend = connect(f"exec:{shlex.quote(sys.executable)} -m kit.wire.serve memory")
        try:
            yield backend  # type: ignore[misc]
        finally:
            backend.close()


def test_the_python_server_harness_serves_tcp() -> None:
    """``python -m kit.wire.serve BACKEND --listen 0`` serves the same messages on TCP (``wire://``)."""
    from kit.backends import resolve

    server = subprocess.Popen([sys.executable, "-m", "kit.wire.serve", "memory", "--listen", "0"],
                              stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        found = re.search(r"on 127\.0\.0\.1:(\d+)", server.stderr.readline())
        assert found
        backend = resolve(f"wire://127.0.0.1:{found.group(1)}")
        try:
            database = backend.provision()
            store = database.open("tcp")
            assert store.migrate() and store.list_runs() == []
            database.drop()
        finally:
            backend.close()
    finally:
        server.kill()
        server.wait(timeout=10)


def test_a_write_beside_a_served_unit_of_work_is_refused_within_the_bridge_bound() -> None:
    """Served, each store has its own server thread: a second store's write on the client thread that
    holds another store's open unit waits for that unit, which waits for the client. The bridge's bound
    (``--lock-wait``) refuses it with a TransientError, and the unit then commits its own write."""
    from kit.contract import DefinitionRef, TransientError, digest_of

    backend = connect(f"exec:{shlex.quote(sys.executable)} -m kit.wire.serve memory --lock-wait 0.3")
    try:
        database = backend.provision()
        holder, other = database.open("t"), database.open("t")
        digest = digest_of(b"v1")
        holder.ensure_definition("wf", "1", digest, b"v1")
        ref = DefinitionRef("wf", "1", digest)
        with holder.transaction():
            holder.start_run("in-unit", ref, {})
            with pytest.raises(TransientError):
                other.start_run("beside", ref, {})
        assert holder.get_run("in-unit") is not None and other.get_run("beside") is None
        database.drop()
    finally:
        backend.close()


def test_the_reference_engine_waits_for_another_threads_unit_as_long_as_it_is_told() -> None:
    """``MemoryBackend(lock_wait_s=...)``: a unit of work that finds another thread's unit open fails with
    LockTimeout after the given bound, not the engine's default."""
    import threading

    from kit.contract import LockTimeout
    from kit.reference import MemoryBackend

    database = MemoryBackend(lock_wait_s=0.2).provision()
    first, second = database.open("t"), database.open("t")
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with first.transaction():
            entered.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(30)
        with pytest.raises(LockTimeout, match="0.2 s"), second.transaction():
            pass
    finally:
        release.set()
        holder.join()
