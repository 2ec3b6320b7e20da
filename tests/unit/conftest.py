"""The unit suite's own: nothing it runs in-process shares this machine's state."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_mesh_locks(tmp_path_factory, monkeypatch):
    """In-process mesh agents take their address-and-port locks in a directory of this run's
    own, not /run/lock: another run on this machine (a second checkout's `make test`, a real
    mesh) holding 10.0.0.1:7490 must not make these agents' pairs BUSY."""
    from rdmacli.mesh import lock

    monkeypatch.setattr(lock, "LOCK_DIRS", (str(tmp_path_factory.mktemp("locks")),))
