"""Fault machines: steps applied to an adapter and the reference engine in lock step."""

from kit.machines.interpreter import Divergence, Interpreter, StepRecord
from kit.machines.steps import OPS, describe

__all__ = ["OPS", "Divergence", "Interpreter", "StepRecord", "describe"]
