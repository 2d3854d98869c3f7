"""``kit``: the command line.

Bad input (an unknown backend, a bad import path, a malformed or unreachable
URL, an unreadable file) is one line naming the fix and a non-zero exit, never
a traceback: 2 for bad input, 3 for a backend that cannot be reached, 1 for a
failed check or a reproduced divergence, 130 for a run stopped by Ctrl-C or
SIGTERM (no verdict; what the kit created is cleaned up on the way out). Error
lines go to stderr; outside a terminal no line is cut at 80 columns.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.markup import escape

from kit import __version__
from kit.contract.errors import BackendUnavailable, ConfigurationError

__all__ = ["COMMANDS", "main", "make_console"]

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 1, 2, 3, 130
UNWRAPPED_WIDTH = 10_000
"""The console width outside a terminal: wide enough that no line of the kit's is wrapped."""

#: Subcommand modules under kit.commands, in help order.
COMMANDS = ("check", "backends", "replay", "report", "run", "stress", "clean")


def _parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = argparse.ArgumentParser(
        prog="kit",
        description="Conformance and fault-injection kit for durable-workflow storage layers.",
    )
    parser.add_argument("--version", action="version", version=f"kit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules: dict[str, object] = {}
    for name in COMMANDS:
        module = importlib.import_module(f"kit.commands.{name}")
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        modules[module.NAME] = module
    return parser, modules


def make_console(stderr: bool = False) -> Console:
    """A console for stdout (or stderr) that wraps only on a terminal.

    Outside a terminal (CI logs, pipes, files) with no ``COLUMNS`` set, Rich would cut
    every line at 80 columns; there lines are written whole instead.
    """
    console = Console(highlight=False, stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = UNWRAPPED_WIDTH
    return console


def main(argv: Sequence[str] | None = None) -> int:
    parser, modules = _parser()
    args = parser.parse_args(argv)
    console, errors = make_console(), make_console(stderr=True)
    restore = _sigterm_as_interrupt()
    try:
        return int(modules[args.command].run(console, args))  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        errors.print("[bold yellow]kit: interrupted[/] (Ctrl-C or SIGTERM): stopped with no verdict; "
                      "everything the kit created was cleaned up")
        return EXIT_INTERRUPTED
    except ConfigurationError as exc:
        errors.print(f"[bold red]kit: error:[/] {escape(str(exc))}", soft_wrap=True)
        return EXIT_BAD_INPUT
    except BackendUnavailable as exc:
        errors.print(
            f"[bold red]kit: {escape(exc.backend)} is not reachable:[/] {escape(exc.reason)}. {escape(exc.fix)}",
            soft_wrap=True,
        )
        return EXIT_UNREACHABLE
    finally:
        restore()


def _sigterm_as_interrupt() -> Callable[[], None]:
    """Handle SIGTERM (what CI timeouts and ``kill`` send) as Ctrl-C: unwind, clean up, exit 130.

    Returns the function that puts the previous handler back. Only the main thread may
    install handlers; elsewhere (an embedding program) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
