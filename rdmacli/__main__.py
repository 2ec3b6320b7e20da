"""Entry point; checks the third-party imports so a broken install gives advice, not a traceback."""

import sys


def main() -> None:
    try:
        import click  # noqa: F401
        import rich  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
        name = exc.name or "a dependency"
        sys.stderr.write(
            f"rdmacli: cannot import {name}: {exc}\n"
            f"hint: install it with `pip install {name}` (or reinstall rdmacli: `pip install rdmacli`)\n"
        )
        sys.exit(3)
    from rdmacli.cli import cli

    cli(prog_name="rdmacli")


if __name__ == "__main__":
    main()
