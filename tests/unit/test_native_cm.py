"""The native connection path (engine/nativeflow.py, native/cmrun.c) held to the Python engine's
declarations: C's phase, action, step, call and state numbers are the places of Python's names,
the plan's rows are lifecycle's, and a run C cannot take says why and runs in Python. Its wire is
proven in the lab (tests/lab/test_connect_listen.py, both runners)."""

from __future__ import annotations

import pytest
from fakerdma import FakeBackend
from test_engine import CLIENT, FAST, SERVER, cmatose_peer, run

from rdmacli import native
from rdmacli.engine import lifecycle as L
from rdmacli.engine import nativeflow as NF
from rdmacli.engine.timing import DISPATCH, STEP_ORDER
from rdmacli.outcome import State
from rdmacli.protocols.bare import BareClient
from rdmacli.protocols.cmatose import CmatoseClient


@pytest.fixture
def lib():
    loaded = native.load()
    if loaded is None:
        pytest.skip(f"the native extension is not built: {native.why()}")
    return loaded[1]


def test_cs_numbers_are_the_places_of_pythons_names(lib):
    for i, phase in enumerate(NF.PHASES):
        assert getattr(lib, "RDMACLI_PH_" + phase.name) == i, phase
    assert len(L.Phase) == lib.RDMACLI_CM_PHASES
    for i, action in enumerate(NF.ACTIONS):
        assert getattr(lib, "RDMACLI_ACT_" + action.upper()) == i + 1
    c_steps = ("CREATE_ID", "RESOLVE_ADDR", "RESOLVE_ROUTE", "CREATE_QP", "CONNECT", "DISCONNECT",
               "DESTROY_QP", "DESTROY_ID", "DISPATCH")  # fmt: skip
    for i, name in enumerate(c_steps):
        assert getattr(lib, "RDMACLI_ST_" + name) == i
    assert len(NF.STEPS) == lib.RDMACLI_CM_STEPS
    assert set(NF.STEPS) <= set(STEP_ORDER) | {DISPATCH}  # cmtime's names, as timing.py has them
    for i, state in enumerate(NF.STATES):
        assert getattr(lib, "RDMACLI_CS_" + state.name) == i
    for i, call in enumerate(NF.CALLS[1:], 1):  # rdma_create_id: RDMACLI_CALL_CREATE_ID
        assert call and getattr(lib, "RDMACLI_CALL_" + call.split("_", 1)[1].upper()) == i


def test_every_active_row_has_a_c_handler_and_phases_a_step_only_where_lifecycle_says():
    assert {row.action for row in L.ACTIVE.values()} <= set(NF.ACTIONS)
    # the phases C times (cmflow.c PHASE_STEP) are those lifecycle.PHASES gives a step
    timed = {L.RESOLVE_ADDR, L.RESOLVE_ROUTE, L.CREATE_QP, L.CONNECT, L.DISCONNECT}
    assert {p for p, b in L.PHASES.items() if b.step and p not in (L.ACCEPT, L.JOIN)} == timed


def test_the_exchanges_c_runs_are_cmatoses_client_and_the_bare_one():
    assert NF.exchange_of(CmatoseClient(3, 64)) == 1
    assert NF.exchange_of(BareClient()) == 0
    assert NF.exchange_of(object()) is None

    class Token(CmatoseClient):  # a protocol of its own on the same wire (the mesh's)
        pass

    assert NF.exchange_of(Token(3, 64)) is None


def test_a_run_c_cannot_take_runs_in_python_and_says_so(monkeypatch):
    monkeypatch.delenv(native.CM_ENV, raising=False)  # native is the default
    backend = FakeBackend()
    flow = NF.NativeClientFlow(dst=SERVER, src=CLIENT, connections=2, timeouts=FAST, backend=backend,
                               make_protocol=lambda: CmatoseClient(3, 64))  # fmt: skip
    assert flow.why_python() == "a backend of its own"
    cmatose_peer(backend, flow)
    outcome = run(flow)
    assert outcome.states() == [State.DONE, State.DONE]
    assert outcome.data == {"data_path": "python"}


def test_asked_for_the_python_engine_python_runs_the_connections(monkeypatch):
    monkeypatch.setenv(native.CM_ENV, "python")
    flow = NF.NativeClientFlow(dst=SERVER, src=CLIENT, timeouts=FAST, backend=FakeBackend(),
                               make_protocol=BareClient)  # fmt: skip
    assert flow.why_python() == f"{native.CM_ENV}=python"
