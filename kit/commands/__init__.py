"""The ``kit`` subcommands, one module each.

A command module exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(console, args) -> int``; :mod:`kit.cli` lists the modules in ``COMMANDS``.
"""
