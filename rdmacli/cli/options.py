"""Option bundles shared by several commands, as decorators (sqlite-utils style)."""

from __future__ import annotations

import functools
import re

import click

from rdmacli.cli import complete
from rdmacli.cli.app import reported
from rdmacli.cli.values import SIZE_UNITS, Finite, Size, Whole, out_of_range  # noqa: F401 - the CLI's value types
from rdmacli.protocols.hello import MAX_COUNT
from rdmacli.protocols.table import CONNECT, PROTOCOLS, UD, Spec, modes

node_option = click.option(
    "--node", metavar="NAME", help="This node's name among the nodes (default: the host name)."
)


def seconds_option(*decls: str, low: float, high: float, default: float | None, help: str,
                   min_open: bool = False):  # fmt: skip
    """An option of seconds between `low` and `high` (Finite: never NaN), its default shown."""
    return click.option(*decls, type=Finite(low, high, min_open=min_open), default=default,
                        show_default=default is not None, metavar="SECONDS", help=help)  # fmt: skip


def _compose(*decorators):
    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def given(ctx: click.Context, name: str) -> bool:
    """Whether the user gave this option (command line or environment), not its default."""
    from click.core import ParameterSource

    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)


def port_option(help: str, default: int | None = None):
    return click.option(
        "-p",
        "--port",
        type=click.IntRange(1, 65535),
        default=default,
        show_default=default is not None,
        shell_complete=complete.ports,
        help=help,
    )


class Address(click.ParamType):
    """A host name or an IP literal; a malformed literal (300.1.1.1, fd77:::1) is a usage
    error here, before anything touches RDMA. Names are resolved later (exit 4 if they fail)."""

    name = "ADDR"

    def __init__(self, multicast: bool = False):
        self.multicast = multicast

    def convert(self, value, param, ctx):
        import ipaddress

        if value is None or isinstance(value, ipaddress._BaseAddress):
            return value
        text = str(value)
        if text.isdigit():  # `bw -q 4 HOST`: a value given to a flag lands here
            self.fail(f"{text!r} is not an address (is it the value of an option before it that takes "
                      f"none?{_flag_words(ctx)})", param, ctx)  # fmt: skip
        looks_literal = ":" in text or re.fullmatch(r"[0-9.]+", text) is not None
        if not looks_literal and not self.multicast:
            if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})", text):
                self.fail(f"{text!r} is neither an IP address nor a host name", param, ctx)
            return text
        try:
            ip = ipaddress.ip_address(text.split("%")[0])
        except ValueError:
            self.fail(f"{text!r} is not a valid IPv4 or IPv6 address", param, ctx)
        if self.multicast and not ip.is_multicast:
            self.fail(
                f"{text} is not a multicast address (IPv4 224.0.0.0/4, IPv6 ff00::/8; e.g. 239.1.1.1)",
                param,
                ctx,
            )
        return text

    def shell_complete(self, ctx, param, incomplete):
        return complete.multicast_groups(ctx, param, incomplete) if self.multicast else []


def _flag_words(ctx: click.Context | None) -> str:
    """perftest's -q (QPs) is the flag people give a number to; here -q is --quiet."""
    own = {o for p in ctx.command.params for o in getattr(p, "opts", [])} if ctx else set()
    return " -q here is --quiet; perftest's -q is --qps" if "--qps" in own and "-q" in own else ""


ADDRESS = Address()
GROUP = Address(multicast=True)


def host_argument(name: str = "host", required: bool = True):
    return click.argument(name, type=ADDRESS, required=required, shell_complete=complete.hosts)


def bind_option(help: str):
    """-b (ucmatose's, udaddy's, mckey's) and -I (rping's, perftest's) on every command."""
    return click.option(
        "-I",
        "-b",
        "--bind",
        "bind",
        type=ADDRESS,
        metavar="ADDR",
        shell_complete=complete.rdma_addresses,
        help=help,
    )


ack_timeout = click.option(
    "-a",
    "--ack-timeout",
    "ack_timeout",
    type=click.IntRange(0, 31),
    default=None,
    help="Local ACK timeout exponent: 4.096 µs × 2^N.",
)


def port_space_option(spaces: list[str], help: str):
    return click.option(
        "-P", "--port-space", "port_space", type=click.Choice(spaces), default=None, help=help
    )


port_space = port_space_option(
    list(dict.fromkeys(ps for s in PROTOCOLS.values() for ps in s.port_spaces)),
    "RDMA CM port space  [default: tcp; udp with --ud].",
)

ud_flag = click.option("--ud", is_flag=True, help=UD.serves_words())


def mode_flags(f):
    """`listen`'s protocol flags, a row's each (table.modes()): NAME_mode, one at most given."""
    for spec in reversed(modes()):
        f = click.option(f"--{spec.name}", f"{spec.name}_mode", is_flag=True, help=spec.serves_words())(f)
    return f


def wait_option(help: str):
    return click.option(
        "--wait", "wait_s", type=Finite(0.1, 10 * 86400), default=None, metavar="SECONDS", help=help
    )


