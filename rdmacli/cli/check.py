"""`rdmacli check`: this node's RDMA health in seconds, for Slurm's HealthCheckProgram, NHC and
node-problem-detector (diag/health.py, diag/baseline.py, watch/word.py; render/health.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from rdmacli.cli import HELP, options
from rdmacli.cli.app import App, file_option, params_of
from rdmacli.cli.values import Finite

FORMATS = ("text", "json", "nhc", "npd", "line")
DEADLINE_S = 10.0
if TYPE_CHECKING:
    from rdmacli.diag.doctor import Check

MAX_PARTNERS = 16  # --partners: a few, asked one after another within the deadline
REACH_MARGIN_S = 1.0  # of the deadline, left after the partners' probes: the verdict and its output
DEADLINE_MAX_S = 50.0  # under Slurm's 60 s kill of a HealthCheckProgram
CONFIGS = {"nhc": "rdmacli.nhc", "npd": "npd-rdmacli.json"}  # rdmacli/diag/schedulers/


def config_text(name: str) -> str:
    """A shipped scheduler config with this install's rdmacli in it (RDMACLI in the file)."""
    import json
    import os
    import shlex

    from rdmacli import diag
    from rdmacli.watch.install import program_words

    with open(os.path.join(os.path.dirname(diag.__file__), "schedulers", CONFIGS[name])) as f:
        text = f.read()
    words = program_words()
    if name == "nhc":
        return text.replace("RDMACLI check", shlex.join(words) + " check")
    doc = json.loads(text)
    for rule in doc["rules"]:
        rule["path"], rule["args"] = words[0], [*words[1:], *rule["args"]]
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _expect(ctx, param, values):
    from rdmacli.diag.health import Expect

    try:
        return [Expect.parse(v) for v in values]
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@click.command("check", context_settings=HELP)
@click.option(
    "--expect",
    "expects",
    multiple=True,
    metavar="DEV:PORT=GBPS",
    callback=_expect,
    help="This port must be there, up, at GBPS Gb/s or more (repeatable); with it, only the ports "
    "named are judged.",
)
@click.option(
    "-d", "--device", "devices", multiple=True, metavar="DEV", help="Judge only this device (repeatable)."
)
@file_option(
    "--watch-state",
    help="The local `rdmacli watch run` agent's state: the fabric's word on this node's NICs "
    "(default /run/rdmacli/watch-7590.json; none there is said, not judged).",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Where the counters' baseline is kept between checks (default /var/lib/rdmacli as root, "
    "else ~/.local/state/rdmacli).",
)
@click.option("--rebaseline", is_flag=True, help="Take the counters' baseline again now (after a repair).")
@click.option(
    "--deadline",
    type=Finite(1, DEADLINE_MAX_S),
    default=DEADLINE_S,
    show_default=True,
    metavar="SECONDS",
    help="End by then, judged (and with --slurm acted on) or not (exit 6: could not judge in time).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text and json for people and scripts; nhc (the reason alone, for NHC's die), npd (one "
    "line of at most 80 characters), line ('host | Healthy' or 'host | ERROR: ...').",
)
@click.option("--json", "json_mode", is_flag=True, help="Print one JSON summary document (as --format json).")
@click.option(
    "--slurm",
    is_flag=True,
    help="Act on the verdict as Slurm's HealthCheckProgram: drain this node with reason 'rdmacli: ...', "
    "resume it when healthy again; a drain whose reason is not rdmacli's is never touched.",
)
@click.option(
    "--slurm-node",
    metavar="NAME",
    help="This node's name in Slurm (default $SLURMD_NODENAME, else the short hostname).",
)
@click.option("--dry-run", is_flag=True, help="With --slurm: say the scontrol line, do not run it.")
@file_option(
    "--map",
    "map_path",
    help="The fabric's map (mesh's and watch's: `NODE [group=G] ADDRESS...`): this node's rails "
    "and its partners', for --partners.",
)
@click.option(
    "--partners",
    type=click.IntRange(0, MAX_PARTNERS),
    default=0,
    show_default=True,
    help="Ask this many partners (the nodes after this one in the map) from each rail: their "
    "connection managers answer a request for a port nobody listens on, with nothing running "
    "there. A rail fails when none of two or more answers; 0: ask none.",
)
@options.node_option
@click.option(
    "--print-config",
    type=click.Choice(sorted(CONFIGS)),
    help="Print the shipped NHC check (nhc) or node-problem-detector plugin config (npd), calling "
    "this install's rdmacli, and exit.",
)
def command(expects, devices, watch_state, state_dir, rebaseline, deadline, fmt, json_mode, slurm,
            slurm_node, dry_run, map_path, partners, node, print_config):  # fmt: skip
    """Judge this node's RDMA health: every port up at its rate with its address, the error
    counters a healthy NIC does not move (since the last check), a device gone since then, and
    the fabric's word on its NICs from the local watch agent; with --partners, whether each
    rail reaches its partners now. Reads sysfs and two files; without --partners, opens no
    device.

    Exits 0 healthy (no RDMA device at all is unhealthy), 1 unhealthy (the reason is the first
    failed row), 2 usage, 3 and above could not judge (6: the deadline passed): what
    node-problem-detector reads as Unknown. With --slurm the exit code is still the verdict's
    (as NHC's is); a node that could not be judged is neither drained nor resumed, and a failed
    scontrol is exit 3 with its words.
    """
    from rdmacli.cli.ending import finish
    from rdmacli.diag.doctor import Check
    from rdmacli.errors import RdmacliError
    from rdmacli.outcome import Outcome

    if print_config:
        click.echo(config_text(print_config), nl=False)
        return

    fmt = "json" if json_mode else fmt
    app = App.from_context(json_mode=fmt == "json")
    if (slurm_node or dry_run) and not slurm:
        raise click.UsageError("--slurm-node and --dry-run go with --slurm")
    if (map_path or node) and not partners or partners and not map_path:
        raise click.UsageError("--partners goes with --map (and --node names this node in it)")
    params = params_of("expects devices watch_state state_dir rebaseline deadline fmt slurm slurm_node "
                       "map_path partners node",
                       expects=[f"{e.device}:{e.port}={e.gbps:g}" for e in expects],
                       slurm_node=(slurm_node or _slurm_name()) if slurm else None)  # fmt: skip
    import time

    end = time.monotonic() + deadline  # judged and acted on by then
    with app.errors("check", params):
        ring = _ring(map_path, node, partners) if partners else None
        work = lambda step: judge(expects, set(devices) or None, watch_state, state_dir, rebaseline, step,  # noqa: E731
                                  ring=ring, end=end - REACH_MARGIN_S)  # fmt: skip
        try:
            rows = _within(deadline, work)
        except RdmacliError as exc:
            if fmt in ("nhc", "npd", "line"):  # its line says it could not judge (NPD: Unknown)
                _one_line(fmt, [], [Check("could not judge:", "fail", exc.message)])
            raise
        failed = [r for r in rows if r.verdict == "fail"]
        data: dict = {"checks": [r.to_dict() for r in rows], "healthy": not failed}
        if slurm:
            data["slurm"] = _act(params["slurm_node"], failed, dry_run, end)
        outcome = Outcome(
            "check",
            params,
            failed=bool(failed),
            failed_words=_words(failed),
            counts={"checks": len(rows), "checks_failed": len(failed)},
            data=data,
        )
        if fmt in ("nhc", "npd", "line"):
            _one_line(fmt, rows, failed)
            sys.exit(outcome.exit_code)
        if fmt == "json":
            finish(app, outcome)
        from rdmacli.render.checks import checks_table

        app.out.print(checks_table(data["checks"], "rdmacli check", ["check", "verdict", "detail", "hint"]))
        app.out.print("healthy" if not failed else f"unhealthy: {_words(failed)}")
        if slurm:
            app.out.print(_slurm_words(data["slurm"], dry_run))
        sys.exit(outcome.exit_code)


