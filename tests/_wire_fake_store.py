"""A deliberately broken wire store, for the kit's own protocol checks: ``python _wire_fake_store.py MODE``.

It answers ``hello`` correctly, then misbehaves on the first request after it as MODE says.
It is a fixture of the kit's transport tests, not a store: it keeps no data.
"""

from __future__ import annotations

import json
import sys
import time

HELLO = {"protocol": 1, "name": "fake", "version": "0", "capabilities": ["test_clock"], "clock_resolution_us": 1,
         "expected_failures": {}, "promises": []}


def send(message: object) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def misbehave(mode: str, request: dict) -> None:  # type: ignore[type-arg]
    rid = request["id"]
    if mode == "garbage":
        sys.stdout.write("this is not json {\n")
    elif mode == "die":
        sys.stderr.write("fatal: the fake store ran out of cheese\n")
        sys.stderr.flush()
        sys.exit(3)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "never_sent":
        send({"id": rid + 1000, "ok": None})
    elif mode == "repeat":
        send({"id": rid, "ok": {"database": "db1"}})
        send({"id": rid, "ok": {"database": "db1"}})
    elif mode == "oversized":
        sys.stdout.write(json.dumps({"id": rid, "ok": "x" * 5000}) + "\n")
    elif mode == "wrong_type":
        send({"id": rid, "ok": {"database": 5}})
    elif mode == "both":
        send({"id": rid, "ok": None, "error": {"type": "StorageError", "message": "?"}})
    elif mode == "typed_error":
        send({"id": rid, "error": {"type": "LockTimeout", "message": "the fake lock wait timed out"}})
    elif mode == "unknown_error":
        send({"id": rid, "error": {"type": "Gremlins", "message": "something odd"}})
    sys.stdout.flush()


def main() -> None:
    mode = sys.argv[1]
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "hello":
            send({"id": request["id"], "ok": {**HELLO, "protocol": 2} if mode == "bad_hello" else HELLO})
            continue
        misbehave(mode, request)
        if mode == "repeat":
            continue


if __name__ == "__main__":
    main()
