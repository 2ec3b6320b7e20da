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
    TRANSPORT = "transport_unsupported"  # the device's transport has not what the test needs (iWARP: no UD)
    CALL_FAILED = "call_failed"  # a librdmacm/verbs call failed with an errno
    # rdmacli itself and its checks
    USAGE = "usage"
    CHECK_FAILED = "check_failed"  # doctor, selftest: a check that did not pass
    INTERNAL = "internal"  # a bug in rdmacli
    # the mesh
    AGENT = "agent"  # a node's agent did not run, died, or missed its slot
    LAUNCHER = "launcher"  # the launcher (srun, ssh, a gateway) failed before any agent ran
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
    Cause.TRANSPORT: ExitCode.ENVIRONMENT,
    Cause.CALL_FAILED: ExitCode.FAILED,
    Cause.USAGE: ExitCode.USAGE,
    Cause.CHECK_FAILED: ExitCode.FAILED,
    Cause.INTERNAL: ExitCode.FAILED,
    Cause.AGENT: ExitCode.ENVIRONMENT,
    Cause.LAUNCHER: ExitCode.ENVIRONMENT,
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
        self.cause: Cause = Cause(cause)
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


# The locked-memory limit, one hint wherever it is met (a registration refused, a queue, doctor)
MEMLOCK_HINT = (
    "raise the locked-memory limit (`ulimit -l unlimited`; memlock in /etc/security/limits.conf, "
    "then log in again; LimitMEMLOCK=infinity for a service; `--ulimit memlock=-1` for a container)"
)


# One condition, one message and one hint, whichever command meets it (devices, doctor, selftest
# and the test commands said "no RDMA device" four ways): the words lead, what saw it follows in
# parentheses (a sysfs path, a C call and its errno: what a reader searches for).
NO_DEVICE = "no RDMA device on this host"
NO_DEVICE_HINT = (
    "load the NIC's RDMA driver, or create a Soft-RoCE device: `modprobe rdma_rxe; rdma link add "
    "rxe0 type rxe netdev IFACE`; without RDMA hardware: `rdmacli lab run -- COMMAND`"
)
SYSFS_EMPTY = "/sys/class/infiniband is empty"


def no_device(seen: str = SYSFS_EMPTY) -> EnvironmentProblem:
    """The error of a host with no RDMA device, `seen` saying what saw it."""
    return EnvironmentProblem(f"{NO_DEVICE} ({seen})", hint=NO_DEVICE_HINT)


class UsageProblem(RdmacliError):
    cause = Cause.USAGE


class Stopped(BaseException):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) arrived: tear down, summarise, exit 128+signal.

    A BaseException, like KeyboardInterrupt, so no `except Exception` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# What each cause means and what to do about it, for people: docs/troubleshooting.md is generated
