"""Spending more cores and more CI jobs on the fault machines: explorations, shards, a shared example database.

Guarantees:

* A run has one printed seed. Its fault machines run as explorations ``0..K-1``, each with the seed
  :func:`kit.seeds.derive_seed` gives (exploration 0 is the printed seed), where ``K`` is workers x
  shards. Shard ``I/N`` runs the explorations whose index is ``I-1`` modulo ``N``: every shard gets
  ``workers`` of them and no two shards share one, so ``N`` shards with ``--workers W`` explore exactly
  the seeds of one unsharded run with ``--workers W*N``.
* The fixed checks are split round-robin over their sorted node ids: every check runs in exactly one
  shard, and the split depends on the selection alone (the same ``-k`` in every shard).
* An example database (a folder, or Hypothesis's own Redis database) keeps every failing example a
  machine finds, under a namespace per backend spec, machine and profile; the next run of any shard of
  that backend replays it before generating anything. A correct backend never deletes another
  backend's failures (namespaces do not mix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kit.contract.errors import BackendUnavailable, ConfigurationError

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

__all__ = [
    "NO_DATABASE",
    "Shard",
    "check_example_db",
    "exploration_indices",
    "exploration_of",
    "exploration_seed",
    "open_example_db",
    "parse_shard",
    "shard_of",
]

NO_DATABASE = "none"
"""``--example-db none``: the machines keep no examples between runs."""

_REDIS = ("redis://", "rediss://", "unix://")
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based, as CI matrices count)."""

    index: int = 1
    count: int = 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def whole(self) -> bool:
        return self.count == 1


def parse_shard(text: str | None, source: str = "--shard") -> Shard:
    """The shard ``I/N`` names; ConfigurationError naming the fix unless 1 <= I <= N."""
    if text is None or not str(text).strip():
        return Shard()
    match = _SHARD.match(str(text))
    if match is None:
        raise ConfigurationError(f"{source} {text!r} is not a shard: write I/N with 1 <= I <= N, such as {source} 1/2")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ConfigurationError(
            f"{source} {text!r} is out of range: write I/N with 1 <= I <= N (shard {max(index, 1)} of "
            f"{max(count, index, 1)}), such as {source} 1/{max(count, 2)}"
        )
    return Shard(index, count)


def exploration_indices(workers: int, shard: Shard) -> list[int]:
    """The exploration indices shard ``shard`` runs when every shard runs ``workers`` of them."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    return [shard.index - 1 + k * shard.count for k in range(workers)]


_EXPLORATION = re.compile(r"\[exploration(\d+)\]")


def exploration_of(nodeid: str) -> int:
    """The exploration a check's node id names (``...[exploration3]``), else 0."""
    match = _EXPLORATION.search(nodeid)
    return int(match.group(1)) if match else 0


def exploration_seed(nodeid: str, seed: int) -> int:
    """The seed that repeats, alone, the exploration ``nodeid`` ran in a run printed with ``seed``."""
    from kit.seeds import derive_seed

    return derive_seed(seed, exploration_of(nodeid))


def shard_of(position: int, shard: Shard) -> bool:
    """Whether the fixed check at ``position`` (in sorted node-id order) belongs to ``shard``."""
    return position % shard.count == shard.index - 1


def _namespace(namespace: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", namespace).strip("._") or "default"


def check_example_db(spec: str) -> None:
    """Refuse an example database the machines could not use: bad input (ConfigurationError) or a Redis
    that cannot be reached (BackendUnavailable), before any check runs."""
    if spec == NO_DATABASE:
        return
    if "://" not in spec:
        if Path(spec).exists() and not Path(spec).is_dir():
            raise ConfigurationError(f"--example-db {spec!r} is a file: give a folder, redis://HOST:PORT or none")
        return
    if not spec.startswith(_REDIS):
        raise ConfigurationError(
            f"--example-db {spec!r} is neither a folder nor a redis:// URL: give a folder, redis://HOST:PORT or none"
        )
    client = _redis_client(spec)
    try:
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure to reach Redis is the same answer
        host = spec.split("://", 1)[1].rsplit("@", 1)[-1]
        raise BackendUnavailable(
            "redis", f"the example database at {host} did not answer ({type(exc).__name__})",
            "start Redis there, or pass --example-db DIR (a folder) or --example-db none",
        ) from None
    finally:
        client.close()


def _redis_client(spec: str):  # type: ignore[no-untyped-def]
    try:
        from redis import Redis
    except ImportError:
        raise ConfigurationError(
            "--example-db redis:// needs the redis package: pip install 'durable-storage-kit[redis]'"
        ) from None
    try:
        return Redis.from_url(spec, socket_connect_timeout=5, socket_timeout=30)
    except ValueError as exc:
        raise ConfigurationError(f"--example-db: {exc}: write redis://HOST:PORT[/DB]") from None


def open_example_db(spec: str | None, namespace: str) -> ExampleDatabase | None:
    """The example database ``spec`` names (a folder, ``redis://HOST:PORT[/DB]``, or ``none``/None for
    no database), holding only the examples of ``namespace`` (backend spec, machine, profile)."""
    if spec is None or spec == NO_DATABASE:
        return None
    name = _namespace(namespace)
    if "://" in spec:
        if not spec.startswith(_REDIS):
            check_example_db(spec)  # refuses it, naming the fix
        from hypothesis.extra.redis import RedisExampleDatabase

        return RedisExampleDatabase(_redis_client(spec), key_prefix=f"kit-example:{name}:".encode())
    from hypothesis.database import DirectoryBasedExampleDatabase

    return DirectoryBasedExampleDatabase(Path(spec) / name)
