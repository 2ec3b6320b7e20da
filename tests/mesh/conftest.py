"""Mesh lab tests: `rdmacli lab --nodes 16 --rails 2` (make lab-mesh-test), real launchers, real
Soft-RoCE. `rdmacli watch`'s agents (test_watch.py) run in the same boot, last."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/mesh/" in str(item.fspath):
            item.add_marker(pytest.mark.mesh)
