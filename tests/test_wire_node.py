"""The Node.js reference store (stores/node-postgres) passes the whole kit through the wire bridge,
and a copy with a seeded bug is caught, naming the guarantee it breaks.

Needs Node.js (skips in one line without it; CI has it) and PostgreSQL (the store's database;
required in CI through ``KIT_REQUIRE_BACKENDS=postgres``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kit.conformance import ConformanceSuite
from kit.contract import Backend
from kit.pytest_plugin import skip_module_unless_reachable
from kit.wire import connect
from tests._wire_node import require_node_store

skip_module_unless_reachable("postgres")
SPEC = require_node_store()


class TestNodePostgresStore(ConformanceSuite):
    """Every conformance check and the fault machines, through ``exec:node stores/node-postgres/store.js``."""

    @pytest.fixture(scope="class")
    @classmethod
    def kit_backend(cls) -> Iterator[Backend]:
        backend = connect(SPEC)
        try:
            yield backend  # type: ignore[misc]
        finally:
            backend.close()


def _kit_check(spec: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from kit.cli import main; raise SystemExit(main())", "check", spec,
         "--no-progress", "--no-report", *args],
        capture_output=True, text=True, timeout=900, check=False, env={**os.environ, **(env or {})},
    )


def test_seeded_bug_commit_ignoring_the_claim_generation_is_killed_through_the_bridge() -> None:
    """A Node store whose commit checks owner and lease but not the claim generation fails `kit check`,
    and the failure names the fencing guarantee it breaks."""
    done = _kit_check(SPEC, "-k", "claims", "--profile", "none", env={"KIT_NODE_STORE_BUG": "commit_ignores_generation"})
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "FAILED claims.stale_generation_with_same_owner_is_refused" in out, out[-3000:]
    assert "A worker re-claiming a run cannot commit with its own earlier generation." in out


def test_the_same_checks_pass_without_the_seeded_bug() -> None:
    """The control for the test above: the same selection passes on the correct store."""
    done = _kit_check(SPEC, "-k", "claims", "--profile", "none")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "PASS:" in done.stdout


def test_the_same_store_serves_the_protocol_over_tcp() -> None:
    """``wire://host:port`` reaches a store serving the same messages on TCP (``store.js --listen PORT``)."""
    import re

    from kit.backends import resolve
    from kit.contract import ClockMode
    from tests._wire_node import NODE, STORE

    server = subprocess.Popen([NODE or "node", str(STORE), "--listen", "0"], stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        banner = server.stderr.readline()
        found = re.search(r"on 127\.0\.0\.1:(\d+)", banner)
        assert found, f"the store printed no listening port: {banner!r}"
        backend = resolve(f"wire://127.0.0.1:{found.group(1)}")
        try:
            assert backend.name == "node-postgres"
            database = backend.provision()
            store = database.open("tcp", clock=ClockMode.TEST)
            assert store.migrate() == ["001_init"]
            store.verify_schema()
            assert store.list_runs() == []
            store.close()
            database.drop()
        finally:
            backend.close()
    finally:
        server.kill()
        server.wait(timeout=10)


def test_kit_stress_runs_unchanged_through_the_bridge(tmp_path: object) -> None:
    """`kit stress` (real concurrent workers, every nemesis fault incl. kills and drops) holds every
    invariant on the Node store through the wire bridge."""
    done = subprocess.run(
        [sys.executable, "-c", "from kit.cli import main; raise SystemExit(main())", "stress", "--backend", SPEC,
         "--duration", "5", "--seed", "7", "--no-progress", "--report-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "PASS: every invariant held" in done.stdout
