"""Scenario data shipped with the kit: ``workflows/*.wat`` (WASM workflow definitions).

A package only so the files install with the kit (like ``migrations``);
``seeds/`` holds saved failing scenarios and is not shipped.
"""