wait_for_peer = wait_option(
    "Give up if no peer has started within SECONDS (default: wait until --timeout or Ctrl-C; "
    "the idle deadline starts with the first data)."
)
wait_for_server = wait_option(
    "Wait up to SECONDS for a server that is not listening yet, asking again every 0.5 s "
    "(default: fail at once, like the C tools)."
)


def resolve_mode(spec: Spec, *, port: int | None, port_space: str | None) -> tuple[int | None, str]:
    """A protocol's port and port space: the user's, checked against the protocol, or its defaults."""
    ctx = click.get_current_context()
    if not given(ctx, "port_space"):
        port_space = spec.default_port_space
    if port_space not in spec.port_spaces:
        need = "--ud" if "udp" in port_space or port_space == "ipoib" else "no --ud"
        raise click.BadParameter(
            f"{port_space} is not a port space of {spec.name} ({', '.join(spec.port_spaces)}; {need})",
            param_hint="-P",
        )
    return (port if given(ctx, "port") else spec.default_port), port_space


def mode_size(ctx: click.Context, spec: Spec, size: int) -> int:
    """-S as given, else the protocol's own default (rping's 64, ucmatose's 100); checked."""
    if not given(ctx, "size"):
        return spec.default_size
    problem = spec.check_size(size)
    if problem:
        raise click.BadParameter(problem, param_hint="-S")
    return size


_timeout_options = _compose(
    click.option(
        "--resolve-timeout",
        "resolve_timeout",
        type=click.IntRange(1, 600_000),
        default=2000,
        show_default=True,
        metavar="MS",
        help="Address and route resolution timeout (as the C tools: 2000 ms).",
    ),
    seconds_option(
        "--connect-timeout",
        "connect_timeout",
        low=0.1,
        high=3600,
        default=10.0,
        help="Longest wait for the connection to be established (and to disconnect).",
    ),
    seconds_option(
        "--idle-timeout",
        "idle_timeout",
        low=0.1,
        high=86400,
        default=10.0,
        help="Longest time without data progress on a connection.",
    ),
    seconds_option(
        "--timeout",
        "timeout",
        low=0.1,
        high=10 * 86400,
        default=None,
        help="Deadline for the whole run (default: none).",
    ),
)

_event_options = _compose(
    click.option(
        "--events",
        "show_events",
        is_flag=True,
        help="Show every CM event as it arrives (a live table on a terminal).",
    ),
    click.option(
        "--steps",
        is_flag=True,
        help="Add cmtime's step timing table to the summary (with --events too; JSON always has it).",
    ),
)


def count_option(help: str, *, low: int = 1, high: int = 100_000_000, default: int | None = None, **kw):
    """-C/--count, the same letter everywhere (rping's, ucmatose's -C): how many messages,
    pings, iterations or datagrams."""
    return click.option("-C", "--count", type=click.IntRange(low, high), default=default,
                        show_default=default is not None, help=help, **kw)  # fmt: skip


def size_option(help: str, low: int, high: int, default: int, **kw):
    """-S/--size in bytes, with suffixes (64K, 1M, 1MiB) and the bounds enforced shown."""
    from rdmacli.units import bytes_words

    # the default as words ("100 B", "64 KiB"): --help shows every size in one style; Size parses it
    return click.option("-S", "--size", type=Size(low, high), default=bytes_words(default),
                        show_default=True, help=help, **kw)  # fmt: skip


def connections_option(help: str, *, high: int = 1024, name: str = "connections"):
    """-c/--connections (ucmatose's and mckey's -c): how many connections or QPs."""
    return click.option("-c", "--connections", name, type=click.IntRange(1, high), default=1,
                        show_default=True, help=help)  # fmt: skip


exchange = _compose(
    connections_option("Number of connections."),
    count_option("Messages each way per connection.", low=0, high=MAX_COUNT, default=CONNECT.default_count),
    size_option("Message size in bytes (0 sends nothing).", 0, CONNECT.max_size, CONNECT.default_size),
)


def _cli_words():
    from rdmacli.engine.settings import DeadlineWords

    return DeadlineWords(
        overall="the overall --timeout",
        wait="--wait {s:g} s",
        more_time="raise --timeout",
        wait_longer="--wait, or none to wait until --timeout or Ctrl-C",
    )


def timeouts(f):
    """--resolve-timeout, --connect-timeout, --idle-timeout, --timeout -> `timeouts: Timeouts`."""

    @functools.wraps(f)
    def wrapper(*args, resolve_timeout, connect_timeout, idle_timeout, timeout, **kw):
        from rdmacli.engine.settings import Timeouts

        t = Timeouts(resolve_timeout, connect_timeout, idle_timeout, timeout, kw.pop("wait_s", None),
                     words=_cli_words())  # fmt: skip
        return f(*args, timeouts=t, **kw)

    return _timeout_options(wrapper)


def server_of(spec: Spec, bind_help: str = "Source address."):
    """HOST, -p (the protocol's port by default) and -b: where a client command connects from and to."""
    return _compose(
        host_argument(),
        port_option("RDMA CM port of the server.", default=spec.default_port),
        bind_option(bind_help),
    )


