"""Other tools' letters, declared once: rping, ucmatose, udaddy, mckey, cmtime (v44, Debian's),
perftest and ping(8), each letter with what it is there, and each rdmacli command's twins (the
tools whose job it does). A letter the command typed does not take, or takes with another
meaning where click fails on it (a flag given a value, an option without its value), gets
rdmacli's pointer: the option that does that job here, or why there is none. `foreign_hint` is
what the CLI says; tests/unit/test_help_truth.py walks every twin letter of every command.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Letter:
    """`letter` of `tool`: `here` is the rdmacli option that does its job (said only where the
    command typed has it), `words` what to say: with `here`, what it is ("ping(8)'s -c COUNT");
    without, the whole pointer ("the server is the HOST argument")."""

    tool: str
    letter: str
    value: bool  # it takes a value there
    here: str | None
    words: str
    commands: frozenset[str] | None = None  # only on these commands (None: any twin of the tool)


def _rows(tool: str, *rows: tuple) -> list[Letter]:
    out = []
    for row in rows:
        letter, value, here, words, *only = row
        out.append(Letter(tool, letter, value, here, words, frozenset(only[0]) if only else None))
    return out


LETTERS: list[Letter] = [
    *_rows(
        "rping",
        ("-c", False, None, "the client is `rdmacli ping HOST` (rping's -c)", {"listen"}),
        ("-s", False, None, "`listen` is the server side already (rping's -s)", {"listen"}),
        ("-a", True, None, "the server is the HOST argument (rping's -a ADDR)", {"ping"}),
        ("-a", True, "--bind", "-b/--bind ADDR (rping -s's -a ADDR)", {"listen"}),
        ("-P", False, "--persistent", "--persistent (rping's -P); -P here is --port-space", {"listen"}),
        (
            "-P",
            False,
            None,
            "a persistent server is `rdmacli listen --ping --persistent` (rping's -P)",
            {"ping"},
        ),  # fmt: skip
        ("-v", False, "--verbose", "--verbose (rping's -v)"),
        (
            "-v",
            False,
            None,
            "the ping data is the client's to print (`rdmacli ping -v`, rping's -v)",
            {"listen"},
        ),  # fmt: skip
        ("-V", False, None, "validation is the client's (`rdmacli ping -V`, rping's -V)", {"listen"}),
        ("-d", False, "--events", "--events: every CM event as it comes (rping's -d debug)"),
        ("-t", True, None, "no TOS here: rping parses -t and sets nothing", {"ping"}),
        ("-q", False, None, "the QP is always rdmacli's own (rping's -q); -q here is --quiet"),
    ),
    *_rows(
        "ping(8)",
        ("-c", True, "--count", "-C/--count (ping(8)'s -c COUNT); rping's -c is `ping` itself"),
        (
            "-s",
            True,
            "--size",
            "-S/--size (ping(8)'s -s SIZE); rping's -s, the server, is `rdmacli listen --ping`",
            {"ping"},
        ),  # fmt: skip
        ("-s", True, "--size", "-S/--size (ping(8)'s -s)"),
        ("-w", True, "--timeout", "--timeout (ping(8)'s -w deadline)"),
        ("-W", True, "--idle-timeout", "--idle-timeout (ping(8)'s -W)"),
        ("-n", False, None, "addresses are printed as given, never looked up (ping(8)'s -n)"),
        ("-f", False, "--interval", "--interval 0: the next ping as soon as one returns (ping(8)'s -f)"),
        ("-t", True, None, "no TTL: an RDMA connection has no hop limit to set (ping(8)'s -t)"),
    ),
    *_rows(
        "ucmatose",
        (
            "-s",
            True,
            None,
            "the server is the HOST argument (ucmatose's, udaddy's and cmtime's -s SERVER)",
            {"connect", "events"},
        ),  # fmt: skip
        ("-s", True, None, "`listen` is the server side already (ucmatose's -s is the client's)", {"listen"}),
        ("-f", True, None, "the address's form is read from the address itself (ucmatose's -f FORMAT)"),
        ("-m", False, None, "no event channel migration (ucmatose's -m)"),
        ("-t", True, None, "TOS is the client's (`rdmacli connect -t`; ucmatose's -t)", {"listen"}),
    ),
    *_rows(
        "udaddy",
        (
            "-p",
            True,
            "--port-space",
            "-P/--port-space udp|ipoib (udaddy's -p is the port space); -p here is the port",
        ),  # fmt: skip
    ),
    *_rows(
        "mckey",
        ("-m", True, None, "the group is the GROUP argument (mckey's -m GROUP)"),
        ("-M", True, None, "an unmapped (AF_IB) group is not supported: give an IP group (mckey's -M)"),
        ("-s", False, "--send", "--send (mckey's -s)"),
        ("-p", True, "--port-space", "-P/--port-space (mckey's -p port space)"),
    ),
    *_rows(
        "cmtime",
        ("-r", True, None, "no retries: a failed step fails its connection with its cause (cmtime's -r)"),
        ("-t", True, "--connect-timeout", "--connect-timeout SECONDS (cmtime's -t timeout in ms)"),
    ),
    *_rows(
        "perftest",
        ("-d", True, "--bind", "-b/--bind ADDR: the device follows from the address (perftest's -d DEVICE)"),
        ("-i", True, None, "the port follows from the address (perftest's -i IB_PORT)"),
        ("-x", True, None, "the GID follows from the address (perftest's -x GID_INDEX)"),
        ("-s", True, "--size", "-S/--size (perftest's -s)"),
        ("-n", True, "--count", "-C/--count (perftest's -n)"),
        ("-b", False, "--bidir", "--bidir (perftest's -b); -b here is --bind ADDR"),
        ("-b", False, None, "latency is a ping-pong: both ways already (perftest's -b)", {"lat"}),
        ("-q", True, "--qps", "--qps (perftest's -q); -q here is --quiet"),
        ("-q", True, None, "latency runs one QP (perftest's -q); -q here is --quiet", {"lat"}),
        ("-D", True, "--duration", "--duration (perftest's -D)"),
        (
            "-D",
            True,
            "--count",
            "-C/--count: lat counts iterations (perftest's -D has no twin here)",
            {"lat"},
        ),  # fmt: skip
        ("-t", True, "--depth", "--depth (perftest's -t TX_DEPTH)"),
        ("-t", True, None, "latency keeps one message in flight (perftest's -t)", {"lat"}),
        (
            "-R",
            False,
            None,
            "rdmacli always connects through rdma_cm (perftest's -R); --perftest faces "
            "perftest's own -R peer",
        ),  # fmt: skip
        ("-F", False, None, "no CPU-frequency check to skip (perftest's -F)"),
        ("-c", True, None, "RC only (perftest's -c CONNECTION_TYPE)"),
        ("-m", True, None, "the path MTU is the port's active MTU (perftest's -m)"),
        ("-I", True, None, "inline sizes are the driver's (perftest's -I); -I here is --bind ADDR"),
        ("-e", False, "--busy-poll", "completions wait on their channel unless --busy-poll (perftest's -e)"),
        ("-u", True, None, "the ACK timeout is the CM's (perftest's -u)"),
        ("-r", True, "--depth", "--depth sets the receive queue's depth too (perftest's -r)"),
        ("-r", True, None, "the receive queue's depth is rdmacli's own (perftest's -r)"),
        ("-D", True, None, "the duration is the client's (`rdmacli bw -D`, perftest's -D)", {"listen"}),
        (
            "-t",
            True,
            None,
            "the queue depth is the client's (`rdmacli bw --depth`, perftest's -t)",
            {"listen"},
        ),  # fmt: skip
        ("-l", True, None, "one work request a post (perftest's -l post list)"),
        ("-a", False, "--all-sizes", "-a/--all-sizes (perftest's -a)"),
    ),
]

# the tools whose job each command does: their letters are the ones people type there
TWINS: dict[str, tuple[str, ...]] = {
    "connect": ("ucmatose", "udaddy"),
    "listen": ("ucmatose", "rping", "udaddy", "perftest"),
    "ping": ("rping", "ping(8)"),
    "bw": ("perftest",),
    "lat": ("perftest",),
    "mcast": ("mckey",),
    "events": ("cmtime",),
}
# every letter of each twin, as its getopt string has it (rdma-core v44, perftest 4.5, iputils)
TOOL_LETTERS: dict[str, str] = {
    "rping": "a:I:Pp:C:S:t:scvVdq",
    "ucmatose": "s:b:f:P:c:C:S:t:p:a:m",
    "udaddy": "s:b:c:C:S:t:p:P:f:",
    "mckey": "m:M:sb:c:C:S:p:ol",
    "cmtime": "s:b:c:p:r:t:",
    "perftest": "d:i:x:s:n:abq:D:t:RFc:m:I:eu:r:l:p:",
    "ping(8)": "c:i:s:w:W:nqft:I:",
}


def letters_of(tool: str) -> list[str]:
    spec = TOOL_LETTERS[tool]
    return [f"-{c}" for c in spec if c != ":"]


def foreign_hint(letter: str, command: str, own: set[str]) -> str | None:
    """What another tool's `letter` is on `command` (whose options are `own`), or None: the
    first row of the command's twins that fits, never one naming an option it lacks."""
    twins = TWINS.get(command) or ()
    fits = [row for row in LETTERS if row.letter == letter
            and (row.commands is None or command in row.commands)
            and (row.here is None or row.here in own)]  # fmt: skip
    # a twin's own row first (ucmatose's -s SERVER on connect, not ping(8)'s -s size), then the
    # rows every command that has their option may say
    mine = [row for row in fits if row.tool in twins or row.commands is not None]
    generic = [row for row in fits if row.commands is None and _generic(row)]
    return next((row.words for row in (*mine, *generic)), None)


def _generic(row: Letter) -> bool:
    """Rows every command that has their option may say (a count, a size, a deadline): people
    type ping(8)'s and perftest's letters everywhere."""
    return row.here in ("--count", "--size", "--timeout", "--idle-timeout", "--events", "--bind",
                        "--duration")  # fmt: skip
