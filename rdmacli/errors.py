"""Exit codes and the error type every layer raises.

Shared by engine, cli and lab so that an error carries its exit code and its advice from where it
is known (deep down) to where it is printed (the cli), without either side importing the other.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the test ran and failed: loss, validation, threshold
    USAGE = 2
    ENVIRONMENT = 3  # no device, permissions, memlock, missing tools
    RESOLVE = 4  # address or route resolution failed
    REJECTED = 5  # rejected or unreachable
    TIMEOUT = 6  # our own deadline expired
    INTERRUPTED = 130


class RdmacliError(Exception):
    """An error with words for people, one line of advice and an exit code."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        exit_code: ExitCode | None = None,
        details: dict | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code
        self.details = details or {}

    def to_dict(self) -> dict:
        d = {"message": self.message, "hint": self.hint, "exit_code": int(self.exit_code)}
        d.update(self.details)
        return d


class EnvironmentProblem(RdmacliError):
    exit_code = ExitCode.ENVIRONMENT


class Stopped(BaseException):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) arrived: tear down, summarise, exit 128+signal.

    A BaseException, like KeyboardInterrupt, so no `except Exception` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
