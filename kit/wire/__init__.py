"""The wire protocol (docs/wire-protocol.md): check a store written in any language.

``kit check exec:'<command>'`` or ``kit check wire://host:port`` run the whole
kit against a store that speaks newline-delimited JSON; :func:`connect` is the
Backend behind those specs.
"""

from kit.wire.client import PROTOCOL_VERSION, WireBackend, WireDatabase, WireStorage, connect
from kit.wire.errors import StoreProcessFault, WireProtocolError

__all__ = [
    "PROTOCOL_VERSION",
    "StoreProcessFault",
    "WireBackend",
    "WireDatabase",
    "WireProtocolError",
    "WireStorage",
    "connect",
]
