"""``kit replay FILE``: re-run a saved failure step by step, narrated.

A fault-machine bundle replays its steps; a stress bundle (``bundle.json`` of a
deterministic ``kit stress`` run) replays its schedule on a fresh database,
says whether the same invariant is violated with the same witness, then
shrinks the schedule and narrates the shortest failing interleaving.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

NAME = "replay"
HELP = "replay a saved scenario bundle step by step (exit 1 if the divergence reproduces)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="a scenario bundle saved by kit (scenarios/seeds/*.json)")
    parser.add_argument("--backend", help="replay on this backend instead of the one that recorded it")
    parser.add_argument("--url", help="SQLAlchemy URL of the server (else KIT_<BACKEND>_URL, else discovery)")
    parser.add_argument("--times", type=int, default=1, help="stress bundles: replay this many times in a row (default 1)")
    parser.add_argument("--shrink", type=float, default=60.0, metavar="SECONDS",
                        help="stress bundles: seconds spent shrinking the schedule, 0 to skip (default 60)")


def run(console: Console, args: argparse.Namespace) -> int:
    from kit.backends import resolve
    from kit.contract.errors import ConfigurationError
    from kit.machines.bundle import load_bundle, replay

    if _is_stress_bundle(args.bundle):
        from kit.commands.replay_stress import run_stress_replay

        return run_stress_replay(console, args)
    bundle = load_bundle(args.bundle)
    spec = args.backend or bundle.get("backend")
    if not spec:
        raise ConfigurationError(f"{args.bundle} names no backend: pass --backend NAME (memory, sqlite, ...)")
    backend = resolve(spec, args.url)
    machine = "queue" if bundle.get("kind") == "queue" else str(bundle.get("machine", "reference"))
    console.print(
        f"replaying {escape(args.bundle)}: {len(bundle['steps'])} steps recorded by the {escape(machine)} machine on "
        f"{escape(str(bundle.get('backend') or 'an unnamed backend'))} (seed {bundle.get('seed')}), now on {escape(spec)} "
        f"({escape(backend.describe())})",
        soft_wrap=True,
    )
    recorded = bundle.get("divergence") or {}
    if recorded:
        console.print(f"recorded divergence at step {recorded.get('step')}: {escape(str(recorded.get('message')))}", soft_wrap=True)
    try:
        result = replay(bundle, backend, narrate=lambda line: console.print(escape(line), soft_wrap=True))
    finally:
        backend.close()
    if result.reproduced:
        same = recorded and result.divergence and result.divergence.get("step") == recorded.get("step") \
            and result.divergence.get("kind") == recorded.get("kind")
        console.print("[bold red]reproduced[/]" + (" the recorded divergence" if same else " a divergence"))
        return 1
    if bundle.get("kind") == "queue":
        console.print("[bold green]no violation[/]: every step kept the queue invariants")
    elif machine == "model-free":
        console.print("[bold green]no divergence[/]: every invariant held after every step")
    else:
        console.print("[bold green]no divergence[/]: every step agreed with the reference engine")
    return 0


def _is_stress_bundle(path: str) -> bool:
    import json

    try:
        with open(path, encoding="utf-8") as handle:
            head = handle.read(64)
            if '"kind":"stress"' not in head.replace(" ", ""):
                return False
            handle.seek(0)
            return bool(json.load(handle).get("kind") == "stress")
    except (OSError, ValueError):
        return False
