"""``kit clean``: remove what killed kit runs left behind (their throw-away schemas, databases, folders).

Only objects whose name carries the owner mark of a kit process of this host
that is no longer running are removed (see :mod:`kit.owners`); everything else
is listed with the reason it was kept.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

NAME = "clean"
HELP = "remove the throw-away databases, schemas and folders of kit runs that were killed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("backend", nargs="?", default="sqlite",
                        help="sqlite (default: the temp folder), postgres, mysql, mssql, or package.module:factory")
    parser.add_argument("--url", help="SQLAlchemy URL of the server (else KIT_<BACKEND>_URL, else discovery)")


def run(console: Console, args: argparse.Namespace) -> int:
    from kit.backends import resolve
    from kit.owners import Sweep

    backend = resolve(args.backend, args.url)
    try:
        sweep = getattr(backend, "sweep", None)
        if not callable(sweep):
            console.print(f"{escape(args.backend)} keeps nothing behind: nothing to clean")
            return 0
        done = sweep()
        assert isinstance(done, Sweep)
    finally:
        backend.close()
    for name in done.dropped:
        console.print(f"removed {escape(name)} (its kit process is gone)", soft_wrap=True)
    for name, why in sorted(done.kept.items()):
        console.print(f"kept {escape(name)}: {escape(why)}", soft_wrap=True)
    console.print(f"{len(done.dropped)} removed, {len(done.kept)} kept on {escape(backend.describe())}", soft_wrap=True)
    return 0
