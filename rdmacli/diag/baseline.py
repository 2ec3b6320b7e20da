"""The error counters of `rdmacli check`: what a healthy NIC does not move, judged against a
baseline kept between checks.

A port's counters count from the driver's load, so one reading says nothing; the difference from
the last check's does. The baseline is a small JSON file where a root service keeps state
(/var/lib/rdmacli, systemd's StateDirectory), one per host, rewritten atomically. Its rules:

- no baseline, another boot (the counters started again), or `--rebaseline`: the baseline is taken
  now and the counters are judged from the next check (said, never a failure: a first run cannot
  know what moved before it);
- a counter that went backwards (a reset, a 32-bit wrap): that port's baseline is taken again;
- RULES: any increase of link_downed, rnr_nak_retry_err or excessive_buffer_overrun_errors fails
  (NVSentinel's fatal ones and the overruns), symbol and receive errors fail above 120 an hour
  (NVSentinel's rate), counted over an hour at least: one error in a 5-minute interval is not
  1440 an hour;
- the baseline rolls forward an hour after it was taken: a link that went down once drains its
  node for at most the hour, then the node is judged afresh;
- a port the baseline has and sysfs has not fails (a removed device) until it is back, the host
  reboots or the baseline is taken again.

The file is read as untrusted input: its size, names and numbers are checked; a bad one is said
and replaced.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from rdmacli import counters
from rdmacli.diag.doctor import Check
from rdmacli.errors import Cause

FILE = "check-counters.json"
TYPE = "rdmacli-check-baseline"
VERSION = 1
WINDOW_S = 3600.0  # the rates' hour, and how long a baseline stands before it rolls forward
MAX_BYTES = 1 << 20
MAX_PORTS = 1024
MAX_COUNT = 2**64 - 1
PORT_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}/[0-9]{1,3}")


@dataclass(frozen=True)
class Rule:
    """A counter a healthy NIC does not move: any increase fails (per_hour 0), or more than
    per_hour an hour."""

    counter: str
    per_hour: int
    words: str
    cause: Cause


RULES = (
    Rule("link_downed", 0, "the link went down", Cause.LINK_ERRORS),
    Rule("rnr_nak_retry_err", 0, "RNR retries ran out (a receiver with no receive posted)", Cause.RNR),
    Rule("excessive_buffer_overrun_errors", 0, "receive buffer overruns", Cause.LINK_ERRORS),
    Rule("symbol_error", 120, "symbol errors (a bad cable, optic or port)", Cause.LINK_ERRORS),
    Rule("port_rcv_errors", 120, "receive errors", Cause.LINK_ERRORS),
)
NAMES = frozenset(r.counter for r in RULES)
GONE = "its driver or the host: `rdmacli devices`, dmesg; `rdmacli check --rebaseline` forgets it"
ADVICE = "look at the cable, the optic and the switch port (`rdmacli devices`, the switch's logs)"


@dataclass
class Baseline:
    boot: str
    since: float  # wall time it was taken
    ports: dict[str, dict[str, int]] = field(default_factory=dict)  # "dev/port" -> counter -> value

    def to_dict(self) -> dict:
        return {"type": TYPE, "v": VERSION, "boot": self.boot, "since": self.since, "ports": self.ports}


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read(64).strip()
    except OSError:
        return ""


def snapshot(devices, sysfs: str | None = None) -> dict[str, dict[str, int]]:
    """The rules' counters of every port of `devices`, by "dev/port" (the port's own: a
    device-wide counter of the same name is not the port's)."""
    out = {}
    for d in devices:
        for p in d.ports:
            read = counters.read(d.name, p.port, sysfs=sysfs, only=NAMES)
            out[f"{d.name}/{p.port}"] = {k: v for k, v in read.items() if k in NAMES}
    return out


