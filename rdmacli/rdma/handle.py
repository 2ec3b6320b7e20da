"""What every wrapper of a C object shares: a pointer that is gone once the object is destroyed.

A destroyed wrapper keeps no pointer, and reading `.ptr` then raises UseAfterDestroy naming the
object and the call that touched it. Without it a late use read `None.fd` and surfaced as an
AttributeError nobody could place (issue 24: a completion channel destroyed earlier in the same
dispatch turn); with it the next case of that kind is named, not guessed.
"""

from __future__ import annotations

import sys


class UseAfterDestroy(RuntimeError):
    """A wrapper was used after its C object was destroyed: a bug in rdmacli, named."""

    def __init__(self, kind: str, call: str):
        self.kind, self.call = kind, call
        super().__init__(f"{call}: the {kind} was already destroyed")


def _caller(depth: int) -> str:
    code = sys._getframe(depth + 1).f_code
    return getattr(code, "co_qualname", code.co_name)


class Handle:
    """Subclasses set `kind` (words for people) and `ptr` (the C pointer); destroying sets it None."""

    kind = "RDMA object"
    _ptr = None

    @property
    def ptr(self):
        p = self._ptr
        if p is None:
            raise UseAfterDestroy(self.kind, _caller(1))
        return p

    @ptr.setter
    def ptr(self, value) -> None:
        self._ptr = value

    @property
    def alive(self) -> bool:
        return self._ptr is not None

    def gone(self, what: str) -> UseAfterDestroy:
        """The error for a part of this object that no longer exists (a cm_id's destroyed QP)."""
        return UseAfterDestroy(what, _caller(1))
