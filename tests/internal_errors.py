"""The lab suites' check for bugs: output that says "internal error" or shows a Python
traceback fails its test.

Kept out of the conftests so that both tests/conftest.py (the fixture) and tests/lab/conftest.py
(the readers of background servers' output) use one list under one module name.
"""

from __future__ import annotations

import subprocess

import pytest

LAB_MARKERS = ("rdma", "mesh", "labvm", "stress")
INTERNAL = "internal error"
MARKERS = (INTERNAL, "Traceback (most recent call last)")
_internal: list[str] = []  # output of this test's processes that said "internal error"


def note_output(*texts) -> None:
    """Remember any process output of a lab test that says "internal error" (the conftests'
    readers and every Popen.communicate, which subprocess.run uses, call this)."""
    for text in texts:
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        for marker in MARKERS:
            if text and marker in text:
                i = text.index(marker)
                _internal.append(text[max(0, i - 200) : i + 1500])


@pytest.fixture(autouse=True)
def no_internal_error(request, monkeypatch):
    """In the lab suites, output that contains "internal error" fails the test that produced
    it, whatever its exit code: a bug must never hide behind an expected failure."""
    if not any(request.node.get_closest_marker(m) for m in LAB_MARKERS):
        yield
        return
    real = subprocess.Popen.communicate

    def communicate(self, *args, **kw):
        out, err = real(self, *args, **kw)
        note_output(out, err)
        return out, err

    monkeypatch.setattr(subprocess.Popen, "communicate", communicate)
    _internal.clear()
    yield
    if _internal:
        found, _internal[:] = list(_internal), []
        pytest.fail(f"{len(found)} process output(s) said one of {MARKERS}:\n" + "\n---\n".join(found))
