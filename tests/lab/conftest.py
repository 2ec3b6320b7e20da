"""Lab tests: real RDMA, real peers. Addresses come from the lab (or RDMACLI_LAB_* on a real host)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.rdma


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/lab/" in str(item.fspath):
            item.add_marker(pytest.mark.rdma)


class Lab:
    def __init__(self):
        self.server = os.environ.get("RDMACLI_LAB_SERVER")
        self.client = os.environ.get("RDMACLI_LAB_CLIENT")
        self.server6 = os.environ.get("RDMACLI_LAB_SERVER6")
        self.client6 = os.environ.get("RDMACLI_LAB_CLIENT6")
        self.rdmacli = [sys.executable, "-m", "rdmacli"]

    def run(self, *args, timeout=120, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([*self.rdmacli, *args], capture_output=True, text=True, timeout=timeout, **kw)

    def spawn(self, *args, **kw) -> subprocess.Popen:
        return subprocess.Popen(
            [*self.rdmacli, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw
        )


@pytest.fixture(scope="session")
def lab() -> Lab:
    lab = Lab()
    if not lab.server or not lab.client:
        pytest.fail(
            "no lab addresses: run the rdma suite with `make lab-test` "
            "(or set RDMACLI_LAB_SERVER / RDMACLI_LAB_CLIENT on an RDMA host)"
        )
    return lab


@pytest.fixture(scope="session")
def c_tool():
    def path(name: str) -> str:
        found = shutil.which(name)
        if not found:
            pytest.fail(f"{name} not installed: apt-get install rdmacm-utils")
        return found

    return path
