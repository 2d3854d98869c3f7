"""A package's public names imported on first use (PEP 562), so importing one light submodule of it does
not import every heavy one the package re-exports."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name of ``homes`` is imported from the module it maps to on
    first use and kept on the package; any other name is an ``AttributeError`` (so ``from package import
    submodule`` still imports the submodule)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
