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
from kit.machines.steps import step_problem

__all__ = [
    "BUNDLE_FORMAT",
    "NO_OP_OUTCOMES",
    "PRUNE_BUDGET_S",
    "ReplayResult",
    "check_steps",
    "is_no_op",
    "load_bundle",
    "make_bundle",
    "prune_steps",
    "replay",
    "save_bundle",
]

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
    """Write ``bundle`` into folder ``where`` (or to ``where`` if it ends in .json), atomically.

    Returns the absolute path: the replay line a failure prints (and a report keeps, merged ones too)
    works from any folder.
    """
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
    return target.resolve()


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
    if bundle.get("kind") == "queue":  # the queue machine's own step language, checked as it replays
        if not bundle["steps"]:
            raise ConfigurationError(f"{source} has no steps: there is nothing to replay; give a bundle kit saved")
    else:
        check_steps(bundle["steps"], str(source))
    backend = bundle.get("backend")
    if backend is not None and (not isinstance(backend, str) or not backend):
        raise ConfigurationError(f"{source} names backend {backend!r}: write a backend name, or pass --backend")
    return bundle


def check_steps(steps: list[Any], source: str) -> None:
    """Refuse a step list the interpreter cannot apply (bad input, never blamed on an adapter)."""
    from kit.machines.side import WORKERS

    if not steps:
        raise ConfigurationError(f"{source} has no steps: there is nothing to replay; give a bundle kit saved")
    for i, step in enumerate(steps):
        problem = step_problem(step, f"step {i}", tuple(WORKERS))
        if problem is not None:
            raise ConfigurationError(f"{source}: {problem}: fix the step or re-save the bundle with kit")


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
    or the model-free one judging invariants alone), then compare the whole state as the machine does at the
    end of an example; stop at the first divergence."""
    if bundle.get("kind") == "queue":
        from kit.machines.queue_machine import replay_queue

        return replay_queue(bundle, backend, narrate)  # type: ignore[arg-type]
    result = ReplayResult()

    def say(line: str) -> None:
        result.narration.append(line)
        if narrate is not None:
            narrate(line)

    check_steps(bundle["steps"], "the bundle")
    interpreter = _interpreter(bundle, backend, say)
    try:
        for step in bundle["steps"]:
            interpreter.apply(step)
        interpreter.finish()
    except Divergence as exc:
        result.divergence = exc.to_json()
        result.message = str(exc)
        say(f"DIVERGENCE: {exc}")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        step = len(interpreter.records) - 1
        raise ConfigurationError(
            f"step {step} cannot be applied ({type(exc).__name__}: {exc}): the step is malformed; fix it or "
            "re-save the bundle with kit"
        ) from None
    finally:
        interpreter.close()
    return result


def _interpreter(bundle: dict[str, Any], backend: Backend,
                 narrate: Callable[[str], None] | None) -> Interpreter | ModelFreeInterpreter:
    """The interpreter of the machine that recorded ``bundle``, on a fresh database of ``backend``."""
    if bundle.get("machine", REFERENCE) == MODEL_FREE:
        families = frozenset(bundle["families"]) if isinstance(bundle.get("families"), list) else None
        return ModelFreeInterpreter(backend, narrate=narrate, families=families)
    return Interpreter(backend, narrate=narrate)


NO_OP_OUTCOMES = ("no claim held", "no such deadline ahead")
"""What a step answers when it did nothing: it called no store (the worker held no claim, no deadline was
ahead to move the clock to)."""


def is_no_op(outcome: Any) -> bool:
    """Whether a step's recorded outcome says it did nothing (also a step skipped for a missing capability)."""
    return isinstance(outcome, str) and (outcome in NO_OP_OUTCOMES or outcome.startswith("skipped:"))


def _apply_all(bundle: dict[str, Any], backend: Backend) -> tuple[list[Any], Divergence | None]:
    """Apply the bundle's steps on a fresh database: the step records and the divergence (if any)."""
    interpreter = _interpreter(bundle, backend, None)
    try:
        for step in bundle["steps"]:
            interpreter.apply(step)
        interpreter.finish()
    except Divergence as exc:
        return list(interpreter.records), exc
    finally:
        interpreter.close()
    return list(interpreter.records), None


PRUNE_BUDGET_S = 20.0
"""How long :func:`prune_steps` may spend replaying shorter stories (each on a fresh database)."""


def _signature(divergence: Divergence) -> tuple[str, str, tuple[str, ...]]:
    """What makes two divergences the same failure: their kind, the operation that diverged and the
    invariants named."""
    return divergence.kind, str(divergence.step.get("op")), tuple(re.findall(r"\(invariant \d+\)", divergence.message))


def prune_steps(bundle: dict[str, Any], backend: Backend,
                budget_s: float = PRUNE_BUDGET_S) -> tuple[dict[str, Any], str | None]:
    """The bundle without the steps its failure does not need, when the shorter story still reproduces the
    same divergence on ``backend``; else the bundle unchanged.

    Hypothesis shrinks the rules it drew, not what they did: a rule whose worker held no claim, a clock move
    with no deadline ahead, a refused duplicate or a read stays in the story. First every step that did
    nothing (:func:`is_no_op`) goes at once, then each remaining step in turn (last first, within
    ``budget_s``); every shorter list is replayed on a fresh database and kept only if it diverges the same
    way (kind, operation, invariant). Returns the bundle to save and, when it was pruned, the divergence's
    new message (its step numbers are those of the pruned list); ``pruned`` in the bundle records how many
    steps went. Queue bundles are shrunk by their own machine and returned as they are.
    """
    if bundle.get("kind") == "queue":
        return bundle, None
    deadline = time.monotonic() + budget_s

    def reproduces(steps: list[dict[str, Any]], want: tuple[str, str, tuple[str, ...]],
                   ) -> tuple[list[dict[str, Any]], Divergence] | None:
        _, again = _apply_all({**bundle, "steps": steps}, backend)
        if again is None or _signature(again) != want:
            return None
        return steps[: again.index + 1], again

    try:
        records, first = _apply_all(bundle, backend)
        if first is None or first.kind != bundle.get("divergence", {}).get("kind", first.kind):
            return bundle, None  # not reproduced on a fresh database: keep what the machine saw
        want = _signature(first)
        best, found = [r.step for r in records[: first.index + 1]], first
        quiet = [r.step for r in records[: first.index + 1] if r.index == first.index or not is_no_op(r.outcome)]
        if len(quiet) < len(best):
            shorter = reproduces(quiet, want)
            if shorter is not None:
                best, found = shorter
        at = len(best) - 2  # never the step that diverges
        while at >= 0 and time.monotonic() < deadline:
            shorter = reproduces(best[:at] + best[at + 1:], want)
            if shorter is not None:
                best, found = shorter
            at = min(at - 1, len(best) - 2)
    except Exception:  # noqa: BLE001 - pruning is an improvement; the machine's own bundle is always good
        return bundle, None
    if len(best) == len(bundle["steps"]):
        return bundle, None
    pruned = {**bundle, "steps": best, "divergence": found.to_json(),
              "pruned": {"steps_removed": len(bundle["steps"]) - len(best), "steps_before": len(bundle["steps"])}}
    return pruned, str(found)
