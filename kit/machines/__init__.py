"""Fault machines: steps applied to an adapter and the reference engine in lock step."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kit.machines.interpreter import Divergence, Interpreter, StepRecord
    from kit.machines.steps import OPS, describe

__all__ = ["OPS", "Divergence", "Interpreter", "StepRecord", "describe"]

_HOMES: dict[str, str] = {
    "Divergence": "kit.machines.interpreter",
    "Interpreter": "kit.machines.interpreter",
    "StepRecord": "kit.machines.interpreter",
    "OPS": "kit.machines.steps",
    "describe": "kit.machines.steps",
}
"""Where each public name lives: imported on first use, so a light submodule (``progress``, ``choice``)
does not load the interpreter, the reference engine and Hypothesis with it."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