def client_run(f):
    """The tail of every client command: --wait for a server not up yet, the deadlines, the output."""
    return wait_for_server(timeouts(output(f)))


def server_run(f):
    """The tail of every command that waits for peers: --wait for the first, the deadlines, the output."""
    return wait_for_peer(timeouts(output(f)))


def perftest_client(binaries: str, duration: bool):
    """`--perftest` on a client command: face perftest's own server with its exchange. `duration`:
    the command has -D/--duration (bw), so perftest's -D has a twin here (lat has none)."""
    ours, theirs = ("-S, -C or -D", "-s, -n or -D") if duration else ("-S or -C", "-s or -n")
    return click.option(
        "--perftest",
        is_flag=True,
        help=f"Face perftest's server ({binaries}, run with -R) with perftest's own exchange instead "
        f"of rdmacli's: give {ours} as perftest's server was given {theirs} (perftest exchanges "
        "none of them); --wait defaults to 5 s (its test QP listens after the first hand shake).",
    )


def all_sizes_option(*names: str, duration: bool = False):
    """perftest's -a on bw and lat (`listen --perftest` takes the long name only: -a is
    --ack-timeout there). `duration`: the command has -D/--duration, which -a excludes."""
    return click.option(
        *names,
        "all_sizes",
        is_flag=True,
        help="Every power of two from 2 bytes to 8 MiB in turn, -C messages each (perftest's -a), "
        "instead of -S; one table by size. rdmacli's own exchange runs one connection per size "
        "(those its server takes: lat 8 B to 1 MiB), perftest's (--perftest, both sides given -a) "
        "all of them on one QP." + (" Not with -D." if duration else ""),
    )


PERFTEST_WAIT_S = 5.0  # a perftest server's test QP listens only after the first hand shake


def busy_poll_option(default: bool):
    """One flag pair on every command: --busy-poll spins on the CQ, --no-busy-poll sleeps on
    completion events. bw and lat spin by default, as perftest does (a wake-up per completion
    is what they would measure); the others sleep."""
    return click.option(
        "--busy-poll/--no-busy-poll",
        "busy_poll",
        default=default,
        show_default=True,
        help="Spin on the CQ instead of sleeping on completion events.",
    )


busy_poll = busy_poll_option(False)
spin_by_default = busy_poll_option(True)


def output(f):
    """--events, --steps, and the output options (cli.app.reported) -> `app: App` and `show_events`."""

    @functools.wraps(f)
    def wrapper(*args, show_events, steps, app, **kw):
        if show_events and app.machine:
            raise click.UsageError(
                "--events draws the CM events for people; with --json-lines they are records "
                "already (type cm_event), and --json has the step timings"
            )
        app.steps = steps or show_events
        return f(*args, app=app, show_events=show_events, **kw)

    return _event_options(reported(wrapper))


def _max_drain(ctx, param, value):
    from rdmacli.sched.drain import cap_of

    try:
        cap_of(value, 1)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    return value


def slurm_drain_options(prefix: str):
    """--slurm-drain, --max-drain and --dry-run: the fleet's verdict acted on in Slurm, said
    once for mesh and watch status (sched/drain.py; `prefix` starts this front-end's reasons)."""
    from rdmacli.sched.drain import DEFAULT_CAP, MAX_DRAIN_WORDS

    return _compose(
        click.option(
            "--slurm-drain",
            is_flag=True,
            help=f"Drain in Slurm each node the verdict blames, or any of its NICs (reason '{prefix} ...'), "
            "and resume the ones so drained that it clears (one still in a pair both ends name stays "
            "drained, said why; a pair one end names alone holds nobody); a drain with another reason is "
            "never touched.",
        ),
        click.option(
            "--max-drain",
            default=DEFAULT_CAP,
            show_default=True,
            metavar="N|P%",
            callback=_max_drain,
            help=f"With --slurm-drain: drain none when more nodes than this would be ({MAX_DRAIN_WORDS}): "
            "a fault that wide is the fabric's or a switch's.",
        ),
        click.option("--dry-run", is_flag=True, help="With --slurm-drain: say the scontrol lines, run none."),
    )


def act_on_verdict(outcome, blame, ran: list[str], nodes: int, prefix: str, max_drain: str,
                   dry_run: bool) -> None:  # fmt: skip
    """--slurm-drain after a run: data.slurm in the summary, and its words among the warnings
    (a drain that failed, one over the cap, each node drained or resumed). `blame`: the verdict's
    (mesh.findings.Blame or mesh.watchfindings.StatusBlame), None when the run reached none."""
    from rdmacli.sched import drain

    if blame is None:
        outcome.warnings.append("--slurm-drain: no verdict to act on: nothing drained or resumed")
        return
    p = drain.plan(blame, ran, prefix)
    done = drain.apply(p, drain.cap_of(max_drain, max(nodes, 1)), dry_run=dry_run)
    outcome.data["slurm"] = done.to_dict()
    outcome.warnings += done.words
