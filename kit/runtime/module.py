"""Workflow modules: WASM compiled once with wasmtime, named, versioned and digested.

A :class:`WorkflowModule` is the unit of workflow logic. Its digest is the
sha256 of its WASM bytes (:func:`kit.contract.digest_of`), and it is what
``ensure_definition`` stores. A :class:`Registry` maps (name, version) to the
module a decider has loaded; :meth:`Registry.for_run` refuses a run whose
stored digest differs, so a run is never replayed against changed logic.

Workflow files are found in ``scenarios/workflows`` shipped as package data of
the top-level ``scenarios`` package (like ``migrations``), so they resolve from
an installed wheel, an editable install and a plain checkout alike;
``KIT_WORKFLOWS_DIR`` or an explicit directory overrides that.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import wasmtime

from kit.contract import DefinitionRef, Run, Storage, digest_of
from kit.contract.errors import ConfigurationError, KitError
from kit.runtime import abi

__all__ = [
    "DigestMismatch",
    "Registry",
    "UnknownWorkflow",
    "WorkflowLoadError",
    "WorkflowModule",
    "engine",
    "load_workflows",
    "workflows_dir",
]

_VERSION_LINE = re.compile(r"^\s*;;\s*version:\s*(\S+)\s*$", re.MULTILINE)
_engine: wasmtime.Engine | None = None
_engine_lock = threading.Lock()


class WorkflowLoadError(ConfigurationError):
    """A workflow file is missing, does not compile, or breaks the ABI."""


class DigestMismatch(KitError):
    """A run's stored definition digest differs from the module this process loaded."""


class UnknownWorkflow(KitError):
    """A run names a definition this process has not loaded."""


def engine() -> wasmtime.Engine:
    """The process-wide engine: fuel metering on, NaNs canonical, no threads or relaxed SIMD."""
    global _engine
    with _engine_lock:
        if _engine is None:
            config = wasmtime.Config()
            config.consume_fuel = True
            config.cranelift_nan_canonicalization = True
            config.wasm_threads = False
            config.wasm_relaxed_simd = False
            _engine = wasmtime.Engine(config)
        return _engine


@dataclass(frozen=True, eq=False)
class WorkflowModule:
    """One compiled workflow: ``digest`` is the sha256 of ``wasm``, the bytes stored as its body."""

    name: str
    version: str
    wasm: bytes
    digest: str
    compiled: wasmtime.Module
    source: str
    imports: tuple[str, ...] = ()
    """The ``durable`` import names, in the module's import order."""

    @property
    def ref(self) -> DefinitionRef:
        return DefinitionRef(self.name, self.version, self.digest)

    @classmethod
    def from_wasm(cls, name: str, wasm: bytes, version: str = "1", source: str = "<bytes>") -> WorkflowModule:
        """Compile and check WASM bytes against the ABI; raise :class:`WorkflowLoadError`."""
        try:
            compiled = wasmtime.Module(engine(), bytes(wasm))
        except wasmtime.WasmtimeError as exc:
            raise WorkflowLoadError(f"workflow {name!r} ({source}) does not compile: {exc}") from None
        _check_abi(name, source, compiled)
        imports = tuple(imp.name or "" for imp in compiled.imports)
        return cls(name, version, bytes(wasm), digest_of(bytes(wasm)), compiled, source, imports)

    @classmethod
    def from_wat(
        cls, name: str, text: str, version: str | None = None, source: str = "<text>"
    ) -> WorkflowModule:
        """Assemble WAT text (``;; version: N`` in it sets the version, default ``1``)."""
        try:
            wasm = bytes(wasmtime.wat2wasm(text))
        except wasmtime.WasmtimeError as exc:
            raise WorkflowLoadError(f"workflow {name!r} ({source}) is not valid WAT: {exc}") from None
        if version is None:
            found = _VERSION_LINE.search(text)
            version = found.group(1) if found else "1"
        return cls.from_wasm(name, wasm, version, source)


def _check_abi(name: str, source: str, compiled: wasmtime.Module) -> None:
    where = f"workflow {name!r} ({source})"
    for imp in compiled.imports:
        expected = abi.IMPORTS.get(imp.name or "") if imp.module == abi.NAMESPACE else None
        if expected is None:
            raise WorkflowLoadError(
                f"{where} imports {imp.module}.{imp.name}, which is not part of the ABI: import only "
                f"{', '.join(f'{abi.NAMESPACE}.{n}' for n in abi.IMPORTS)} (see kit.runtime.abi)"
            )
        ty = imp.type
        got = (
            (tuple(str(p) for p in ty.params), tuple(str(r) for r in ty.results))
            if isinstance(ty, wasmtime.FuncType)
            else None
        )
        if got != expected:
            raise WorkflowLoadError(
                f"{where} imports {abi.NAMESPACE}.{imp.name} as {got}, the ABI says "
                f"params {list(expected[0])} results {list(expected[1])}: fix the import's type"
            )
    exports = {e.name: e.type for e in compiled.exports}
    run = exports.get(abi.EXPORT_RUN)
    if not isinstance(run, wasmtime.FuncType) or list(run.params) or list(run.results):
        raise WorkflowLoadError(f"{where} must export a function {abi.EXPORT_RUN!r} of type [] -> []")
    if not isinstance(exports.get(abi.EXPORT_MEMORY), wasmtime.MemoryType):
        raise WorkflowLoadError(f"{where} must export its linear memory as {abi.EXPORT_MEMORY!r}")


