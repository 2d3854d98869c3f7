"""The SQL store split by promise family: one mixin per family, composed into
:class:`adapters._sql.store.SqlStore`. Each module sits beside the family's
protocol (``kit/contract/protocol.py``) and checks (``kit/conformance/``)."""
