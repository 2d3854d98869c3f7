"""Killed runs leave nothing for good: owner marks, a janitor, and SIGTERM handled like Ctrl-C.

The janitor removes only what carries the mark of a dead kit process of this host; it never
touches an unmarked object, a live owner's, or a folder holding files the kit did not create.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.sqlite import FOLDER_PREFIX, SqliteBackend
from kit.backends import resolve
from kit.cli import main
from kit.contract import Backend, BackendUnavailable
from kit.owners import owner_of, owner_tag

ROOT = Path(__file__).resolve().parents[1]


def _dead_tag() -> str:
    """The owner tag of a kit process of this host that has exited."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)
    tag = f"{owner_tag()[:6]}{int(done.stdout):08x}{1:012x}"
    owner = owner_of(tag)
    assert owner is not None and owner.verdict() == "dead"
    return tag


def _folder(root: Path, name: str, *files: str) -> Path:
    folder = root / name
    folder.mkdir()
    for file in files:
        (folder / file).write_text("x")
    return folder


def test_the_sqlite_janitor_removes_only_dead_owners_kit_folders(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    dead, live = _dead_tag(), owner_tag()
    gone = _folder(tmp_path, f"{FOLDER_PREFIX}{dead}_a1", "kit.db", "kit.db-wal")
    kept = {
        "live owner": _folder(tmp_path, f"{FOLDER_PREFIX}{live}_b2", "kit.db"),
        "foreign file": _folder(tmp_path, f"{FOLDER_PREFIX}{dead}_c3", "kit.db", "notes.txt"),
        "unmarked": _folder(tmp_path, f"{FOLDER_PREFIX}x1y2z3", "kit.db"),
        "not the kit's": _folder(tmp_path, "kit_something_else", "kit.db"),
    }
    assert main(["clean", "sqlite", "--url", f"sqlite:///{tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert not gone.exists() and f"removed {gone}" in out
    for why, folder in kept.items():
        assert folder.exists(), f"the janitor removed a folder with {why}"


def test_a_killed_run_is_swept_when_the_next_one_starts(tmp_path: Path) -> None:
    killed = textwrap.dedent(f"""
        import os, signal
        from adapters.sqlite import SqliteBackend
        db = SqliteBackend({str(tmp_path)!r}).provision()
        db.open("t").migrate()
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup at all
    """)
    done = subprocess.run([sys.executable, "-c", killed], check=False, cwd=ROOT, capture_output=True)
    assert done.returncode == -9
    left = [p for p in tmp_path.iterdir() if p.name.startswith(FOLDER_PREFIX)]
    assert len(left) == 1, "the killed run left no folder (the test proves nothing)"
    database = SqliteBackend(tmp_path).provision()
    try:
        assert not left[0].exists(), "the next run did not sweep the killed run's folder"
    finally:
        database.drop()
    assert list(tmp_path.iterdir()) == []


INTERRUPTED_KIT = textwrap.dedent("""
    import os, signal, sys
    import kit.runner as runner

    real = runner.run_suite

    def interrupted(backend, keyword=None, extra_args=(), on_result=None, on_collected=None):
        seen = []

        def hook(result):
            on_result(result)
            seen.append(result)
            if len(seen) == 3:
                os.kill(os.getpid(), signal.SIGTERM)  # what a CI timeout sends

        return real(backend, keyword=keyword, extra_args=extra_args, on_result=hook, on_collected=on_collected)

    runner.run_suite = interrupted
    from kit.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_sigterm_cleans_up_like_ctrl_c(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_KIT, "check", "sqlite", "--no-progress", "--no-report", "--profile",
         "none", "-k", "runs"],
        check=False, capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path), "KIT_SEED": "1"},
    )
    assert done.returncode == 130, done.stdout + done.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(FOLDER_PREFIX)] == []


# -- servers --------------------------------------------------------------------
@pytest.fixture(params=["postgres", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[Any]:
    try:
        backend: Backend = resolve(request.param)
    except BackendUnavailable as exc:
        pytest.skip(f"not-reachable: {exc}")
    try:
        yield backend
    finally:
        backend.close()


def test_the_server_janitor_drops_only_dead_owners_namespaces(server: Any) -> None:
    dead, live = _dead_tag(), owner_tag()
    doomed, alive = f"kit_{dead}0a0a0a", f"kit_{live}0b0b0b"
    create: Callable[[str], None] = lambda name: server._with_admin(lambda cur: server._create_namespace(cur, name))
    for name in (doomed, alive):
        create(name)
    unmarked = f"kit_{dead}0c0c0c"
    if server.name == "postgres":  # a schema with the kit's name but without its ownership mark
        server._with_admin(lambda cur: cur.execute(f'CREATE SCHEMA "{unmarked}"'))
    try:
        done = server.sweep()
        assert doomed in done.dropped and alive in done.kept
        names = server._with_admin(server._list_namespaces)
        assert doomed not in names and alive in names
        if server.name == "postgres":
            assert unmarked in names and unmarked not in done.dropped
    finally:
        server._with_admin(lambda cur: server._drop_namespace(cur, alive))
        if server.name == "postgres":
            server._with_admin(lambda cur: cur.execute(f'DROP SCHEMA IF EXISTS "{unmarked}"'))
