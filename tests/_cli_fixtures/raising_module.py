"""A module that raises while it is imported."""

raise RuntimeError("this module fails on import")
