"""The kit: conformance and fault-injection tests for durable-workflow storage layers."""

__version__ = "0.1.0"

__all__ = ["__version__"]
