"""Failure bundles: one JSON file per failure, replayable step by step on any backend.

A bundle holds the kit and Hypothesis versions, the backend and its server
version, the seed and profile, the fault machine that recorded it (``machine``:
``reference`` or ``model-free``, with the promise ``families`` it judged), the
shrunk step list and the first divergence. It replays in the same machine.
Replaying needs nothing but the step list: no Hypothesis internals.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis

from kit import __version__
from kit.contract import Backend
from kit.contract.errors import ConfigurationError
from kit.machines.interpreter import Divergence, Interpreter
from kit.machines.model_free import MACHINES, MODEL_FREE, REFERENCE, ModelFreeInterpreter

__all__ = ["BUNDLE_FORMAT", "ReplayResult", "load_bundle", "make_bundle", "replay", "save_bundle"]

BUNDLE_FORMAT = 1


def make_bundle(
    backend_spec: str, backend: Backend, profile: str, seed: int, steps: list[dict[str, Any]],
    divergence: dict[str, Any], machine: str = "reference", families: list[str] | None = None,
) -> dict[str, Any]:
    """A bundle; ``machine`` (``reference`` or ``model-free``) is how it replays, ``families`` the promise
    families a model-free run judged (default on replay: those the replaying store declares)."""
    extra: dict[str, Any] = {"families": sorted(families)} if families is not None else {}
    return {
        **extra,
        "machine": machine,
        "format": BUNDLE_FORMAT,
        "kit_version": __version__,
        "hypothesis_version": hypothesis.__version__,
        "backend": backend_spec,
        "server": backend.describe() if hasattr(backend, "describe") else "",
        "profile": profile,
        "seed": seed,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "steps": steps,
        "divergence": divergence,
    }


def save_bundle(bundle: dict[str, Any], where: Path | str) -> Path:
    """Write ``bundle`` into folder ``where`` (or to ``where`` if it ends in .json), atomically."""
    target = Path(where)
    if target.suffix != ".json":
        target.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(bundle["backend"]))[-60:]
        target = target / f"{safe}-seed{bundle['seed']}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".json.partial")
    partial.write_text(json.dumps(bundle, indent=1, ensure_ascii=False, sort_keys=True, default=str) + "\n", encoding="utf-8")
    partial.replace(target)
    return target


def load_bundle(path: Path | str) -> dict[str, Any]:
    source = Path(path)
    try:
        bundle = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(f"no bundle at {source}: give the path of a saved scenario (.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigurationError(f"{source} is not a readable scenario bundle ({exc}): give a file kit saved") from None
    if not isinstance(bundle, dict) or not isinstance(bundle.get("steps"), list):
        raise ConfigurationError(f"{source} has no step list: it is not a kit scenario bundle")
    if bundle.get("machine", REFERENCE) not in MACHINES[1:]:
        raise ConfigurationError(
            f"{source} names fault machine {bundle.get('machine')!r}; this kit replays {' or '.join(MACHINES[1:])}"
        )
    if bundle.get("format") != BUNDLE_FORMAT:
        raise ConfigurationError(
            f"{source} is bundle format {bundle.get('format')!r}; this kit reads format {BUNDLE_FORMAT}"
        )
    return bundle


@dataclass
class ReplayResult:
    narration: list[str] = field(default_factory=list)
    divergence: dict[str, Any] | None = None
    message: str = ""

    @property
    def reproduced(self) -> bool:
        return self.divergence is not None


def replay(bundle: dict[str, Any], backend: Backend, narrate: Callable[[str], None] | None = None) -> ReplayResult:
    """Apply the bundle's steps in order with the machine that recorded them (the reference-comparing one,
    or the model-free one judging invariants alone); stop at the first divergence."""
    result = ReplayResult()

    def say(line: str) -> None:
        result.narration.append(line)
        if narrate is not None:
            narrate(line)

    interpreter: Interpreter | ModelFreeInterpreter
    if bundle.get("machine", REFERENCE) == MODEL_FREE:
        families = frozenset(bundle["families"]) if isinstance(bundle.get("families"), list) else None
        interpreter = ModelFreeInterpreter(backend, narrate=say, families=families)
    else:
        interpreter = Interpreter(backend, narrate=say)
    try:
        for step in bundle["steps"]:
            interpreter.apply(step)
    except Divergence as exc:
        result.divergence = exc.to_json()
        result.message = str(exc)
        say(f"DIVERGENCE: {exc}")
    finally:
        interpreter.close()
    return result
