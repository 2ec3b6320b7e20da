"""An agent's claim on its address and port for the whole run: a lock file, opened as root may.

The lock lives in a shared directory (/run/lock, else the temporary one), where anyone may have
planted something under its name: it is opened O_NOFOLLOW|O_NONBLOCK and used only if it is a
regular file with one name, owned by the agent's user; anything else is refused in words (the
pairs say ENV), never written through, truncated or waited on.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from rdmacli.engine.status import port_in_use
from rdmacli.errors import Cause, RdmacliError

# /run/lock, then the temp directory: found when first needed (tempfile, with shutil, bz2 and lzma
# under it, is ~60 ms of an agent's start under TCG, and a fleet launch waits for its slowest agent)
LOCK_DIRS: tuple[str, ...] | None = None


def lock_dirs() -> tuple[str, ...]:
    if LOCK_DIRS is not None:
        return LOCK_DIRS
    import tempfile

    return ("/run/lock", tempfile.gettempdir())


class Held:
    """A lock held: its fd (flock'd) and its path. `release` removes the file while it is still
    held, then lets go: no lock file is left behind, and an agent that opened the old file just
    before finds it no longer at its path once it has the lock, and opens the path afresh."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path

    def release(self) -> None:
        try:
            if _same(self.fd, self.path):
                os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)


def _same(fd: int, path: str) -> bool:
    """Whether `path` still names the file open as `fd`."""
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def hold_port(run_id: str, address: str, port: int) -> tuple[Held | None, RdmacliError | None]:
    """This run's claim on an address and port for the agent's whole life (a flock): another
    mesh run's agent for the same address finds it even between pairs, when no listener shows
    (its preflight bind would pass), and says who holds it. (Held, None); (None, why not: the
    port held, or a lock path that is not this user's own regular file); or (None, None) where
    no lock can be made (the bind check still runs). As root nothing else is written: not
    through a link, not a FIFO or device, not a file with another name (a hard link) or owner."""
    name = f"rdmacli-mesh-{address}-{port}.lock"
    for d in lock_dirs():
        path = os.path.join(d, name)
        for _ in range(3):  # the file a holder removed as we locked it: the path afresh
            got = _hold(path, run_id, address, port)
            if got is not AGAIN:
                break
        if got is not NEXT and got is not AGAIN:
            return got  # type: ignore[return-value]
    return None, None


AGAIN, NEXT = object(), object()  # _hold: try the path again; try the next directory


def _hold(path: str, run_id: str, address: str, port: int):
    """One try at `path`: (Held, None), (None, why not), NEXT (no lock can be made here), or
    AGAIN (the file we locked was removed from its path meanwhile)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        return (None, _bad_lock(path, "a symbolic link")) if exc.errno == errno.ELOOP else NEXT
    st = os.fstat(fd)
    why = (
        "not a regular file" if not stat.S_ISREG(st.st_mode)
        else f"a file with {st.st_nlink} names (hard links)" if st.st_nlink != 1
        else f"owned by uid {st.st_uid}, not this agent's" if st.st_uid != os.geteuid()
        else None
    )  # fmt: skip
    if why is not None:
        os.close(fd)
        return None, _bad_lock(path, why)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        said = os.pread(fd, 200, 0).decode("utf-8", "replace")
        os.close(fd)
        holder = "".join(ch for ch in said if ch.isprintable())[:120] or "another process"
        return None, port_in_use("preflight", address, port, [holder], "flock")
    if not _same(fd, path):  # its holder removed it as it let go: the path's file is another now
        os.close(fd)
        return AGAIN
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} (rdmacli mesh-agent, run {run_id})".encode(), 0)
    return Held(fd, path), None


def _bad_lock(path: str, what: str) -> RdmacliError:
    return RdmacliError(
        f"the mesh's lock file {path} is {what}: not written",
        hint="remove it (someone may have planted it); the agent makes its own",
        cause=Cause.ENVIRONMENT,
    )