# from this table (scripts/gendocs.py) and a unit test holds it to the enumeration. The advice an
# error carries at run time is more precise (it names the device, address and option); this is
# the cause's general answer.
CAUSES: dict[Cause, tuple[str, str]] = {
    Cause.NOBODY_LISTENING: (
        "The peer's CM answered that nothing listens on that port in that port space (IB CM "
        "REJECTED reason 8, or SIDR status 1 for UD).",
        "Start the server first, or give the client `--wait SECONDS` to ask again until it is "
        "there; check the port (`-p`) and the port space (`-P tcp|ib`, `--ud`) on both sides.",
    ),
    Cause.REJECTED: (
        "The peer's CM or its application refused the connection; the reason is in "
        "`reject_reason` (and `peer_reason` when an rdmacli server said why).",
        "Read the server's reason: a request beyond its `--max-size`, `--max-clients` or "
        "`--max-pinned`, a server that is full or stopping, or a stale mesh round.",
    ),
    Cause.UNREACHABLE: (
        "No answer to the connection request (UNREACHABLE or CONNECT_ERROR): the request or its "
        "reply was lost on the way.",
        "Check the path: `rdmacli doctor PEER`, the port state on both ends, the switch, and for "
        "RoCE the GID and VLAN; a firewall dropping UDP 4791 looks like this.",
    ),
    Cause.ADDRESS: (
        "Address resolution failed (ADDR_ERROR), or a name did not resolve to an address.",
        "Use an address on an RDMA netdev (`rdmacli devices` lists them); check the name, the "
        "route to it, and `-b`/`-I` for the source address.",
    ),
    Cause.ROUTE: (
        "Route resolution failed (ROUTE_ERROR): no path record or neighbour for the peer.",
        "Check the subnet manager (InfiniBand) or the neighbour entry and VLAN (RoCE); "
        "`rdmacli doctor PEER` looks at the path.",
    ),
    Cause.DEADLINE: (
        "rdmacli's own deadline expired; the error names the step and the option that bounded it.",
        "Raise the option the message names (`--connect-timeout`, `--idle-timeout`, `--timeout`, "
        "`--wait`), or find why the peer is slow: the counters in the summary often say.",
    ),
    Cause.PEER_PROTOCOL: (
        "The peer sent something out of turn, malformed or out of bounds (a figure no hardware "
        "can measure, a rate above this port's line rate).",
        "The peer is at fault, not this host: check that it runs the protocol you think "
        "(`--perftest`, `--ud`, the C tool's version) and the same options.",
    ),
    Cause.INCONSISTENT: (
        "`mesh`: every pair passed, but a node's figures contradict its partners' ports or the "
        "fabric's; its claims were set aside.",
        "Look at the node named in `data.nodes[].contradicted`: its agent, its clock, its rdmacli version.",
    ),
    Cause.UNEXPECTED_EVENT: (
        "A CM event that the rdma_cm(7) sequence does not have in that phase (named in `event` and `step`).",
        "Usually the peer's doing (a disconnect or a reject at an odd time); if it repeats "
        "against a well-behaved peer, please report it with `--json-lines`.",
    ),
    Cause.PEER_ENDED: (
        "The peer disconnected before the exchange was done.",
        "Check the peer's side: it may have been given a smaller count, hit its own deadline or "
        "been stopped.",
    ),
    Cause.TRANSFER: (
        "A work completion failed (RETRY_EXC, REM_ACCESS, ...): the NIC could not deliver.",
        "Retries exhausted means the peer stopped answering (it died, or the link did); access "
        "errors mean a protocol mismatch. The counters in the summary tell which.",
    ),
    Cause.DATA_MISMATCH: (
        "rping's validation (`-V`) found data written back that differs from what was sent.",
        "Data corruption on the path or in the peer: check the peer's version, then the NICs "
        "and the link (symbol errors).",
    ),
    Cause.LOSS: (
        "UD datagrams that never came back.",
        "Datagrams are unreliable: check the receiver's posted receives and the path's loss; "
        "the port counters in the summary show where.",
    ),
    Cause.UNANSWERED: (
        "`ping`, `lat`: stopped (deadline or signal) with no answer, or with fewer answers than "
        "`-C` at the deadline.",
        "The connection came up but pings were not answered: check the server and the path; "
        "raise `--timeout` for a slow fabric.",
    ),
    Cause.ALL_REJECTED: (
        "A server of ours refused every client it saw.",
        "Read each rejection's reason in the summary: clients asking for more than the server's "
        "bounds, or for another protocol.",
    ),
    Cause.PACKET_LOSS: (
        "The test was slow or failed while the port's retransmit, sequence-error or ACK-timeout "
        "counters moved: packets were lost on the way.",
        "Check the cable and optics, the switch port's error counters, and for RoCE the "
        "lossless configuration (PFC, ECN).",
    ),
    Cause.RNR: (
        "The test failed while receiver-not-ready NAKs were counted: a receiver had no receive posted.",
        "The receiving application is too slow to post receives: a peer's bug or overload.",
    ),
    Cause.LINK_ERRORS: (
        "The test failed while link errors were counted (link downed, symbol errors, port "
        "receive or transmit errors).",
        "Check the cable, the optics and the switch port; `rdmacli devices` shows the port's state.",
    ),
    Cause.LOCAL_PORT_DOWN: (
        "This host's RDMA port or its netdev went down during the run.",
        "Bring the netdev up (`ip link set DEV up`) and check the cable; `rdmacli devices`.",
    ),
    Cause.LOCAL_ADDRESS_GONE: (
        "This host's address, or the GID made from it, vanished during the run.",
        "Check what changed the address (NetworkManager, DHCP); `rdmacli devices` lists the GIDs.",
    ),
    Cause.DEVICE_REMOVED: (
        "The RDMA device was removed during the run (a driver reload, a reset).",
        "Wait for the device to come back and run again; check `dmesg` for why it went.",
    ),
    Cause.MEMLOCK: (
        "The locked-memory limit (RLIMIT_MEMLOCK) refused a registration or a queue.",
        MEMLOCK_HINT[0].upper() + MEMLOCK_HINT[1:] + "; or ask for smaller messages or fewer connections.",
    ),
    Cause.DEVICE_LIMIT: (
        "A queue or size above what the device holds (`max_qp_wr`, `max_cqe`, ...).",
        "Lower `--depth`, `-C` or `-c` below the device's limit, which the message names.",
    ),
    Cause.PORT_IN_USE: (
        "Another listener holds the port (another run, another server).",
        "Stop it or choose another port (`-p`); `holders` names it where `rdma resource show` can see it.",
    ),
    Cause.TRANSPORT: (
        "The device's transport has not what the test needs: iWARP has no datagrams (UD), no "
        "multicast and no immediate data.",
        "Run a connected test there (`connect`, `ping`, one-way `bw`, `lat --op send`; `mesh --test "
        "ping`); the Transports page of the docs lists what each transport has.",
    ),
    Cause.ENVIRONMENT: (
        "This host cannot run the test: no RDMA device, permissions, missing libraries or "
        "tools, a launcher that could not start.",
        "Run `rdmacli doctor`: it checks devices, ports, addresses, memlock and the libraries, "
        "with what to change.",
    ),
    Cause.CALL_FAILED: (
        "A librdmacm or verbs call failed with an errno (named in `call`).",
        "The errno says why; `rdmacli doctor` checks the usual suspects.",
    ),
    Cause.USAGE: (
        "A bad option or value (also a UD size above the active MTU).",
        "The message names the option; `rdmacli COMMAND --help` lists them, with examples.",
    ),
    Cause.CHECK_FAILED: (
        "A check of `doctor` or `selftest`, or pairs of `mesh`, failed.",
        "Each failed check or pair is listed with its own cause and advice.",
    ),
    Cause.INTERNAL: (
        "A bug in rdmacli.",
        "Run again with `RDMACLI_DEBUG=1` for the traceback, and please report it.",
    ),
    Cause.AGENT: (
        "`mesh`: a node's agent did not run, died, or missed its slot.",
        "Run `rdmacli mesh-agent` on that node by hand (its man page shows how), check that "
        "rdmacli is installed there and the launcher (ssh, srun) reaches it.",
    ),
    Cause.LAUNCHER: (
        "`mesh`, `watch status`: the launcher (srun, ssh, a ClusterShell gateway) failed before "
        "any agent ran; its own words are in the message.",
        "Read the launcher's words: srun outside an allocation or without a Slurm configuration, "
        "ssh without keys or with unknown host names, a gateway without ClusterShell. Try the "
        "launcher alone (`srun hostname`, `ssh NODE true`).",
    ),
    Cause.MISSING: (
        "`mesh`: neither end reported a pair.",
        "Both agents were silent for that pair: look at their nodes' agent errors.",
    ),
    Cause.SILENT: (
        "`mesh`: one end reported a pair, the other never did.",
        "The silent end's agent died or was stopped: its node's record says more.",
    ),
    Cause.OVERRUN: (
        "`mesh`: a pair was still running when its slot ended and was torn down there (`step` "
        "names where it was).",
        "Raise `--round-time` to what the warning suggests; a pair that overruns alone points at its nodes.",
    ),
    Cause.SLOW: (
        "`mesh`: every pair passed, but some stayed slower than the fabric's best comparable "
        "pair after their re-test.",
        "Look at the slow pairs' nodes and NICs (the blame names them); `--slow-factor` and "
        "`--slow-fraction` set what counts as slow.",
    ),
}
