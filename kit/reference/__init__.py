"""The reference engine (backend ``memory``): the executable contract and the machines' oracle."""

from kit.reference.backend import MemoryBackend, MemoryDatabase
from kit.reference.store import MemoryStore

__all__ = ["MemoryBackend", "MemoryDatabase", "MemoryStore"]
