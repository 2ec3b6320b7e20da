"""Mesh lab tests: `rdmacli lab --nodes 8` (make lab-mesh-test), real launchers, real Soft-RoCE."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/mesh/" in str(item.fspath):
            item.add_marker(pytest.mark.mesh)
