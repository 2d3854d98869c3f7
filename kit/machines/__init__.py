"""Fault machines: steps applied to an adapter and the reference engine in lock step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.lazy import lazy_names

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


__getattr__ = lazy_names(__name__, _HOMES)
