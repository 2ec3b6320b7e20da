"""`rdmacli doctor [PEER]`: diagnose this host's RDMA setup, and the path to a peer."""

from __future__ import annotations

import sys

import click

from rdmacli.cli import complete
from rdmacli.cli.app import App, json_option
from rdmacli.errors import RdmacliError


@click.command("doctor")
@click.argument("peer", required=False, shell_complete=complete.rdma_addresses)
@click.option(
    "-p",
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    shell_complete=complete.ports,
    help="Also try a connection to PEER on this port, and classify the outcome.",
)
@click.option(
    "-P",
    "--port-space",
    "port_space",
    type=click.Choice(["tcp", "ib"]),
    default="tcp",
    show_default=True,
    help="Port space of the probes.",
)
@json_option
def command(peer, port, port_space, json_mode):
    """Check libraries, devices, ports, netdevs, GIDs, memlock, device access and sysctls,
    cheapest first; with PEER also the route, an address/route resolution with timings and,
    with -p, a connection attempt (nothing listening / rejected / unreachable / timed out).

    Exits 0 when every check passes (warnings allowed), 1 when one fails, 3 when the setup
    cannot be examined at all.
    """
    if port is not None and not peer:
        raise click.UsageError("-p needs PEER")
    app = App(json_mode=json_mode)
    params = {"peer": peer, "port": port, "port_space": port_space}
    with app.errors("doctor", params):
        from rdmacli.diag import doctor
        from rdmacli.errors import Cause
        from rdmacli.outcome import Outcome
        from rdmacli.rdma.constants import PORT_SPACES

        checks = doctor.local_checks()
        can_probe = not any(
            c.check in ("libraries", "devices", "device access") and c.verdict == "fail" for c in checks
        )
        if peer and can_probe:
            checks += doctor.peer_checks(peer, port, PORT_SPACES[port_space])
        rows = [c.to_dict() for c in checks]
        failed = [c for c in checks if c.verdict == "fail"]
        broken = next((c for c in checks if c.check == "libraries" and c.verdict == "fail"), None)
        outcome = Outcome(
            "doctor",
            params,
            failed=bool(failed),
            error=RdmacliError(broken.detail, hint=broken.hint, cause=Cause.ENVIRONMENT) if broken else None,
            counts={"checks": len(checks), "checks_failed": len(failed)},
            data={"checks": rows},
        )
        if json_mode:
            from rdmacli.cli._run import finish

            finish(app, outcome)
        from rdmacli.render.checks import checks_table

        app.out.print(checks_table(rows, "rdmacli doctor", ["check", "verdict", "detail", "hint"]))
        app.out.print(
            f"{len(checks) - len(failed)}/{len(checks)} checks passed"
            + (f", {len(failed)} failed" if failed else "")
        )
        sys.exit(outcome.exit_code)