def _slurm_name() -> str:
    """This node's Slurm name: slurmd sets SLURMD_NODENAME for its health check and prologs."""
    import os
    import socket

    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _act(node: str, failed: list[Check], dry_run: bool, end: float) -> dict:
    """Drain or resume this node by the verdict (sched/slurm.py); the reason is the one line
    NHC and the others are given (render/health.py)."""
    from rdmacli.render.health import reason
    from rdmacli.sched import slurm

    return slurm.act(node, reason(failed) if failed else None, dry_run=dry_run, end=end).to_dict()


def _slurm_words(done: dict, dry_run: bool) -> str:
    import shlex

    if done["command"] and dry_run:
        return f"slurm: {done['node']}: would run: {shlex.join(done['command'])}"
    return f"slurm: {done['node']}: {done['words']}"


def _ring(map_path: str, node: str | None, partners: int):
    """(the map's nodes as reach.Partner, this node's index, how many to ask): a usage error
    for a map without addresses or without this node."""
    import socket

    from rdmacli.diag.reach import Partner
    from rdmacli.errors import Cause, RdmacliError
    from rdmacli.mesh.inputs import read_map
    from rdmacli.mesh.nodes import rank_of_host

    mapped = read_map(map_path)
    if not mapped.addresses:
        raise RdmacliError(f"the map {map_path} gives no addresses: --partners needs each node's rails",
                           cause=Cause.USAGE)  # fmt: skip
    names = list(mapped.addresses)
    me = rank_of_host(names, node or socket.gethostname())
    if me is None:
        raise RdmacliError(f"{node or socket.gethostname()} is not a node of {map_path}",
                           hint="name this node as the map does with --node", cause=Cause.USAGE)  # fmt: skip
    return [Partner(n, tuple(mapped.addresses[n])) for n in names], me, partners


