"""What every wrapper of a C object shares: a pointer that is gone once the object is destroyed,
and the objects that hang on it.

A destroyed wrapper keeps no pointer, and reading `.ptr` then raises UseAfterDestroy naming the
object and the call that touched it. Without it a late use read `None.fd` and surfaced as an
AttributeError nobody could place (issue 24: a completion channel destroyed earlier in the same
dispatch turn); with it the next case of that kind is named, not guessed.

Ownership is pyverbs': an object made on another hangs on it (`own`), and `close()` closes what
hangs on an object, the newest first, before the object itself. The verbs' own order then holds
without any teardown spelling it out: a cm_id's AHs and MRs go before the id takes librdmacm's PD
with it, a QP before the CQ it posts to, every cm_id before its event channel
(rdma_destroy_event_channel(3)). A child destroyed on its own (an AH retired, a QP made again)
lets go of its owner, so a long-lived owner holds only what is alive.
"""

from __future__ import annotations

import errno as _errno
import os
import sys
from typing import TypeVar


class RdmaCallError(Exception):
    """A librdmacm/libibverbs call failed with errno; the engine adds the step and advice."""

    def __init__(self, call: str, err: int):
        self.call, self.errno = call, err
        name, text = errno_text(err)
        super().__init__(f"{call} failed: {name} ({text})")


# Kernel-internal codes that reach user space through the rdma_cm ABI; Python's errno lacks them.
KERNEL_ERRNOS = {524: ("ENOTSUPP", "operation not supported by the kernel or driver")}


def errno_text(err: int) -> tuple[str, str]:
    if err in KERNEL_ERRNOS:
        return KERNEL_ERRNOS[err]
    return _errno.errorcode.get(err, str(err)), os.strerror(err)


class UseAfterDestroy(RuntimeError):
    """A wrapper was used after its C object was destroyed: a bug in rdmacli, named."""

    def __init__(self, kind: str, call: str):
        self.kind, self.call = kind, call
        super().__init__(f"{call}: the {kind} was already destroyed")


def _caller(depth: int) -> str:
    code = sys._getframe(depth + 1).f_code
    return getattr(code, "co_qualname", code.co_name)


H = TypeVar("H", bound="Handle")


class Handle:
    """Subclasses set `kind` (words for people) and `ptr` (the C pointer), and say in `_free` the
    C call that destroys the object; destroying sets the pointer None."""

    kind = "RDMA object"
    _ptr = None
    _owner: Handle | None = None
    _owned: dict[int, Handle] | None = None  # what hangs on it, by id, oldest first

    def _free(self) -> None:
        """The C call(s) that destroy this object alone (raising RdmaCallError)."""

    def own(self, child: H) -> H:
        """`child` hangs on this object from now on: closing this closes it first."""
        if self._owned is None:
            self._owned = {}
        self._owned[id(child)] = child
        child._owner = self
        return child

    @property
    def children(self) -> list[Handle]:
        return list((self._owned or {}).values())

    def destroy(self) -> None:
        """This object alone (what hangs on it must be gone already); at most once. Raises
        RdmaCallError when the C call fails, and the object stays alive and owned."""
        if self.alive:
            self._free()
            self._ptr = None
        if self._owner is not None and self._owner._owned is not None:
            self._owner._owned.pop(id(self), None)
        self._owner = None

    def close_children(self) -> list[str]:
        """What hangs on this object (the newest first), not the object: for an owner whose
        own end has a step between (a connection gives its shared CQ back before its id)."""
        errors: list[str] = []
        for child in reversed(self.children):
            errors += child.close()
        self._owned = None  # each was tried once: one that failed is said, not tried again
        return errors

    def close(self) -> list[str]:
        """What hangs on this object (the newest first, each with what hangs on it), then the
        object itself; at most once. Never raises for a failed C call: it is returned in words
        and the rest goes on, so a teardown never turns a run's result."""
        errors = self.close_children()
        try:
            self.destroy()
        except RdmaCallError as exc:
            errors.append(str(exc))
        except Exception as exc:  # a bug of ours, named; the objects after it are still closed
            errors.append(f"{self.kind}: internal error: {type(exc).__name__}: {exc}")
        return errors

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
