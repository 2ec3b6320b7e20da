"""Causes are data (issue 18): every error is born with one, the exit code follows from it, and
what decides (mesh blame, doctor, the exit status) reads it, never the message."""

from __future__ import annotations

import ast
import pathlib

import pytest

from rdmacli.engine.status import event_error
from rdmacli.errors import EXIT_OF, Cause, ExitCode, RdmacliError
from rdmacli.outcome import ConnOutcome, Outcome, State
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import CmEvent
from rdmacli.schema import SUMMARY_SCHEMA

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "rdmacli"


def test_every_error_in_the_code_is_created_with_a_cause():
    missing = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            is_error = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "RdmacliError"
            if is_error and not any(k.arg == "cause" for k in node.keywords):
                missing.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert missing == []


def test_an_error_without_a_cause_is_refused_and_exit_codes_follow_causes():
    with pytest.raises(TypeError, match="needs a cause"):
        RdmacliError("something")
    assert set(EXIT_OF) == set(Cause)  # every cause has its exit code
    for cause, code in EXIT_OF.items():
        err = RdmacliError("x", cause=cause)
        assert err.exit_code == code and err.to_dict()["cause"] == cause.value
    assert SUMMARY_SCHEMA["properties"]["error"]["properties"]["cause"]["enum"] == [c.value for c in Cause]


def ev(type_, status, data=b""):
    return CmEvent(type=type_, status=status, id=1, listen_id=0, t=0.0, private_data=data)


@pytest.mark.parametrize(
    "event,status,cause",
    [
        (C.REJECTED, 8, Cause.NOBODY_LISTENING),
        (C.UNREACHABLE, 1, Cause.NOBODY_LISTENING),  # UD: SIDR status 1
        (C.REJECTED, 28, Cause.REJECTED),
        (C.REJECTED, -111, Cause.REJECTED),
        (C.REJECTED, 10, Cause.REJECTED),
        (C.ADDR_ERROR, -110, Cause.ADDRESS),
        (C.ROUTE_ERROR, -19, Cause.ROUTE),
        (C.UNREACHABLE, -110, Cause.UNREACHABLE),
        (C.CONNECT_ERROR, -110, Cause.UNREACHABLE),
        (C.DEVICE_REMOVAL, 0, Cause.DEVICE_REMOVED),
    ],
)
def test_each_error_event_has_its_cause(event, status, cause):
    err = event_error(ev(event, status), step="s", local="a", remote="b", device="rxe0")
    assert err.cause == cause


def test_the_exit_status_of_a_run_reads_the_cause_not_the_words():
    listening = RdmacliError("reworded freely", cause=Cause.NOBODY_LISTENING)
    out = Outcome("connect", connections=[ConnOutcome(0, State.FAILED, error=listening)])
    assert out.exit_code == ExitCode.REJECTED and out.to_dict()["error"]["cause"] == "nobody_listening"
    served_nobody = Outcome("listen", connections=[ConnOutcome(0, State.REJECTED)])
    assert served_nobody.exit_code == 1 and served_nobody.to_dict()["error"]["cause"] == "all_rejected"


@pytest.mark.parametrize("message", ["as the engine words it", "reworded entirely"])
@pytest.mark.parametrize(
    "cause,kind",
    [
        (Cause.NOBODY_LISTENING, "nothing is listening"),
        (Cause.UNREACHABLE, "unreachable"),
        (Cause.DEADLINE, "timed out"),
        (Cause.REJECTED, "rejected"),
        (Cause.TRANSFER, "failed"),
    ],
)
def test_doctor_classifies_a_failed_connect_by_its_cause(monkeypatch, message, cause, kind):
    from rdmacli.diag import doctor

    err = RdmacliError(message, cause=cause)
    monkeypatch.setattr(doctor, "probe", lambda *a, **kw: (None, err))
    [check] = doctor.check_peer_connect("10.0.0.1", 7471, C.PS_TCP)
    assert check.verdict == "fail" and check.detail.startswith(kind + ":")
    assert check.to_dict()["cause"] == cause.value
