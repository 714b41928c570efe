"""pytest-kernelbench: every multi-GPU communication problem is a pytest test."""

__version__ = "0.1.0"
