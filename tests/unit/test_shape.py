"""mesh/shape.py: a record's fields read from the wire as declared on them, once, strictly."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdmacli.mesh import records
from rdmacli.mesh.shape import anything, names, take, wire


class Refused(ValueError):
    pass


def refuse(name: str, words: str) -> Refused:
    return Refused(f"{name}: {words}")


@dataclass(frozen=True)
class Rec:
    needed: int = wire(lambda v: isinstance(v, int), "a number")
    absent: str = wire(anything, keep=str, absent="none said")
    kept: tuple = wire(lambda v: isinstance(v, list), "a list", keep=tuple, default=())
    lenient: int = wire(lambda v: isinstance(v, int), lenient=True, default=7)
    must: tuple = wire(lambda v: isinstance(v, list), "a list", keep=tuple, default=(), needed=True)
    ours: int = 0  # not the wire's: never read from it


def test_a_field_is_checked_kept_defaulted_or_refused_as_declared():
    got = take(Rec, {"needed": 1, "kept": [1, 2], "lenient": "x", "must": [], "ours": 5, "other": 1}, refuse)
    assert got == {"needed": 1, "absent": "none said", "kept": (1, 2), "must": ()}
    assert Rec(**got) == Rec(1, "none said", (1, 2), 7, ())
    with pytest.raises(Refused, match="needed: a number"):
        take(Rec, {"must": []}, refuse)  # left out, and no default
    with pytest.raises(Refused, match="kept: a list"):
        take(Rec, {"needed": 1, "kept": "x", "must": []}, refuse)  # said wrong, not lenient
    with pytest.raises(Refused, match="must: a list"):
        take(Rec, {"needed": 1}, refuse)  # a default for its makers, but the wire must say it
    with pytest.raises(Refused, match="an object"):
        take(Rec, [1], refuse)
    assert names(Rec) == ("needed", "absent", "kept", "lenient", "must")


# as test_untrusted_input's: a busy host drew the first input in 1.1 s and failed the health check
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["run", "rank", "peer", "round", "result", "rtt_p50_us", "counters",
                                        "error", "steps_us", "x"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4),
                                 st.lists(st.integers(), max_size=3))))  # fmt: skip
def test_a_pair_record_of_any_fields_is_taken_whole_or_refused_in_words(doc):
    """Whatever an agent says, the record is its declared fields, checked, or a Violation."""
    try:
        rec = records.PairRecord.parse(doc)
    except records.Violation as exc:
        assert str(exc).startswith("a pair record")
    else:
        assert isinstance(rec.rank, int) and rec.result in ("pass", "fail")
        assert records.PairRecord.parse(rec.to_dict()) == rec
