"""A record's fields as the wire has them, declared once on its dataclass (scapy's fields_desc).

Each field that comes from an agent carries its check in the field's metadata (`wire(...)`):
what a good value is, in words for a refusal, and what a bad one costs its sender: a violation
(the record is refused) or, for a field said for people only, nothing (its default is taken).
`take(cls, doc, refuse)` reads a JSON object into those fields once, strictly: no record reads
its keys by hand, and a key the class does not declare never reaches the report.

Cross-field rules (a median under its p99) stay with the record: they read the typed values.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable

KEY = "wire"
_ABSENT = object()


def anything(v: Any) -> bool:
    """A field any value of which is taken (its `keep` makes it one of its kind)."""
    return True


@dataclass(frozen=True)
class Wire:
    """One field's check: `ok(value)` for a good value, `words` for what one is; a bad value is
    refused unless `lenient` (then the default is taken); `keep(value)` is what is kept of a
    good one (a copy, a tuple, printable text); `absent` is what a field left out (or, lenient,
    said wrong) is taken as, kept as a good value is, when that is not the dataclass's default."""

    ok: Callable[[Any], bool]
    words: str = ""
    lenient: bool = False
    keep: Callable[[Any], Any] | None = None
    absent: Any = _ABSENT
    needed: bool = False  # the wire must say it, though the class has a default for its own makers


def wire(
    ok: Callable[[Any], bool] = anything,
    words: str = "",
    *,
    default: Any = MISSING,
    lenient: bool = False,
    keep: Callable[[Any], Any] | None = None,
    absent: Any = _ABSENT,
    needed: bool = False,
) -> Any:
    """A dataclass field read from the wire by `take` (dataclasses.field with its check)."""
    meta = {KEY: Wire(ok, words, lenient, keep, absent, needed)}
    return field(metadata=meta) if default is MISSING else field(default=default, metadata=meta)


def take(cls: type, doc: dict, refuse: Callable[[str, str], Exception], skip: tuple[str, ...] = ()) -> dict:
    """`cls`'s declared fields as `doc` says them, each checked: name -> value (a field `doc`
    leaves out: its `absent` value, else its default, else refused). `refuse(name, words)`
    makes the sender's violation; `skip`: fields the caller fills in itself."""
    if not isinstance(doc, dict):
        raise refuse("", "an object")
    out: dict[str, Any] = {}
    get = doc.get
    for name, ok, keep, lenient, absent, required, words in _declared(cls):
        if skip and name in skip:
            continue
        v = get(name, _ABSENT)
        if v is _ABSENT or (lenient and not ok(v)):
            if absent is not _ABSENT:
                out[name] = keep(absent) if keep is not None else absent
            elif required:
                raise refuse(name, words)
            continue
        if not ok(v):
            raise refuse(name, words)
        out[name] = keep(v) if keep is not None else v
    return out


Plan = tuple[str, Callable[[Any], bool], Callable[[Any], Any] | None, bool, Any, bool, str]
_DECLARED: dict[type, tuple[Plan, ...]] = {}


def _declared(cls: type) -> tuple[Plan, ...]:
    """`cls`'s wire fields, once, flat: (name, ok, keep, lenient, absent, whether the wire must
    say it, words). A coordinator at fleet size reads hundreds of thousands of records."""
    got = _DECLARED.get(cls)
    if got is None:
        got = tuple(
            (
                f.name,
                r.ok,
                r.keep,
                r.lenient,
                r.absent,
                r.needed or (f.default is MISSING and f.default_factory is MISSING),
                r.words,
            )  # fmt: skip
            for f in fields(cls)
            if (r := f.metadata.get(KEY)) is not None
        )
        _DECLARED[cls] = got
    return got


def names(cls: type) -> tuple[str, ...]:
    """The fields of `cls` the wire says (the others are the receiver's)."""
    return tuple(f.name for f in fields(cls) if KEY in f.metadata)
