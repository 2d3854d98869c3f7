"""``kit replay bundle.json`` for a stress bundle: replay, compare, shrink, narrate.

Exit 1 when the recorded violation reproduces (as for fault-machine bundles),
0 when it does not, 2 for a bad bundle or arguments.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

__all__ = ["run_stress_replay"]

NARRATION_LINES = 80
"""At most this many narration lines are printed (the last ones: where the violation is)."""


def run_stress_replay(console: Console, args: argparse.Namespace) -> int:
    from kit.backends import resolve
    from kit.contract.errors import ConfigurationError
    from kit.workload.config import StressConfig
    from kit.workload.replay import (
        load_stress_bundle,
        narrate,
        replay_bundle,
        shrink,
        witness_participants,
    )

    if args.times < 1 or args.shrink < 0:
        raise ConfigurationError("--times must be at least 1 and --shrink at least 0 seconds")
    bundle = load_stress_bundle(args.bundle)
    spec = args.backend or bundle.get("backend")
    if not spec:
        raise ConfigurationError(f"{args.bundle} names no backend: pass --backend NAME")
    config = StressConfig.from_json(bundle["config"])
    recorded = bundle.get("violations") or []
    backend = resolve(spec, args.url)
    try:
        console.print(f"replaying {escape(args.bundle)}: {bundle['steps']} scheduler steps of a deterministic "
                      f"stress run (seed {bundle.get('seed')}) recorded on {escape(str(bundle.get('backend')))}, "
                      f"now on {escape(str(spec))} ({escape(backend.describe())})", soft_wrap=True)
        for v in recorded:
            console.print(f"recorded: invariant {v['invariant']} ({escape(v['name'])}) violated - "
                          f"{escape(v['explanation'])}", soft_wrap=True)
        reproduced = 0
        for i in range(args.times):
            outcome = replay_bundle(bundle, backend)
            reproduced += outcome.reproduced
            verdict = ("[bold red]reproduced[/]: same invariant, same witness" if outcome.reproduced else
                       "[yellow]same invariant, another witness[/]" if outcome.same_invariants else
                       "[green]not reproduced[/]")
            console.print(f"replay {i + 1}/{args.times} (mode deterministic): {verdict}"
                          f"{'; ' + escape('; '.join(outcome.differences)) if outcome.differences else ''}",
                          soft_wrap=True)
        if recorded and args.shrink > 0:
            console.print(f"shrinking the schedule for invariant {recorded[0]['invariant']} "
                          f"(at most {args.shrink:g} s)...")
            shrunk = shrink(bundle, backend, budget_s=args.shrink)
            console.print(f"shortest failing schedule found: {len(shrunk.schedule)} of {shrunk.original} steps "
                          f"({shrunk.replays} replays, {shrunk.seconds:.1f} s)")
            if shrunk.verdict is not None:
                console.print(f"  {escape(shrunk.verdict.explanation)}", soft_wrap=True)
                focus = sorted(witness_participants(shrunk.verdict.witness))
                lines, _ = narrate(backend, config, shrunk.schedule, spec=str(bundle.get("backend") or ""),
                                   focus=focus)
                console.print(f"narration of {', '.join(focus) or 'every participant'} (the clock folded in; "
                              f"step number, participant, statements -> what the history recorded):")
                if len(lines) > NARRATION_LINES:
                    console.print(f"  ... {len(lines) - NARRATION_LINES} earlier lines")
                for line in lines[-NARRATION_LINES:]:
                    console.print(escape(line), soft_wrap=True, highlight=False)
    finally:
        backend.close()
    return 1 if reproduced else 0
