"""Commands driven through click, as a person types them, on the scripted RDMA stack.

`rdmacli(backend, *args)` runs one command with the backend injected (click's `obj`); the
peers (peers.py) play the C tools' side of each protocol. What the commands print and exit
with is checked here; that RDMA itself works is the lab suite's job.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from fakerdma import FakeBackend

from rdmacli.cli import cli

from .peers import Result


@pytest.fixture
def rdmacli():
    def invoke(backend, *args: str, input=None) -> Result:
        r = CliRunner().invoke(cli, list(args), obj={"backend": backend}, input=input)
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception
        return Result(r)

    return invoke


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()
