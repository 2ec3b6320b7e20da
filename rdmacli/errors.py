"""Exit codes and the error type every layer raises.

Shared by engine, cli and lab so that an error carries its exit code and its advice from where it
is known (deep down) to where it is printed (the cli), without either side importing the other.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the test ran and failed: loss, validation, threshold
    USAGE = 2
    ENVIRONMENT = 3  # no device, permissions, memlock, missing tools
    RESOLVE = 4  # address or route resolution failed
    REJECTED = 5  # rejected or unreachable
    TIMEOUT = 6  # our own deadline expired
    INTERRUPTED = 130


class Cause(str, Enum):
    """Why a run, a connection or a check failed: one enumeration, set where the error is born.

    The exit code, mesh blame, doctor's classification and the renderers read the cause; the
    message and the hint are for people and may be reworded freely. The value is what JSON
    carries in `error.cause`."""

    # the peer's answer, or its absence
    NOBODY_LISTENING = "nobody_listening"  # RC REJECTED reason 8, UD SIDR status 1
    REJECTED = "rejected"  # the peer's CM or application refused (reason in the error)
    UNREACHABLE = "unreachable"  # UNREACHABLE / CONNECT_ERROR: no answer to the CM request
    ADDRESS = "address_error"  # ADDR_ERROR, or an address that does not resolve
    ROUTE = "route_error"  # ROUTE_ERROR
    DEADLINE = "deadline"  # rdmacli's own deadline expired
    PEER_PROTOCOL = "peer_protocol_violation"  # out of turn, malformed, out of bounds
    INCONSISTENT = "inconsistent_reports"  # mesh: a node whose figures contradict its partners'
    UNEXPECTED_EVENT = "unexpected_cm_event"  # a CM event the lifecycle table has not for the phase
    PEER_ENDED = "peer_ended_early"  # the peer disconnected before the exchange was done
    TRANSFER = "transfer_failed"  # a work completion failed (RETRY_EXC, REM_ACCESS, ...)
    DATA_MISMATCH = "data_mismatch"  # rping -V: the data written back differs
    LOSS = "datagram_loss"  # UD: datagrams that never came
    UNANSWERED = "unanswered"  # ping(8): no ping answered, or fewer than -C by the deadline
    ALL_REJECTED = "all_rejected"  # a server of ours refused every client
    # what the NIC's counters say moved while the test was slow or failed (diag.counters)
    PACKET_LOSS = "packet_loss"  # retransmits, sequence errors, ACK timeouts
    RNR = "receiver_not_ready"  # RNR NAKs: the receiver had no receive posted
    LINK_ERRORS = "link_errors"  # link downed, symbol errors, port receive/transmit errors
    # this host
    LOCAL_PORT_DOWN = "local_port_down"  # the local port or its netdev went down
    LOCAL_ADDRESS_GONE = "local_address_gone"  # the local address or its GID vanished
    DEVICE_REMOVED = "device_removed"
    MEMLOCK = "memlock"  # RLIMIT_MEMLOCK refused a registration or a queue
    DEVICE_LIMIT = "device_limit"  # a queue or size above what the device holds
    PORT_IN_USE = "port_in_use"  # another listener (another run, another server) holds the port
    ENVIRONMENT = "environment"  # no device, permissions, libraries, tools
    CALL_FAILED = "call_failed"  # a librdmacm/verbs call failed with an errno
    # rdmacli itself and its checks
    USAGE = "usage"
    CHECK_FAILED = "check_failed"  # doctor, selftest: a check that did not pass
    INTERNAL = "internal"  # a bug in rdmacli
    # the mesh
    AGENT = "agent"  # a node's agent did not run, died, or missed its slot
    MISSING = "missing"  # neither end reported a pair
    SILENT = "silent_end"  # one end reported a pair, the other never did
    OVERRUN = "slot_overrun"  # a pair still running when its slot ended: torn down there
    SLOW = "slow"  # passed, but slower than the fabric's best comparable pair by --slow-factor


EXIT_OF: dict[Cause, ExitCode] = {
    Cause.NOBODY_LISTENING: ExitCode.REJECTED,
    Cause.REJECTED: ExitCode.REJECTED,
    Cause.UNREACHABLE: ExitCode.REJECTED,
    Cause.ADDRESS: ExitCode.RESOLVE,
    Cause.ROUTE: ExitCode.RESOLVE,
    Cause.DEADLINE: ExitCode.TIMEOUT,
    Cause.PEER_PROTOCOL: ExitCode.FAILED,
    Cause.INCONSISTENT: ExitCode.FAILED,
    Cause.UNEXPECTED_EVENT: ExitCode.FAILED,
    Cause.PEER_ENDED: ExitCode.FAILED,
    Cause.TRANSFER: ExitCode.FAILED,
    Cause.DATA_MISMATCH: ExitCode.FAILED,
    Cause.LOSS: ExitCode.FAILED,
    Cause.UNANSWERED: ExitCode.FAILED,
    Cause.ALL_REJECTED: ExitCode.FAILED,
    Cause.PACKET_LOSS: ExitCode.FAILED,
    Cause.RNR: ExitCode.FAILED,
    Cause.LINK_ERRORS: ExitCode.FAILED,
    Cause.LOCAL_PORT_DOWN: ExitCode.ENVIRONMENT,
    Cause.LOCAL_ADDRESS_GONE: ExitCode.ENVIRONMENT,
    Cause.DEVICE_REMOVED: ExitCode.ENVIRONMENT,
    Cause.MEMLOCK: ExitCode.ENVIRONMENT,
    Cause.DEVICE_LIMIT: ExitCode.ENVIRONMENT,
    Cause.PORT_IN_USE: ExitCode.ENVIRONMENT,
    Cause.ENVIRONMENT: ExitCode.ENVIRONMENT,
    Cause.CALL_FAILED: ExitCode.FAILED,
    Cause.USAGE: ExitCode.USAGE,
    Cause.CHECK_FAILED: ExitCode.FAILED,
    Cause.INTERNAL: ExitCode.FAILED,
    Cause.AGENT: ExitCode.ENVIRONMENT,
    Cause.MISSING: ExitCode.TIMEOUT,
    Cause.SILENT: ExitCode.TIMEOUT,
    Cause.SLOW: ExitCode.FAILED,
    Cause.OVERRUN: ExitCode.TIMEOUT,
}


class RdmacliError(Exception):
    """An error with a cause (data), words for people and one line of advice. The exit code
    follows from the cause. Subclasses name a default cause; the base class needs one."""

    cause: Cause | None = None

    def __init__(
        self,
        message: str,
        *,
        cause: Cause | None = None,
        hint: str | None = None,
        details: dict | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.hint = hint
        cause = cause or type(self).cause
        if cause is None:
            raise TypeError(f"{type(self).__name__} needs a cause: {message!r}")
        self.cause = Cause(cause)
        self.details = details or {}

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_OF[self.cause]

    def to_dict(self) -> dict:
        d = {
            "message": self.message,
            "hint": self.hint,
            "exit_code": int(self.exit_code),
            "cause": self.cause.value,
        }
        d.update(self.details)
        return d


def internal_error(exc: BaseException) -> RdmacliError:
    """A bug in rdmacli, in words: the run still ends with its summary, never a traceback."""
    return RdmacliError(
        f"internal error: {type(exc).__name__}: {exc}",
        hint="rerun with RDMACLI_DEBUG=1 for the traceback, and please report it",
        cause=Cause.INTERNAL,
    )


class EnvironmentProblem(RdmacliError):
    cause = Cause.ENVIRONMENT


class UsageProblem(RdmacliError):
    cause = Cause.USAGE


class Stopped(BaseException):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) arrived: tear down, summarise, exit 128+signal.

    A BaseException, like KeyboardInterrupt, so no `except Exception` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