def load(path: str) -> tuple[Baseline | None, str]:
    """The baseline at path, or None and why not ("" when there is none yet)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    try:
        doc = json.loads(raw) if len(raw) <= MAX_BYTES else None
    except (ValueError, RecursionError):
        doc = None
    ports = doc.get("ports") if isinstance(doc, dict) else None
    ok = (
        isinstance(doc, dict)
        and doc.get("type") == TYPE
        and isinstance(doc.get("boot"), str)
        and len(doc["boot"]) <= 64
        and isinstance(doc.get("since"), (int, float))
        and not isinstance(doc.get("since"), bool)
        and 0 <= doc["since"] < 1e13
        and isinstance(ports, dict)
        and len(ports) <= MAX_PORTS
        and all(
            isinstance(k, str)
            and PORT_KEY.fullmatch(k)
            and isinstance(v, dict)
            and all(n in NAMES and type(c) is int and 0 <= c <= MAX_COUNT for n, c in v.items())
            for k, v in ports.items()
        )
    )
    if not ok or not isinstance(doc, dict) or not isinstance(ports, dict):
        return None, f"{path}: not a baseline of rdmacli check (taken again)"
    return Baseline(doc["boot"], float(doc["since"]), {k: dict(v) for k, v in ports.items()}), ""


@contextlib.contextmanager
def held(path: str) -> Iterator[None]:
    """The baseline's lock (a file beside it, flock'd) from its load to its save: slurmd's check
    every interval and an admin's `--rebaseline` at the same moment would otherwise lose one of
    the two (the later save writes what it loaded before the other's). Waited for within the
    check's deadline; where the lock cannot be had at all (a directory not ours), unlocked, and
    the save says why it cannot keep the baseline."""
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(directory, ".check.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def save(path: str, base: Baseline) -> str:
    """Write the baseline atomically (a check killed mid-write leaves the last one); "" or why not."""
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".check-", dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(base.to_dict(), f, separators=(",", ":"))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        return f"cannot keep the counters' baseline in {directory}: {exc.strerror or exc}"
    return ""


def judge(
    base: Baseline | None,
    now_counts: dict[str, dict[str, int]],
    boot: str,
    now: float | None = None,
    scope: set[str] | None = None,
) -> tuple[list[Check], Baseline]:
    """The counter rows and the baseline to keep. `scope`: the devices judged (--device); the
    baseline's other ports are kept as they are, neither judged nor gone."""
    now = time.time() if now is None else now
    if base is not None and scope is not None:
        inside = {k: v for k, v in base.ports.items() if k.split("/")[0] in scope}
        said, part = judge(Baseline(base.boot, base.since, inside), now_counts, boot, now)
        if (part.boot, part.since) == (base.boot, base.since):  # not taken again, not rolled:
            part.ports.update({k: v for k, v in base.ports.items() if k not in inside})  # the rest stand
        return said, part
    if base is None or base.boot != boot:
        why = "first check" if base is None else "first check since the host booted"
        row = Check("counters", "info", f"{why}: baseline taken; the counters are judged from the next check")
        return [row], Baseline(boot, now, {k: dict(v) for k, v in now_counts.items()})
    elapsed = max(now - base.since, 0.0)
    hours = max(elapsed / WINDOW_S, 1.0)
    rows: list[Check] = []
    kept = Baseline(base.boot, base.since, {k: dict(v) for k, v in base.ports.items()})
    for key, values in sorted(now_counts.items()):
        before = base.ports.get(key)
        if before is None:
            kept.ports[key] = dict(values)
            rows.append(Check(f"counters {key}", "info", "a port new since the baseline: baseline taken"))
            continue
        if any(values.get(n, 0) < before.get(n, 0) for n in NAMES):
            kept.ports[key] = dict(values)
            rows.append(
                Check(f"counters {key}", "info", "counters went back (a reset): baseline taken again")
            )
            continue
        bad = []
        for r in RULES:
            moved = values.get(r.counter, 0) - before.get(r.counter, 0)
            if moved > r.per_hour * hours:
                rate = "" if r.per_hour == 0 else f" (more than {r.per_hour} an hour)"
                bad.append((r, f"{r.counter} +{moved}: {r.words}{rate}"))
        span = f"in {elapsed:.0f} s"
        if bad:
            words = "; ".join(text for _, text in bad) + f", {span}"
            rows.append(Check(f"counters {key}", "fail", words, ADVICE, bad[0][0].cause))
        else:
            rows.append(Check(f"counters {key}", "pass", f"no error counter moved past its rule {span}"))
    for key in sorted(set(base.ports) - set(now_counts)):
        rows.append(Check(f"port {key}", "fail", "at the last check, gone now (a removed device)", GONE,
                          Cause.DEVICE_REMOVED))  # fmt: skip
    if elapsed >= WINDOW_S:  # rolls forward; a port gone stays (it fails until it is back)
        gone = {k: v for k, v in base.ports.items() if k not in now_counts}
        kept = Baseline(base.boot, now, {**gone, **{k: dict(v) for k, v in now_counts.items()}})
    return rows, kept
