"""The durable runtime: WASM workflows (wasmtime) decided, worked and timed over any adapter.

* :mod:`kit.runtime.abi` -- what a workflow module imports and exports.
* :class:`WorkflowModule`, :class:`Registry`, :func:`load_workflows` -- compiled, digested modules.
* :func:`execute` -- replay a history through a module and plan the next decision (pure).
* :class:`Decider`, :class:`CommandWorker`, :class:`TimerLoop` -- the three loops, one store each.
* :class:`Runtime` -- those loops as threads of this process.
* :func:`check_replay` -- a run's history replays to exactly its recorded decisions.
* :func:`run_workload` / :func:`run_scenarios` -- what ``kit run`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.lazy import lazy_names

if TYPE_CHECKING:
    from kit.runtime.decider import Decider
    from kit.runtime.determinism import ReplayCheck, check_replay
    from kit.runtime.driver import RunReport, pick_scenarios, run_scenarios, run_workload
    from kit.runtime.module import (
        DigestMismatch,
        Registry,
        UnknownWorkflow,
        WorkflowLoadError,
        WorkflowModule,
        load_workflows,
        workflows_dir,
    )
    from kit.runtime.replay import Inputs, Plan, execute
    from kit.runtime.scenarios import HANDLERS, SCENARIOS, Scenario
    from kit.runtime.service import Runtime, RuntimeConfig
    from kit.runtime.stats import RuntimeStats
    from kit.runtime.timers import TimerLoop
    from kit.runtime.worker import CommandContext, CommandError, CommandWorker

__all__ = [
    "HANDLERS",
    "SCENARIOS",
    "CommandContext",
    "CommandError",
    "CommandWorker",
    "Decider",
    "DigestMismatch",
    "Inputs",
    "Plan",
    "Registry",
    "ReplayCheck",
    "RunReport",
    "Runtime",
    "RuntimeConfig",
    "RuntimeStats",
    "Scenario",
    "TimerLoop",
    "UnknownWorkflow",
    "WorkflowLoadError",
    "WorkflowModule",
    "check_replay",
    "execute",
    "load_workflows",
    "pick_scenarios",
    "run_scenarios",
    "run_workload",
    "workflows_dir",
]

_HOMES: dict[str, str] = {
    "CommandContext": "kit.runtime.worker",
    "CommandError": "kit.runtime.worker",
    "CommandWorker": "kit.runtime.worker",
    "Decider": "kit.runtime.decider",
    "DigestMismatch": "kit.runtime.module",
    "HANDLERS": "kit.runtime.scenarios",
    "Inputs": "kit.runtime.replay",
    "Plan": "kit.runtime.replay",
    "Registry": "kit.runtime.module",
    "ReplayCheck": "kit.runtime.determinism",
    "RunReport": "kit.runtime.driver",
    "Runtime": "kit.runtime.service",
    "RuntimeConfig": "kit.runtime.service",
    "RuntimeStats": "kit.runtime.stats",
    "SCENARIOS": "kit.runtime.scenarios",
    "Scenario": "kit.runtime.scenarios",
    "TimerLoop": "kit.runtime.timers",
    "UnknownWorkflow": "kit.runtime.module",
    "WorkflowLoadError": "kit.runtime.module",
    "WorkflowModule": "kit.runtime.module",
    "check_replay": "kit.runtime.determinism",
    "execute": "kit.runtime.replay",
    "load_workflows": "kit.runtime.module",
    "pick_scenarios": "kit.runtime.driver",
    "run_scenarios": "kit.runtime.driver",
    "run_workload": "kit.runtime.driver",
    "workflows_dir": "kit.runtime.module",
}
"""Where each public name lives: imported on first use, so ``import kit.runtime.<module>`` (or a command that
never runs a workflow) does not load wasmtime and every loop."""


__getattr__ = lazy_names(__name__, _HOMES)
