"""The durable runtime: WASM workflows (wasmtime) decided, worked and timed over any adapter.

* :mod:`kit.runtime.abi` -- what a workflow module imports and exports.
* :class:`WorkflowModule`, :class:`Registry`, :func:`load_workflows` -- compiled, digested modules.
* :func:`execute` -- replay a history through a module and plan the next decision (pure).
* :class:`Decider`, :class:`CommandWorker`, :class:`TimerLoop` -- the three loops, one store each.
* :class:`Runtime` -- those loops as threads of this process.
* :func:`check_replay` -- a run's history replays to exactly its recorded decisions.
* :func:`run_workload` / :func:`run_scenarios` -- what ``kit run`` does.
"""

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
