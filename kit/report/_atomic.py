"""Crash-safe file writes: whole files appear atomically, journal lines are durable once written."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

__all__ = ["append_line", "write_atomic"]


def _file_mode() -> int:
    """The mode a plain ``open()`` would give a new file (0o666 less the umask)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


_MODE = _file_mode()


def write_atomic(path: Path, text: str | Iterable[str]) -> None:
    """Write ``text`` to ``path`` so that a reader (or a crash) sees the old file or the new one, never half.

    The text (a string, or its pieces in order, e.g. ``JSONEncoder.iterencode``'s, so a large file
    is never one string in memory) goes to a temporary file in the same folder, is flushed and
    fsynced, then renamed over ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        os.chmod(tmp, _MODE)  # mkstemp makes 0600; a report is meant to be read by others
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            if isinstance(text, str):
                handle.write(text)
            else:
                handle.writelines(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def append_line(handle: IO[str], record: dict[str, Any]) -> None:
    """Append one JSON line and make it durable (flush + fsync) before returning."""
    handle.write(json.dumps(record, ensure_ascii=False, sort_keys=True, default=str) + "\n")
    handle.flush()
    os.fsync(handle.fileno())


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
