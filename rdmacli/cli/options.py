"""Option bundles shared by several commands, as decorators (sqlite-utils style)."""

from __future__ import annotations

import functools

import click

from rdmacli.cli import complete
from rdmacli.cli.app import App, json_lines_option, json_option


def _compose(*decorators):
    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


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


def bind_option(help: str, *more_flags: str):
    return click.option(
        *more_flags, "-b", "--bind", "bind", metavar="ADDR", shell_complete=complete.rdma_addresses, help=help
    )


ack_timeout = click.option(
    "-a",
    "--ack-timeout",
    "ack_timeout",
    type=click.IntRange(0, 31),
    default=None,
    help="Local ACK timeout exponent: 4.096 µs × 2^N.",
)

port_space = click.option(
    "-P",
    "--port-space",
    "port_space",
    type=click.Choice(["tcp", "ib", "udp", "ipoib"]),
    default=None,
    help="RDMA CM port space  [default: tcp; udp with --ud].",
)

ud_flag = click.option(
    "--ud", is_flag=True, help="Unreliable datagrams, wire-compatible with udaddy (port 7174)."
)


def resolve_mode(*, ud: bool, port: int | None, port_space: str | None, rc_port: int) -> tuple:
    """Defaults that depend on --ud, and the port spaces each mode allows: (port, port_space)."""
    if port_space is None:
        port_space = "udp" if ud else "tcp"
    if ud and port_space not in ("udp", "ipoib"):
        raise click.BadParameter(
            f"{port_space} is not a datagram port space; use udp or ipoib", param_hint="-P"
        )
    if not ud and port_space not in ("tcp", "ib"):
        raise click.BadParameter(f"{port_space} needs --ud", param_hint="-P")
    return (port or (7174 if ud else rc_port)), port_space


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
    click.option(
        "--connect-timeout",
        "connect_timeout",
        type=click.FloatRange(0.1, 3600),
        default=10.0,
        show_default=True,
        metavar="SECONDS",
        help="Longest wait for the connection to be established (and to disconnect).",
    ),
    click.option(
        "--idle-timeout",
        "idle_timeout",
        type=click.FloatRange(0.1, 86400),
        default=10.0,
        show_default=True,
        metavar="SECONDS",
        help="Longest time without data progress on a connection.",
    ),
    click.option(
        "--timeout",
        "timeout",
        type=click.FloatRange(0.1, 10 * 86400),
        default=None,
        metavar="SECONDS",
        help="Deadline for the whole run (default: none).",
    ),
)

_output_options = _compose(
    click.option(
        "--events",
        "show_events",
        is_flag=True,
        help="Show every CM event as it arrives (a live table on a terminal).",
    ),
    json_option,
    json_lines_option,
    click.option("-q", "--quiet", is_flag=True, help="Print only errors and the summary."),
)

exchange = _compose(
    click.option(
        "-c",
        "--connections",
        type=click.IntRange(1, 1024),
        default=1,
        show_default=True,
        help="Number of connections.",
    ),
    click.option(
        "-C",
        "--count",
        type=click.IntRange(0, 1_000_000),
        default=10,
        show_default=True,
        help="Messages each way per connection.",
    ),
    click.option(
        "-S",
        "--size",
        type=click.IntRange(0, 64 * 1024 * 1024),
        default=100,
        show_default=True,
        help="Message size in bytes (0 sends nothing).",
    ),
)


def timeouts(f):
    """--resolve-timeout, --connect-timeout, --idle-timeout, --timeout -> `timeouts: Timeouts`."""

    @functools.wraps(f)
    def wrapper(*args, resolve_timeout, connect_timeout, idle_timeout, timeout, **kw):
        from rdmacli.engine.flow import Timeouts

        return f(*args, timeouts=Timeouts(resolve_timeout, connect_timeout, idle_timeout, timeout), **kw)

    return _timeout_options(wrapper)


def output(f):
    """--events, --json, --json-lines, -q -> `app: App` and `show_events: bool`."""

    @functools.wraps(f)
    def wrapper(*args, show_events, json_mode, json_lines, quiet, **kw):
        return f(
            *args,
            app=App(json_mode=json_mode, json_lines=json_lines, quiet=quiet),
            show_events=show_events,
            **kw,
        )

    return _output_options(wrapper)
