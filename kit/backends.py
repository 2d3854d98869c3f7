"""The backend registry: a name (or ``package.module:factory``) to a ready :class:`Backend`.

Built-in names map to factories in the kit's own packages; any other
``module:attribute`` is a third-party adapter factory, importable from the
installed packages or from the current folder. A factory is called with
``url=`` when a URL is given and without arguments otherwise, and must return an
object with ``name``, ``capabilities`` and ``provision()`` (the workflow profile) or
with ``name``, ``queue_promises`` and ``provision()`` (the queue profile). Every failure is a
:class:`ConfigurationError` (bad input: fix the call) or a
:class:`BackendUnavailable` (good input, but the backend cannot be used here:
the message names what to provide).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.contract.errors import BackendUnavailable, ConfigurationError, KitError
from kit.contract.protocol import Backend

__all__ = ["BUILTIN", "WIRE_PREFIXES", "BackendSpec", "load_factory", "resolve", "spec_of"]


@dataclass(frozen=True)
class BackendSpec:
    name: str
    target: str
    """``module:callable`` returning the backend."""
    extra: str | None
    """The pip extra that installs its driver, if it needs one."""
    summary: str


BUILTIN: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec("memory", "kit.reference:MemoryBackend", None, "in-memory reference engine (the oracle)"),
        BackendSpec("sqlite", "adapters.sqlite:SqliteBackend", None, "SQLite files, embedded (the default)"),
        BackendSpec("postgres", "adapters.postgres:discover", "postgres", "PostgreSQL through psycopg 3"),
        BackendSpec("mysql", "adapters.mysql:discover", "mysql", "MySQL / MariaDB through PyMySQL"),
        BackendSpec("mssql", "adapters.mssql:discover", "mssql", "SQL Server through pyodbc"),
    )
}


def _import_here_or_installed(module_name: str) -> Any:
    """Import an installed module, else one under the current folder (as ``python -m`` would find it)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        top = module_name.split(".", 1)[0]
        if exc.name != top or here in sys.path or not (Path(here, top).is_dir() or Path(here, top + ".py").is_file()):
            raise
        sys.path.append(here)
        return importlib.import_module(module_name)


def load_factory(target: str) -> Any:
    """Import ``module:attribute``; errors name the fix."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            f"{target!r} is neither a backend name ({', '.join(BUILTIN)}) nor an import path: "
            "write package.module:factory"
        )
    _current_folder_importable()
    try:
        module = _import_here_or_installed(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigurationError(
                f"cannot import module {module_name!r}: check the spelling of {target!r} and that "
                "its package is installed in this environment"
            ) from None
        raise
    except KitError:
        raise
    except Exception as exc:  # noqa: BLE001 - the module's own code failed: bad input, named
        raise ConfigurationError(
            f"importing module {module_name!r} raised {type(exc).__name__}: {_first_line(exc)}: fix the "
            "module so it imports cleanly"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(
            f"module {module_name!r} has no attribute {attribute!r}: check the factory name in {target!r}"
        ) from None


WIRE_PREFIXES = ("exec:", "wire://")
"""A store in another language: ``exec:'<command>'`` (stdin/stdout) or ``wire://host:port`` (docs/wire-protocol.md)."""


def _wire(spec: str, url: str | None) -> Backend:
    if url is not None:
        raise ConfigurationError(f"backend {spec!r} takes no URL: drop --url (the store finds its own database)")
    from kit.wire.client import connect

    backend = connect(spec)
    backend.kit_spec = spec  # type: ignore[attr-defined]
    return backend
