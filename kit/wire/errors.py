"""Errors of the wire bridge: the store process or its messages failed, not the contract.

Both are :class:`~kit.contract.errors.ConnectionLost`: whether the call in flight
landed is unknown, and the kit treats the store as gone (every later call fails
at once with the same message). Messages name the offending message and end
with the tail of the store's stderr when it has one.
"""

from __future__ import annotations

from kit.contract.errors import ConnectionLost

__all__ = ["StoreProcessFault", "WireProtocolError"]


class StoreProcessFault(ConnectionLost):
    """The store process died, hung past the call timeout, or closed the connection."""


class WireProtocolError(StoreProcessFault):
    """The store sent something the protocol does not allow (garbage, an unknown id, a wrong type)."""
