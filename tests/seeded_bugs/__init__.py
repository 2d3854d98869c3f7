"""Seeded-bug adapters: deliberate, small breakages the kit must catch."""
