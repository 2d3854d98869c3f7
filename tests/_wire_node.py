"""Where the Node reference store lives, and how tests get it ready (``npm ci`` from its lock file)."""

from __future__ import annotations

import fcntl
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["NODE", "STORE", "STORE_DIR", "node_store_spec", "require_node_store"]

STORE_DIR = Path(__file__).resolve().parents[1] / "stores" / "node-postgres"
STORE = STORE_DIR / "store.js"
NODE = shutil.which("node")


def require_node_store() -> str:
    """The ``exec:`` spec of the Node store, after ``npm ci`` if its packages are missing.

    Skips (module level) only when Node.js itself is absent; a failing ``npm ci`` fails.
    """
    if NODE is None:
        pytest.skip("node is not installed: the Node.js reference store needs Node 18+ (apt-get install nodejs)",
                    allow_module_level=True)
    if not (STORE_DIR / "node_modules" / "pg" / "package.json").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is missing: install it (it ships with Node.js) so the store's packages can be installed",
                        pytrace=False)
        with open(STORE_DIR / ".npm-ci.lock", "w") as lock:  # xdist workers install once
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (STORE_DIR / "node_modules" / "pg" / "package.json").exists():
                done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=STORE_DIR, capture_output=True,
                                      text=True, timeout=600, check=False)
                if done.returncode != 0:
                    pytest.fail(f"npm ci in {STORE_DIR} failed:\n{done.stderr[-2000:]}", pytrace=False)
    return node_store_spec()


def node_store_spec() -> str:
    return f"exec:{shlex.quote(NODE or 'node')} {shlex.quote(str(STORE))}"
