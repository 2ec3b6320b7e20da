"""What `watch unit` and `watch daemonset` print: the shipped unit and manifest, made to run this
install's rdmacli, and the check that the unit's sandbox can see that install at all.

Why the check: the unit is hardened (DynamicUser=yes, ProtectHome=yes, PrivateTmp=yes), and
under it a venv in /root, a pipx install in a home directory or a checkout in /tmp is invisible
or unreadable to the service: systemd starts nothing and says `status=203/EXEC` or a Python
`ModuleNotFoundError`, on every node at once. So `watch unit` looks where its program, its
interpreter's prefix and its package live, as the service would: a path the sandbox hides is
refused with the fix, unless the sandbox can be loosened by one directive that keeps the rest
(a home directory others may read: ProtectHome=read-only), which it then writes and says.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from rdmacli.errors import Cause, RdmacliError

HERE = os.path.dirname(os.path.abspath(__file__))
UNIT = os.path.join(HERE, "rdmacli-watch.service")
DAEMONSET = os.path.join(HERE, "rdmacli-watch-daemonset.yaml")

# Where the unit's sandbox hides a path, and the directive that hides it (rdmacli-watch.service)
HOMES = ("/home", "/root", "/run/user")  # ProtectHome=yes: empty and inaccessible
TEMPS = ("/tmp", "/var/tmp")  # PrivateTmp=yes: a fresh, empty directory of the service's own
FIX = (
    "install the package (`apt install ./rdmacli_*.deb`: /usr/bin/rdmacli), or a venv every user can "
    "read outside /home, /root and /tmp (`python3 -m venv /opt/rdmacli && /opt/rdmacli/bin/pip install "
    "rdmacli`, then `/opt/rdmacli/bin/rdmacli watch unit`), or pipx with "
    "`PIPX_HOME=/opt/pipx PIPX_BIN_DIR=/usr/local/bin pipx install rdmacli`"
)


def program_words() -> list[str]:
    """The command that runs this rdmacli: the `rdmacli` script beside this interpreter (a
    venv's, pipx's, the system's), else the interpreter with -m."""
    script = os.path.join(os.path.dirname(sys.executable), "rdmacli")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "rdmacli"]


def this_program() -> str:
    """program_words as a unit's ExecStart says them."""
    words = program_words()
    # systemd's own quoting: a word with a space in double quotes, its specifiers and $ doubled
    return " ".join((f'"{w}"' if " " in w else w).replace("%", "%%").replace("$", "$$") for w in words)


def install_paths() -> list[str]:
    """What the service must reach to run this rdmacli: the program, the interpreter, its prefix
    (a venv's site-packages) and the package itself (a checkout, for an editable install)."""
    import rdmacli

    return [
        program_words()[0],
        sys.executable,
        sys.prefix,
        os.path.dirname(os.path.abspath(rdmacli.__file__)),
    ]


def _under(path: str, tops: Iterable[str]) -> str | None:
    return next((top for top in tops if path == top or path.startswith(top + "/")), None)


@dataclass(frozen=True)
class Reach:
    """How the unit's service would see the install: what hides it, what it can never reach."""

    homes: tuple[str, ...] = ()  # under ProtectHome's paths, readable by others: read-only mends it
    blocked: tuple[str, ...] = ()  # no directive of the unit's mends these: refused

    def directives(self) -> dict[str, str]:
        return {"ProtectHome": "read-only"} if self.homes and not self.blocked else {}


def reach(
    paths: Iterable[str], homes: Iterable[str] | None = None, temps: Iterable[str] | None = None
) -> Reach:
    """Each path as the service (another user, in the unit's namespaces) would reach it: every
    directory on the way searchable by others, the path itself readable by others, and the path
    (and where its links lead) outside the private /tmp; under a home directory, a mend. `homes`
    and `temps` default to the unit's (HOMES, TEMPS)."""
    homes, temps = tuple(HOMES if homes is None else homes), tuple(TEMPS if temps is None else temps)
    hidden: list[str] = []
    blocked: list[str] = []
    for path in dict.fromkeys(paths):
        for seen in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
            top = _under(seen, temps)
            if top:
                blocked.append(
                    f"{seen} is under {top}, which the unit's PrivateTmp=yes replaces with an empty one"
                )
                continue
            why = _unreadable(seen)
            if why:
                blocked.append(why)
                continue
            top = _under(seen, homes)
            if top:
                hidden.append(f"{seen} is under {top}, which the unit's ProtectHome=yes hides")
    return Reach(tuple(dict.fromkeys(hidden)), tuple(dict.fromkeys(blocked)))


def _unreadable(path: str) -> str | None:
    """Why another user cannot reach `path` (a directory on the way not searchable by others,
    the path not readable by them), or None."""
    parts = path.split("/")
    for i in range(2, len(parts) + 1):
        here = "/".join(parts[:i]) or "/"
        try:
            st = os.stat(here)
        except OSError as exc:
            return f"{here}: {exc.strerror or exc}"
        last = i == len(parts)
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return f"{here} is mode {stat.S_IMODE(st.st_mode):04o}: the unit's dynamic user cannot enter it"
        if last and not st.st_mode & stat.S_IROTH:
            return f"{here} is mode {stat.S_IMODE(st.st_mode):04o}: the unit's dynamic user cannot read it"
    return None


def unit_text(program: str | None = None, directives: dict[str, str] | None = None) -> str:
    """The packaged unit (rdmacli-watch.service) with ExecStart's program made absolute and
    `directives` (name: value) replacing the unit's own."""
    with open(UNIT) as f:
        text = f.read()
    text = text.replace("\nExecStart=rdmacli ", f"\nExecStart={program or this_program()} ", 1)
    for name, value in (directives or {}).items():
        start = text.index(f"\n{name}=") + 1
        end = text.index("\n", start)
        text = f"{text[:start]}{name}={value}{text[end:]}"
    return text


def checked_unit(force: bool = False) -> tuple[str, list[str]]:
    """The unit for this install and what to say of it: refused (exit 3, the reason and the fix)
    where its service could not reach this rdmacli, unless `force`."""
    seen = reach(install_paths())
    if seen.blocked and not force:
        raise RdmacliError(
            f"the unit would not start: {seen.blocked[0]}" + (f" (and {len(seen.blocked) - 1} more)"
                                                               if len(seen.blocked) > 1 else ""),
            hint=FIX + "; or --force to print it anyway (for a unit you will change)",
            cause=Cause.ENVIRONMENT,
        )  # fmt: skip
    said = [f"warning: printed anyway: {why}" for why in seen.blocked]
    directives = seen.directives()
    if directives:
        said.append(
            f"ProtectHome=read-only written (not yes): {seen.homes[0]}; the service reads it, writes nothing"
        )
    return unit_text(directives=directives), said


def daemonset_text() -> str:
    """The packaged DaemonSet manifest (rdmacli-watch-daemonset.yaml), validated offline against
    Kubernetes' schemas in the unit suite (kubernetes-validate)."""
    with open(DAEMONSET) as f:
        return f.read()
