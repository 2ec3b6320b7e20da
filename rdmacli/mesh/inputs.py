"""What `rdmacli mesh` reads from people and files, checked before any agent starts.

Node names, address templates, map and baseline files and free-text options are input: an admin
runs the mesh as root over names that come from group files, Slurm and people. Nothing here
reaches a shell as code; every refusal names what was wrong and is a usage error (exit 2).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import math
import os
import re
import shlex
import stat
from dataclasses import dataclass

from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh.schedule import MAX_SAMPLE
from rdmacli.mesh.shape import take, wire

# a host name (RFC 1123 labels) or a Slurm node name (underscores too); never a leading '-',
# so a name can never be read as an option by ssh or srun
NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})")
GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")  # a leaf, rack or plane's name (a map's group=)
ZONE = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # an interface name, as a link-local address's zone
MAX_FILE = 64 * 2**20  # a map or baseline file larger than this is not one
MAX_PAIRS = 10**7  # a baseline of more pairs than 4500 nodes have is not one


def usage(message: str, hint: str | None = None) -> RdmacliError:
    return RdmacliError(message, hint=hint, cause=Cause.USAGE)


# a last label of digits (or 0x and hex digits) is no host name's (RFC 1123): the resolver
# would read it as a number, 010.0.0.1 as 8.0.0.1 (octal) and 1234 as 0.0.4.210
NUMERIC = re.compile(r"(?:[0-9]+|0[xX][0-9a-fA-F]*)")


def valid_name(name: object) -> bool:
    """A host name, a Slurm node name, or an IPv4/IPv6 literal (a link-local one may carry its
    zone, fe80::1%eth0). A name the resolver would read as a number (010.0.0.1, 0x0a.0.0.1,
    1234) is neither: only an IP literal in its usual form is an address."""
    if not isinstance(name, str) or not name or len(name) > 253:
        return False
    if NAME.fullmatch(name) and not NUMERIC.fullmatch(name.rsplit(".", 1)[-1]):
        return True
    address, _, zone = name.partition("%")
    if zone and not ZONE.fullmatch(zone):  # Python takes any text as an IPv6 zone id
        return False
    try:
        ipaddress.ip_address(address if not zone else name)
    except ValueError:
        return False
    return not name.startswith("-")


def check_names(names: list[str], what: str = "node name") -> None:
    """The first name that is not a host name, node name or IP literal, refused by name."""
    for name in names:
        if not valid_name(name):
            numeric = NUMERIC.fullmatch(str(name).rsplit(".", 1)[-1])
            said = " (a number the resolver would read otherwise: 010.0.0.1 is 8.0.0.1 to it)"
            raise usage(
                f"bad {what} {name!r}: not a host name, a Slurm node name or an IP address"
                + (said if numeric else ""),
                hint="write an IPv4 address as four decimal numbers without leading zeros (10.0.0.1)"
                if numeric
                else "names are letters, digits, '-', '_' and '.', not starting with '-'",
            )


def check_template(template: str) -> None:
    """An --address-template may name {node} and {rank}, nothing else."""
    try:
        template.format(node="n", rank=0)
    except KeyError as exc:
        raise usage(
            f"bad --address-template {template!r}: it names {{{exc.args[0]}}}; a template names "
            "{node} and {rank} only",
            hint="use {node} and {rank}, e.g. '{node}-ib' or '10.1.0.{rank}'",
        ) from exc
    except (IndexError, ValueError, AttributeError) as exc:
        raise usage(
            f"bad --address-template {template!r}: {exc}",
            hint="use {node} and {rank}, e.g. '{node}-ib' or '10.1.0.{rank}' ({{ and }} for a brace)",
        ) from exc


def split_args(option: str, text: str | None) -> list[str] | None:
    """A free-text option of words (shell quoting), or a usage error that says which."""
    if text is None:
        return None
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise usage(f"bad {option} {text!r}: {exc}", hint="quote as a shell would") from exc


def read_regular(path: str, what: str, limit: int = MAX_FILE) -> bytes:
    """A regular file's bytes, at most limit + 1 of them. As root, nothing else is opened: not
    through a link (O_NOFOLLOW), never blocking (a FIFO, a device: O_NONBLOCK, then refused by
    type before a byte is read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise usage(f"{what} {path} is a symbolic link: give the file itself") from exc
        raise usage(f"cannot read {what} {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise usage(f"{what} {path} is not a regular file")
        chunks, got = [], 0
        while got <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - got))):
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise usage(f"cannot read {what} {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)


def read_text(path: str, what: str) -> str:
    """A regular file of bounded size, as UTF-8 text."""
    data = read_regular(path, what)
    if len(data) > MAX_FILE:
        raise usage(f"{what} {path} is larger than {MAX_FILE // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise usage(f"{what} {path} is not UTF-8 text (byte {exc.start})") from exc


def read_topology(path: str) -> str:
    """A ClusterShell topology file (`[routes]`, `ROOT: GATEWAYS`, `GATEWAYS: NODES`), read as
    every file named by people is (read_text), checked by ClusterShell's own parser from this
    host's place in it: its text, for the launcher to load (launch.ClusterShellLauncher)."""
    import socket

    text = read_text(path, "the topology file")
    try:
        from ClusterShell.Topology import TopologyError, TopologyParser
    except ImportError as exc:  # a dependency: only a broken install lacks it
        raise usage(f"--topology needs ClusterShell: {exc}") from exc
    with topology_file(text) as checked:
        root = socket.gethostname().split(".")[0]  # as ClusterShell finds its root
        try:
            TopologyParser(checked).tree(root)
        except (TopologyError, ValueError, KeyError) as exc:
            raise usage(f"bad --topology {path}: {exc}", hint=(
                f"a [routes] section whose first route starts at this host ({root}): "
                f"`{root}: gw[1-2]` then `gw[1-2]: node[1-1000]`")) from exc  # fmt: skip
    return text


@contextlib.contextmanager
def topology_file(text: str | None):
    """The checked topology's text in a private file for the run (ClusterShell loads a path),
    removed after; None without one."""
    if text is None:
        yield None
        return
    import tempfile

    with tempfile.NamedTemporaryFile("w", prefix="rdmacli-topology-", suffix=".conf") as f:
        f.write(text)
        f.flush()
        yield f.name


@dataclass(frozen=True)
class MapFile:
    """A map's nodes: their rails' addresses (none: discovered), and their groups (a leaf, a
    rack, a plane: what `--pairs group|sample:K` tests inside and samples between)."""

    addresses: dict[str, list[str]]
    groups: dict[str, str]


def read_map(path: str) -> MapFile:
    """`NODE [group=NAME] [ADDRESS...]` lines (# comments): a node's group and rails, in order;
    every line with addresses or none (a map of groups, the rails discovered); all checked."""
    addresses: dict[str, list[str]] = {}
    groups: dict[str, str] = {}
    where: dict[str, int] = {}
    for number, line in enumerate(read_text(path, "the map file").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        node, rest = parts[0], parts[1:]
        group = [w for w in rest if w.startswith("group=")]
        rails = [w for w in rest if not w.startswith("group=")]
        if len(group) > 1 or len(rails) > 16 or not rest:
            raise usage(
                f"{path}:{number}: expected `NODE [group=NAME] [ADDRESS...]` (16 rails at most, one "
                f"group), got {len(parts)} field(s)"
            )
        check_names([node], f"node name at {path}:{number}")
        if group:
            name = group[0].removeprefix("group=")
            if not GROUP.fullmatch(name):
                raise usage(f"{path}:{number}: a group name is letters, digits, . _ : - (64 at most)")
            groups[node] = name
        check_names(rails, f"address at {path}:{number}")
        if len(set(rails)) != len(rails):
            raise usage(f"{path}:{number}: the same address twice for {node}")
        if node in where:
            raise usage(f"{path}:{number}: {node} is already given at line {where[node]}")
        if rails:
            addresses[node] = rails
        where[node] = number
    if addresses and len(addresses) != len(where):
        raise usage(f"{path}: some nodes have addresses and some not (give every node's, or none)")
    return MapFile(addresses, groups)


def parse_pairs(text: str) -> tuple[str, int]:
    """--pairs all|group|sample:K as (pairs, K); a usage error otherwise."""
    kind, _, k = text.partition(":")
    if kind in ("all", "group") and not k:
        return kind, 0
    if kind == "sample" and k.isdigit() and 1 <= int(k) <= MAX_SAMPLE:
        return kind, int(k)
    raise usage(f"--pairs {text[:40]!r}: expected all, group or sample:K (K from 1 to {MAX_SAMPLE})")


def groups_of(
    names: list[str], mapped: MapFile | None, map_file: str | None, needed: bool
) -> tuple[str, ...]:
    """Each node's group, by rank, from the map (none without); every node's when --pairs
    needs them, or a usage error naming those without."""
    if mapped is None or not mapped.groups:
        if needed:
            raise usage(
                "--pairs group or sample:K needs each node's group: a --map FILE with group=NAME on "
                "every node's line (`node01 group=leaf1`, addresses optional)"
            )
        return ()
    missing = [n for n in names if n not in mapped.groups]
    if missing:
        raise usage(
            f"the map file {map_file} has no group for {', '.join(missing[:8])}"
            + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        )
    return tuple(mapped.groups[n] for n in names)


def _finite(value) -> bool:
    return value is None or (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _rail(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _figure():
    return wire(_finite, default=None)


@dataclass(frozen=True)
class BaselinePair:
    """A pair of an earlier mesh run's summary, as `--baseline` compares it (report.compare)."""

    a: str = wire(valid_name)
    b: str = wire(valid_name)
    result: str = wire(lambda v: v in ("pass", "fail", "missing"))
    rail_a: int = wire(_rail, default=0)
    rail_b: int = wire(_rail, default=0)
    rtt_p50_us: float | None = _figure()
    rtt_p99_us: float | None = _figure()
    setup_us: float | None = _figure()

    def nics(self) -> frozenset:
        """A pair of NICs: (node, rail) at each end (PairResult.nics)."""
        return frozenset(((self.a, self.rail_a), (self.b, self.rail_b)))


@dataclass(frozen=True)
class _Summary:
    command: object = wire(default=None)
    data: dict | None = wire(lambda v: isinstance(v, dict), lenient=True, default=None)


@dataclass(frozen=True)
class _Data:
    pairs: list | None = wire(
        lambda v: isinstance(v, list) and len(v) <= MAX_PAIRS, lenient=True, default=None
    )


BASELINE_HINT = "give the --json output of an earlier `rdmacli mesh` run"


class _NotAPair(ValueError):
    """A baseline that cannot be compared: its words, and the hint when it is a summary at all."""

    def __init__(self, words: str, hint: str | None = None) -> None:
        super().__init__(words)
        self.hint = hint


def baseline_pairs(doc) -> tuple[BaselinePair, ...]:
    """The pairs of a mesh run's summary document, each checked (_NotAPair says which is not)."""
    head = _Summary(**take(_Summary, doc, _NotAPair)) if isinstance(doc, dict) else None
    if head is None or head.command != "mesh" or head.data is None:
        raise _NotAPair("not the summary of a mesh run")
    pairs = _Data(**take(_Data, head.data, _NotAPair)).pairs
    if pairs is None:
        raise _NotAPair("data.pairs is not a list of pairs")
    out = []
    for i, p in enumerate(pairs):
        try:
            out.append(BaselinePair(**take(BaselinePair, p, _NotAPair)))  # a non-object refused too
        except _NotAPair:
            raise _NotAPair(
                f"pair {i} is not a pair of a mesh summary",
                "give the --json output of an earlier `rdmacli mesh` run",
            ) from None
    return tuple(out)


def read_baseline(path: str) -> tuple[BaselinePair, ...]:
    """An earlier mesh run's summary, checked against what compare() reads: pairs of two node
    names with a result and finite, non-negative figures. Anything else is refused before a
    single agent starts, so a bad file never costs a run its results."""
    try:
        doc = json.loads(read_text(path, "the baseline"))
    except (ValueError, RecursionError) as exc:
        raise usage(f"--baseline {path}: not a JSON summary: {str(exc)[:200]}") from exc
    try:
        return baseline_pairs(doc)
    except _NotAPair as exc:
        raise usage(f"--baseline {path}: {exc}", hint=exc.hint) from None


def clustershell_command(words: list[str]) -> str:
    """A command line for ClusterShell's exec and ssh workers: shell-quoted, and every '%'
    doubled, since the workers expand %h, %host, %n, %rank in it (a node name or a zone id
    must never become a node's name on another command line)."""
    line = "exec " + shlex.join(words)
    escaped = line.replace("%", "%%")
    if "%hosts" in escaped:  # ClusterShell runs such a command once for all nodes
        raise usage("an argument contains '%hosts', which ClusterShell cannot pass through")
    return escaped