def _current_folder_importable() -> None:
    """Let ``mystore:make_backend`` name a module in the current folder, as pytest and ``python -m`` do.

    The folder goes last on ``sys.path``, so it never shadows an installed package (or the kit's own).
    """
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def resolve(spec: str, url: str | None = None) -> Backend:
    """The backend ``spec`` names, connected (for servers) and ready to provision databases."""
    if not spec:
        raise ConfigurationError(f"no backend given: choose one of {', '.join(BUILTIN)} or package.module:factory")
    if spec.startswith(WIRE_PREFIXES):
        return _wire(spec, url)
    builtin = BUILTIN.get(spec)
    target = builtin.target if builtin else spec
    if builtin is None and ":" not in spec:
        raise ConfigurationError(
            f"unknown backend {spec!r}: choose one of {', '.join(BUILTIN)}, or give a third-party "
            "adapter as package.module:factory"
        )
    try:
        factory = load_factory(target)
    except ModuleNotFoundError as exc:
        if builtin is not None and builtin.extra:
            raise BackendUnavailable(
                spec,
                f"its driver ({exc.name}) is not installed",
                f"Install it with: pip install 'durable-storage-kit[{builtin.extra}]'",
            ) from None
        raise ConfigurationError(f"importing {target!r} failed: {exc}") from None
    if not callable(factory):
        raise ConfigurationError(f"{target!r} is not callable: point at a factory or a Backend class")
    if url is not None and not _takes_url(factory):
        raise ConfigurationError(f"backend {spec!r} takes no URL: drop --url (and KIT_{spec.upper()}_URL)")
    try:
        backend = factory(url=url) if url is not None else factory()
    except KitError:
        raise
    except ModuleNotFoundError as exc:
        if builtin is not None and builtin.extra:
            raise BackendUnavailable(
                spec, f"its driver ({exc.name}) is not installed",
                f"Install it with: pip install 'durable-storage-kit[{builtin.extra}]'",
            ) from None
        raise ConfigurationError(
            f"the backend factory {target!r} raised ModuleNotFoundError: {exc}: install the module it needs"
        ) from None
    except Exception as exc:  # noqa: BLE001 - the factory failed: bad input, named in one line
        raise ConfigurationError(
            f"the backend factory {target!r} raised {type(exc).__name__}: {_first_line(exc)}: fix the "
            "factory so it returns a kit.contract.Backend"
        ) from None
    from kit.queue import is_queue_backend

    profile_attribute = "queue_promises" if is_queue_backend(backend) else "capabilities"
    for needed in ("name", profile_attribute, "provision"):
        if not hasattr(backend, needed):
            raise ConfigurationError(
                f"{target!r} returned {type(backend).__name__}, which has no {needed!r}: a factory must "
                "return a kit.contract.Backend (workflow profile) or a kit.queue.QueueBackend (queue profile, "
                "which declares queue_promises)"
            )
    try:
        backend.kit_spec = spec  # how `kit replay` names this backend again
    except AttributeError:
        pass
    return backend  # type: ignore[no-any-return]


def _takes_url(factory: Any) -> bool:
    """Whether ``factory`` accepts a ``url`` keyword (a signature that cannot be read is given the benefit)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "url" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else "no message")[:200]


def spec_of(backend: object) -> str | None:
    """What ``kit replay --backend`` must be given to get ``backend`` again, or None if nothing can name it.

    In order: the spec it was resolved from; a ``kit_spec`` attribute its author set; a built-in
    name when it is exactly that built-in backend; its class as ``module:Class`` when that
    imports back to the class (a class defined inside a function does not).
    """
    given = getattr(backend, "kit_spec", None)
    if isinstance(given, str) and given:
        return given
    cls = type(backend)
    for spec in BUILTIN.values():
        module_name, _, attribute = spec.target.partition(":")
        if getattr(backend, "name", None) == spec.name and cls.__module__ == module_name \
                and cls.__qualname__ == attribute:
            return spec.name
    if getattr(backend, "name", None) in BUILTIN and cls.__module__.split(".")[0] in ("adapters", "kit") \
            and "<" not in cls.__qualname__:
        return str(backend.name)  # type: ignore[attr-defined]
    if "<" in cls.__qualname__ or cls.__module__ in ("__main__", "builtins"):
        return None
    try:
        module = importlib.import_module(cls.__module__)
    except Exception:  # noqa: BLE001 - not importable: nothing can name it
        return None
    found: Any = module
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    return f"{cls.__module__}:{cls.__qualname__}" if found is cls else None
