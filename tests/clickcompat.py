"""click 8.1's CliRunner read as click 8.2's, so the suite runs on Debian 12's python3-click (8.1.3)
as on PyPI's newest: the package's build runs it against the distribution's own packages.

click 8.2 always keeps stderr apart (`result.stderr`) and gives `result.output` as a terminal shows
both; 8.1 mixes them unless `mix_stderr=False`, and then `output` is stdout alone. Under 8.1 the
runner is made with mix_stderr=False and `output` is stdout then stderr (the tests read it for
words, never for the order of the two).
"""

from __future__ import annotations

from importlib.metadata import version

from click import testing

OLD = tuple(int(x) for x in version("click").split(".")[:2]) < (8, 2)


class _Result(testing.Result):
    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class _Runner(testing.CliRunner):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("mix_stderr", False)
        super().__init__(*args, **kwargs)

    def invoke(self, *args, **kwargs):
        result = super().invoke(*args, **kwargs)
        result.__class__ = _Result
        return result


def install() -> None:
    if OLD:
        testing.CliRunner = _Runner  # type: ignore[misc]
