"""``kit backends``: every built-in backend and whether it is reachable here."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kit.contract.errors import BackendUnavailable, ConfigurationError

NAME = "backends"
HELP = "list backends and whether each is reachable here"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(console: Console, args: argparse.Namespace) -> int:
    from kit.backends import BUILTIN, resolve

    table = Table(title="backends")
    for column in ("name", "what", "reachable", "details"):
        table.add_column(column)
    for spec in BUILTIN.values():
        try:
            backend = resolve(spec.name)
        except BackendUnavailable as exc:
            table.add_row(spec.name, spec.summary, "[red]no[/]", escape(f"{exc.reason}. {exc.fix}"))
            continue
        except ConfigurationError as exc:
            table.add_row(spec.name, spec.summary, "[red]no[/]", escape(str(exc)))
            continue
        try:
            table.add_row(spec.name, spec.summary, "[green]yes[/]", escape(backend.describe()))
        finally:
            backend.close()
    console.print(table)
    return 0
