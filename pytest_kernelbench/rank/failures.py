"""The two ways a rank leaves an item early (the checker turns each into its files, in one place)."""
from __future__ import annotations


class ItemFailed(Exception):
    """This rank cannot go on: the item fails with `category` (the error file says why). `tb` is
    a traceback from the candidate process (text: its objects never cross)."""

    def __init__(self, category: str, message: str, where: str, exc: BaseException | None = None, tb: str = ""):
        super().__init__(message)
        self.category, self.message, self.where, self.exc, self.tb = category, message, where, exc, tb


class AgreedFailure(Exception):
    """Every rank agreed on the item's failure (the first failing rank's verdict)."""

    def __init__(self, failure: dict, record: dict):
        super().__init__(failure["message"])
        self.failure, self.record = failure, record
