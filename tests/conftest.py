"""Shared fixtures, and the guard that makes a lab run without lab tests fail."""

from __future__ import annotations

import clickcompat
import pytest
from internal_errors import no_internal_error  # noqa: F401  (an autouse fixture for the lab suites)

clickcompat.install()  # before any test module imports click.testing's CliRunner


def pytest_addoption(parser):
    parser.addoption(
        "--require-rdma",
        action="store_true",
        help="fail the run unless rdma-marked tests ran and none was skipped",
    )


def pytest_sessionfinish(session, exitstatus):
    if not session.config.getoption("--require-rdma"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    passed = [r for r in stats.get("passed", []) if r.when == "call"]
    skipped = stats.get("skipped", [])
    if not passed or skipped:
        if reporter:
            reporter.write_line(
                f"--require-rdma: {len(passed)} rdma tests passed, {len(skipped)} skipped: "
                "the lab suite must run in full",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
