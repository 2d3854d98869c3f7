"""Seeds and numbers given on the command line or in the environment: one rule for every route.

A seed is a whole number from 0 to 2**63 - 1, whether it comes from ``--seed``,
``--kit-seed`` or ``KIT_SEED``; anything else is bad input, refused in one line
naming the fix (never silently replaced by a fresh seed). Durations are finite
positive numbers of seconds; counts are whole numbers with a floor.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import secrets
from collections.abc import Callable

from kit.contract.errors import ConfigurationError

__all__ = [
    "MAX_SEED",
    "count_type",
    "derive_seed",
    "env_seed",
    "fresh_seed",
    "parse_seed",
    "seconds_type",
    "seed_type",
]

MAX_SEED = 2**63 - 1


def parse_seed(raw: object, source: str) -> int:
    """The seed ``raw`` names; ConfigurationError (naming ``source``) if it is not a whole number 0..2**63-1."""
    text = str(raw).strip()
    try:
        value = int(text, 10)
    except ValueError:
        raise ConfigurationError(
            f"{source} {text!r} is not a seed: give a whole number from 0 to {MAX_SEED}, such as 1234"
        ) from None
    if not 0 <= value <= MAX_SEED:
        raise ConfigurationError(f"{source} {value} is out of range: give a whole number from 0 to {MAX_SEED}")
    return value


def env_seed() -> int | None:
    """``KIT_SEED`` if set (``random`` or empty: None); a malformed one is refused, never ignored."""
    raw = os.environ.get("KIT_SEED", "").strip()
    if not raw or raw == "random":
        return None
    return parse_seed(raw, "KIT_SEED")


def derive_seed(seed: int, index: int) -> int:
    """The seed of exploration ``index`` of a run whose printed seed is ``seed``.

    Exploration 0 is the printed seed itself (one worker explores exactly what ``--seed`` always
    explored); every other index gives a distinct, stable seed in 0..MAX_SEED that ``--seed`` accepts
    back, so each exploration can be repeated alone. The machines pin Hypothesis's generation to the
    seed (``pinned_generation``), so a derived seed, too, means one scenario whatever modules are loaded.
    """
    if index < 0:
        raise ValueError(f"exploration index {index} is negative")
    if index == 0:
        return seed
    digest = hashlib.sha256(f"kit-exploration:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & MAX_SEED


def fresh_seed() -> int:
    return secrets.randbelow(2**31)


def seed_type(text: str) -> int:
    """argparse type of ``--seed``."""
    try:
        return parse_seed(text, "--seed")
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--seed ", "", 1)) from None


def seconds_type(allow_zero: bool = False) -> Callable[[str], float]:
    """argparse type of a duration: a finite number of seconds, positive (or also zero)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            floor = "zero or more" if allow_zero else "more than zero"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration: give a finite number of seconds, {floor}, such as 30"
            )
        return value

    return parse


def count_type(minimum: int) -> Callable[[str], int]:
    """argparse type of a count: a whole number at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least {minimum}")
        return value

    return parse
