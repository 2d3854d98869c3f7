"""The timer loop: fire due durable timers (the store decides what is due, by its own clock)."""

from __future__ import annotations

from collections.abc import Callable

from kit.contract import Storage
from kit.runtime.stats import RuntimeStats

__all__ = ["TimerLoop"]


class TimerLoop:
    """Fires due timers on one store; any number may run at once (firing is at most once per timer)."""

    def __init__(
        self,
        store: Storage,
        *,
        batch: int = 100,
        stats: RuntimeStats | None = None,
        on_fired: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        self.batch = batch
        self.stats = stats if stats is not None else RuntimeStats()
        self.on_fired = on_fired

    def poll(self) -> int:
        """Fire up to ``batch`` due timers; return how many fired."""
        fired = self.store.fire_due_timers(self.batch)
        if fired:
            self.stats.fired(len(fired))
            if self.on_fired is not None:
                self.on_fired(len(fired))
        return len(fired)
