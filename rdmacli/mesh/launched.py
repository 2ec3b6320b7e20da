"""What a launcher said when it failed before any agent ran: its own words, kept for the error.

srun prints its own failures unlabelled ("srun: fatal: ..."), ssh prints them on a node's stderr
and exits 255, a ClusterShell gateway on its node's; none of them is an agent's record. When no
node's agent said a word and every node's launch has ended, the run's error is the launcher's,
named with what it said (Cause.LAUNCHER), never a timeout nobody waited out."""

from __future__ import annotations

from rdmacli.errors import Cause, RdmacliError

LAUNCHER_OWN = "?"  # the key the intake files unlabelled lines under (srun's own words)
# each launcher's hint, as parts: (words, the option they name or None); a part naming an option
# is said only where the command typed has it (`watch status` has no --ssh-options)
LAUNCHER_HINTS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "srun": (("try `srun hostname` where you ran this: srun needs a Slurm allocation (salloc, sbatch) "
              "and Slurm's configuration", None), ("; --srun-args places the tasks", "--srun-args")),
    "ssh": (("try `ssh NODE true` as this user: keys, host names", None),
            (" (or --address-template)", "--address-template"), (", --ssh-options", "--ssh-options"),
            ("; with --topology, ClusterShell on each gateway", "--topology")),
    "exec": (("try the agent command by hand", None), (" (--agent-command)", "--agent-command")),
}  # fmt: skip
MESH_OPTIONS = frozenset(o for parts in LAUNCHER_HINTS.values() for _, o in parts if o)  # mesh has them all


def launcher_hint(launcher: str, options: frozenset[str] = MESH_OPTIONS) -> str | None:
    parts = LAUNCHER_HINTS.get(launcher)
    return "".join(w for w, o in parts if o is None or o in options) if parts else None


def launcher_failure(
    launcher: str,
    names: list[str],
    heard: set[str],
    exits: dict,
    stderr: dict,
    before: str = "any agent ran",
    options: frozenset[str] = MESH_OPTIONS,
) -> RdmacliError | None:
    """The error of a launch that failed on every node before any agent ran (its words, the
    launcher's hint, cause launcher), or None.

    `heard`: the nodes whose agents printed a record; `exits`: node -> its launch's exit status
    (None while cut); `stderr`: node (or LAUNCHER_OWN) -> its last lines."""
    if heard or not names or any(exits.get(n) in (None, 0) for n in names):
        return None
    own = stderr.get(LAUNCHER_OWN) or []
    words: list[str] = [line for line in own if line][-2:]
    if not words:
        for n in names:
            said = [line for line in stderr.get(n) or [] if line]
            if said:
                words.append(f"{n}: {said[-1]}")
            if len(words) == 3:
                break
    codes = sorted({exits[n] for n in names})
    status = f"exit {codes[0]}" if len(codes) == 1 else f"exit {', '.join(map(str, codes[:4]))}"
    text = "; ".join(w[:300] for w in words) or "nothing"
    return RdmacliError(f"{launcher} failed on all {len(names)} node(s) before {before} ({status}): {text}",
                        cause=Cause.LAUNCHER, hint=launcher_hint(launcher, options))  # fmt: skip
