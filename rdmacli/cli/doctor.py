"""`rdmacli doctor [PEER]`: diagnose this host's RDMA setup, and the path to a peer."""

from __future__ import annotations

import sys

import click

from rdmacli.cli import HELP, complete
from rdmacli.cli.app import json_reported, params_of
from rdmacli.errors import RdmacliError


@click.command("doctor", context_settings=HELP)
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
@json_reported
def command(peer, port, port_space, app):
    """Check libraries, devices, ports, netdevs, GIDs, memlock, device access and sysctls,
    cheapest first; with PEER also the route, an address/route resolution with timings and,
    with -p, a connection attempt (nothing listening / rejected / unreachable / timed out).

    Exits 0 when every check passes (warnings allowed); 3 when a check this host's RDMA setup
    rests on fails (libraries, devices, device access: as `rdmacli devices` exits there), the
    other checks still run and shown; else 1 when any check fails.
    """
    if port is not None and not peer:
        raise click.UsageError("-p needs PEER")
    params = params_of("peer port port_space")
    with app.errors("doctor", params):
        from rdmacli.diag import doctor
        from rdmacli.errors import Cause
        from rdmacli.outcome import Outcome
        from rdmacli.rdma.constants import PORT_SPACES

        checks = doctor.local_checks()
        # the host cannot be examined further (exit 3, as `rdmacli devices` for the same host)
        broken = next((c for c in checks if c.check in doctor.SETUP_CHECKS and c.verdict == "fail"), None)
        if peer and broken is None:
            checks += doctor.peer_checks(peer, port, PORT_SPACES[port_space])
        elif peer:
            checks.append(
                doctor.Check(
                    "peer", "skipped", f"{peer} not probed: the {broken.check} check failed",
                    "fix this host first (see the failed check); then run doctor PEER again",
                )
            )  # fmt: skip
        rows = [c.to_dict() for c in checks]
        failed = [c for c in checks if c.verdict == "fail"]
        names = ", ".join(c.check for c in failed)
        outcome = Outcome(
            "doctor",
            params,
            failed=bool(failed),
            failed_words=f"{len(failed)} of {len(checks)} checks failed: {names}",
            error=RdmacliError(broken.detail, hint=broken.hint, cause=broken.cause or Cause.ENVIRONMENT)
            if broken
            else None,
            counts={"checks": len(checks), "checks_failed": len(failed)},
            data={"checks": rows},
        )
        if app.json_mode:
            from rdmacli.cli.ending import finish

            finish(app, outcome)
        from rdmacli.render.checks import checks_table

        app.out.print(checks_table(rows, "rdmacli doctor", ["check", "verdict", "detail", "hint"]))
        app.out.print(
            f"{sum(c.verdict != 'fail' and c.verdict != 'skipped' for c in checks)}/{len(checks)} "
            "checks passed"
            + (f", {len(failed)} failed" if failed else "")
            + (", 1 skipped" if any(c.verdict == "skipped" for c in checks) else "")
        )
        sys.exit(outcome.exit_code)
