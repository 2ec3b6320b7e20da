"""CM statuses decoded into words, advice and exit codes."""

from __future__ import annotations

from rdmacli.engine.status import describe_status, event_error, printable, short_status
from rdmacli.engine.timing import StepTimer
from rdmacli.errors import ExitCode
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import CmEvent


def ev(type_, status, data=b""):
    return CmEvent(type=type_, status=status, id=1, listen_id=0, t=0.0, private_data=data)


def test_reject_8_means_nobody_listens():
    err = event_error(ev(C.REJECTED, 8), step="cm connect", local="a:1", remote="b:7471", device="rxe0")
    assert err.exit_code == ExitCode.REJECTED
    assert "nothing is listening at b:7471" in err.message and "rdmacli listen" in err.hint
    assert err.details["reject_reason"] == {"code": 8, "name": "INVALID_SERVICE_ID"}


def test_reject_28_shows_the_peers_reason_as_text():
    err = event_error(
        ev(C.REJECTED, 28, b"too big\0\x01\x02" + bytes(40)),
        step="cm connect",
        local="a",
        remote="b",
        device=None,
    )
    assert "'too big'" in err.message and err.details["peer_reason"] == "too big"


def test_errno_statuses():
    err = event_error(ev(C.ADDR_ERROR, -110), step="resolve addr", local="a", remote="b", device=None)
    assert err.exit_code == ExitCode.RESOLVE and "ETIMEDOUT" in err.message and err.hint
    assert (
        event_error(ev(C.ROUTE_ERROR, -19), step="x", local="a", remote="b", device=None).details["errno"]
        == "ENODEV"
    )
    assert (
        event_error(ev(C.UNREACHABLE, -110), step="x", local="a", remote="b", device=None).exit_code
        == ExitCode.REJECTED
    )
    assert describe_status(C.ADDR_ERROR, -101)["errno"] == "ENETUNREACH"
    assert short_status(C.REJECTED, 28) == "28 CONSUMER_DEFINED"
    assert short_status(C.ESTABLISHED, 0) == "0"


def test_printable_drops_control_bytes():
    assert printable(b"a\x1bb\0rest") == "ab"


def test_step_timer_summary():
    t = StepTimer()
    t.start("resolve addr", 0, t=1.0)
    t.start("resolve addr", 1, t=1.5)
    t.end("resolve addr", 0, t=2.0)
    t.end("resolve addr", 1, t=4.0)
    (row,) = t.summary()
    assert row.count == 2 and row.total_us == 3e6
    assert row.min_us == 1e6 and row.max_us == 2.5e6
