"""Mesh lab tests: `rdmacli lab --nodes 8` (make lab-mesh-test), real launchers, real Soft-RoCE."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if str(item.fspath).endswith("/tests/mesh/test_watch.py"):
            # `make lab-watch-test`, its own boot, not yet part of `make test`: on 2026-11-27 its
            # healthy fabric, dead link and lossy NIC were named in time, but a host-wide slowdown
            # of the emulated lab (every agent's round trips up at once) made slow NICs everywhere
            item.add_marker(pytest.mark.watchlab)
        elif "/tests/mesh/" in str(item.fspath):
            item.add_marker(pytest.mark.mesh)