class Registry:
    """The modules this process runs, by (name, version)."""

    def __init__(self, modules: Iterable[WorkflowModule] = ()) -> None:
        self._modules: dict[tuple[str, str], WorkflowModule] = {}
        for module in modules:
            self.add(module)

    def add(self, module: WorkflowModule) -> None:
        """Add (or replace) the module for its (name, version)."""
        self._modules[(module.name, module.version)] = module

    def get(self, name: str, version: str = "1") -> WorkflowModule | None:
        return self._modules.get((name, version))

    def __getitem__(self, name: str) -> WorkflowModule:
        """The module called ``name`` (any version; the highest if several)."""
        found = sorted((m for m in self._modules.values() if m.name == name), key=lambda m: m.version)
        if not found:
            raise UnknownWorkflow(
                f"no workflow named {name!r} is loaded: choose one of {', '.join(self.names())}"
            )
        return found[-1]

    def names(self) -> list[str]:
        return sorted({name for name, _ in self._modules})

    def __iter__(self) -> Iterator[WorkflowModule]:
        return iter(self._modules.values())

    def for_run(self, run: Run) -> WorkflowModule:
        """The loaded module for ``run``; raises unless its digest equals the run's stored one."""
        ref = run.definition
        module = self._modules.get((ref.name, ref.version))
        if module is None:
            raise UnknownWorkflow(
                f"run {run.run_id!r} uses definition {ref.name!r} version {ref.version!r}, which this "
                "process has not loaded: load that module into the decider's Registry"
            )
        if module.digest != ref.digest:
            raise DigestMismatch(
                f"run {run.run_id!r} was started on {ref.name!r} version {ref.version!r} with digest "
                f"{ref.digest[:12]}..., but this process loaded {module.digest[:12]}... from "
                f"{module.source}: refused, never replayed against changed logic. Deploy the original "
                "module for this version, or register the changed one under a new version"
            )
        return module

    def register(self, store: Storage) -> None:
        """``ensure_definition`` every module; raise if a stored body differs from the loaded one."""
        for module in self:
            stored = store.ensure_definition(module.name, module.version, module.digest, module.wasm)
            if stored.digest != module.digest:
                raise DigestMismatch(
                    f"definition {module.name!r} version {module.version!r} is stored with digest "
                    f"{stored.digest[:12]}..., but {module.source} compiles to {module.digest[:12]}...: "
                    "bump the ';; version:' line of the changed workflow"
                )


def workflows_dir() -> Traversable:
    """Where the shipped ``*.wat`` workflows are: ``KIT_WORKFLOWS_DIR``, else the ``scenarios`` package."""
    override = os.environ.get("KIT_WORKFLOWS_DIR")
    if override:
        return Path(override)
    try:
        return resources.files("scenarios").joinpath("workflows")
    except ModuleNotFoundError:
        # A checkout used without installing: the repository layout.
        return Path(__file__).resolve().parents[2] / "scenarios" / "workflows"


def load_workflows(directory: Traversable | str | os.PathLike[str] | None = None) -> Registry:
    """Compile every ``*.wat`` in ``directory`` (default :func:`workflows_dir`), named by file stem."""
    if directory is None:
        root: Traversable = workflows_dir()
    elif isinstance(directory, str | os.PathLike):
        root = Path(directory)
    else:
        root = directory
    if not root.is_dir():
        raise WorkflowLoadError(
            f"workflow directory {root} does not exist: reinstall the kit (pip install -e .) or set "
            "KIT_WORKFLOWS_DIR to a folder of *.wat files"
        )
    registry = Registry()
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".wat") and entry.is_file():
            name = entry.name[: -len(".wat")]
            registry.add(WorkflowModule.from_wat(name, entry.read_text(encoding="utf-8"), source=str(entry)))
    if not registry.names():
        raise WorkflowLoadError(
            f"no *.wat workflows in {root}: set KIT_WORKFLOWS_DIR to a folder that has some"
        )
    return registry
