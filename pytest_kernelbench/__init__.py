"""pytest-kernelbench: every multi-GPU communication problem is a pytest test."""

__version__ = "0.1.0"

__all__ = ["evaluate", "evaluate_many"]


def __getattr__(name: str):
    # lazy: every rank process imports this package (protocol.py) and must not pay for the scorer
    if name in __all__:
        from . import scoring
        return getattr(scoring, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
