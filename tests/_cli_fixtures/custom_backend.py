"""A third-party backend class defined at module level (what an adapter author's package holds)."""

from kit.reference import MemoryBackend


class CustomBackend(MemoryBackend):
    name = "custom-store"
