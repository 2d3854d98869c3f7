"""Owner marks: every throw-away object the kit creates names the process that owns it.

A name carries the owner's host (6 hex of a hash of the host name), process id
(8 hex) and process start time (12 hex, clock ticks since boot, so a reused pid
is told apart): :func:`owner_tag`. A run killed without cleanup (SIGKILL, a
crashed CI runner) leaves objects whose owner is provably dead; the janitor
(``kit clean``, and a sweep when a backend provisions its first database)
removes those and nothing else: never an object without a parseable mark,
never one of another host, never one whose owner still runs.
"""

from __future__ import annotations

import hashlib
import os
import socket
import string
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TAG_LENGTH", "Owner", "Sweep", "owner_of", "owner_tag", "process_start"]

_HEX = set(string.hexdigits.lower())
TAG_LENGTH = 26
"""Hex characters of an owner tag: host 6, pid 8, start 12."""


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot, or None where /proc cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: split after its last ')'
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def owner_tag() -> str:
    """This process's mark: host, pid and start time as 26 hex characters."""
    pid = os.getpid()
    return f"{_host()}{pid:08x}{(process_start(pid) or 0) % 16**12:012x}"


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    start: int

    def verdict(self) -> str:
        """``dead`` (removable), ``alive`` or ``elsewhere`` (another host: never touched)."""
        if self.host != _host():
            return "elsewhere"
        if self.pid == os.getpid():
            return "alive"
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return "dead"
        except PermissionError:
            pass  # it exists, owned by another user
        started = process_start(self.pid)
        if started is not None and self.start and started % 16**12 != self.start:
            return "dead"  # the pid was reused by a younger process
        return "alive"


def owner_of(tag: str) -> Owner | None:
    """The owner a 26-hex tag names, or None if ``tag`` is not one."""
    if len(tag) != TAG_LENGTH or not set(tag) <= _HEX:
        return None
    return Owner(tag[:6], int(tag[6:14], 16), int(tag[14:], 16))


@dataclass
class Sweep:
    """What a janitor pass did: objects dropped, and those kept with the reason."""

    dropped: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
