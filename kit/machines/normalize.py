"""Store results as plain JSON, free of store-issued ids, so two stores' answers compare.

Ids are replaced by natural keys (run id, operation key, dedup key); errors by
their kit type (and a schema error's problem). Two stores that keep the same
promises give equal normalised results for the same step.
"""

from __future__ import annotations

from typing import Any

from kit.contract import (
    CommandClaim,
    Definition,
    KitError,
    Outcome,
    RunClaim,
    SchemaError,
    SignalReceipt,
    Snapshot,
    StartResult,
    Timer,
)

__all__ = ["normalize", "normalize_error"]


def normalize_error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, SchemaError):
        return {"error": "SchemaError", "problem": exc.problem}
    if isinstance(exc, KitError):
        return {"error": type(exc).__name__}
    return {"error": f"unexpected {type(exc).__name__}", "message": str(exc)[:200]}


def normalize(result: Any) -> Any:
    """A JSON value describing ``result`` without store-specific ids."""
    if result is None or isinstance(result, bool | int | str):
        return result
    if isinstance(result, float):  # kept a number: compared exactly, where JSON's one zero is -0.0 == 0.0
        return result
    if isinstance(result, Outcome):
        return result.value
    if isinstance(result, BaseException):
        return normalize_error(result)
    if isinstance(result, StartResult):
        return {"run": result.run.run_id, "created": result.created}
    if isinstance(result, SignalReceipt):
        return {"outcome": result.outcome.value, "dedup_key": result.signal.dedup_key if result.signal else None}
    if isinstance(result, Definition):
        return {"definition": [result.name, result.version], "digest": result.digest}
    if isinstance(result, RunClaim):
        return {"run": result.run_id, "generation": result.generation, "expires_at": result.expires_at.isoformat(),
                "revision": result.revision}
    if isinstance(result, CommandClaim):
        return {"run": result.run_id, "command": result.operation_key, "generation": result.generation,
                "attempt": result.attempt, "expires_at": result.expires_at.isoformat()}
    if isinstance(result, Timer):
        return {"run": result.run_id, "timer": result.operation_key, "status": result.status.value}
    if isinstance(result, Snapshot):
        return {
            "run": result.run.run_id,
            "revision": result.run.revision,
            "history": len(result.history),
            "signals": [s.dedup_key for s in result.signals],
            "command_results": [c.operation_key for c in result.command_results],
            "timers": [t.operation_key for t in result.timers],
        }
    if isinstance(result, list | tuple):
        return [normalize(item) for item in result]
    if isinstance(result, dict):
        return {str(k): normalize(v) for k, v in result.items()}
    if hasattr(result, "run_id"):  # a Run
        return {"run": result.run_id, "status": result.status.value, "revision": result.revision}
    return repr(result)