def judge(expects, only, watch_state, state_dir, rebaseline, step=lambda what: None, *, ring=None,
          end: float = 0.0) -> list[Check]:  # fmt: skip
    """Every row: ports, counters, the fabric's word, the host, and with a ring (_ring) the
    partners' answers by `end`; `step(what)` said as each part begins (what a check past its
    deadline was doing: _within)."""
    import os

    from rdmacli.diag import baseline, health
    from rdmacli.diag.devices import list_devices
    from rdmacli.diag.doctor import Check
    from rdmacli.errors import Cause, no_device
    from rdmacli.watch import PORT
    from rdmacli.watch.service import state_path
    from rdmacli.watch.word import fabric_checks

    step("finding the devices")
    found = list_devices(use_pyverbs=False, names=only)  # -d: the others' GID tables not read
    if not found and only is None:
        err = no_device()
        rows = [Check("devices", "fail", err.message, err.hint, Cause.ENVIRONMENT)]
    else:
        rows = health.port_checks(found, list(expects), only)
    judged = [d for d in found if only is None or d.name in only]
    path = os.path.join(state_dir or health.state_dir_default(), baseline.FILE)
    step(LOCK_STEP)
    with baseline.held(path):  # from load to save: a check beside this one loses nothing
        step("reading the ports' counters")
        base, why = (None, "") if rebaseline else baseline.load(path)
        if why:
            rows.append(Check("counters", "warn", why))
        counter_rows, kept = baseline.judge(base, baseline.snapshot(judged), baseline.boot_id(), scope=only)
        if rebaseline:
            counter_rows = [Check("counters", "info", "baseline taken again (--rebaseline)")]
        rows += counter_rows
        if problem := baseline.save(path, kept):
            hint = "give --state-dir a directory this user can write"
            rows.append(Check("counters", "warn", problem, hint))
    step("reading the watch agent's state")
    rows += fabric_checks(watch_state or state_path(PORT))
    step("checking memlock and the data path")
    rows += health.host_checks()
    if ring is not None:
        from rdmacli.diag.reach import reach_checks

        nodes, me, n = ring
        rows += reach_checks(nodes, me, n, end, step)
    return rows


LOCK_STEP = "waiting for the counters' baseline (another rdmacli check holds it)"


def _within(deadline: float, work):
    """work(step) in a thread of its own, waited for until the deadline: a sysfs read a wedged
    driver holds cannot keep a health check past its program's kill. Past it, the error says
    what the check was doing and how long each part took (a baseline held by another check is
    no hung driver)."""
    import threading
    import time

    from rdmacli.errors import Cause, RdmacliError

    box: dict = {}
    steps: list[tuple[str, float]] = [("starting", time.monotonic())]

    def run() -> None:
        try:
            box["rows"] = work(lambda what: steps.append((what, time.monotonic())))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name="check", daemon=True)
    t.start()
    t.join(deadline)
    if t.is_alive():
        now, taken = time.monotonic(), list(steps)
        spans = [f"{what} {(end - t0):.1f} s" for (what, t0), (_, end) in zip(taken, [*taken[1:], ("", now)])]
        last = taken[-1][0]
        hint = "look at dmesg for a hung driver; raise --deadline (at most 50 s)"
        if last == LOCK_STEP:
            hint = "another check (slurmd's, NHC's) holds the baseline: try again when it ends"
        raise RdmacliError(
            f"could not judge within --deadline {deadline:g} s: {last} ({'; '.join(spans)})",
            hint=hint,
            cause=Cause.DEADLINE,
        )
    if "error" in box:
        raise box["error"]
    return box["rows"]


def _words(failed: list[Check]) -> str:
    return "; ".join(f"{r.check}: {r.detail}" for r in failed)


def _one_line(fmt: str, rows: list[Check], failed: list[Check]) -> None:
    import socket

    from rdmacli.render import health

    if fmt == "nhc":
        line = health.nhc(failed)
    elif fmt == "npd":
        line = health.npd(failed, len(rows))
    else:
        line = health.host_line(socket.gethostname(), failed)
    if line:
        click.echo(line)
