"""The fabric's probe key (`watch run --key-file`): 16 random bytes as 32 hex digits, the same
file on every node, readable by the agent alone. It keys the probe datagrams' and SIDR tokens'
tags (probe/wire.py) and the windows' run ids, so that a process on the fabric without it can
neither forge a probe or an answer nor learn which run a window is.

A key file is refused when anyone but its owner may read it (as ssh refuses a private key):
a key every user of a host can read protects nothing from them."""

from __future__ import annotations

import os
import secrets
import stat

from rdmacli.errors import Cause, RdmacliError
from rdmacli.probe.siphash import KEY_BYTES

MAX_BYTES = 256
HINT = "make one with `rdmacli watch key FILE` and copy it to every node (mode 0600)"


def read_key(path: str) -> bytes:
    """The key in `path`, checked: a regular file, 32 hex digits (a newline allowed), mode
    0600 or stricter. Every refusal is a usage error (exit 2) that says what to change."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise RdmacliError(f"--key-file {path}: {exc.strerror}", hint=HINT, cause=Cause.USAGE) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise RdmacliError(f"--key-file {path}: not a regular file", hint=HINT, cause=Cause.USAGE)
    with os.fdopen(fd, "rb") as f:
        if st.st_uid not in (0, os.geteuid()):  # its owner could change it, or hand it out
            raise RdmacliError(
                f"--key-file {path}: owned by uid {st.st_uid}, neither root nor this agent's user",
                hint=f"chown root {path}",
                cause=Cause.USAGE,
            )
        if st.st_mode & 0o077:
            raise RdmacliError(
                f"--key-file {path}: mode {stat.S_IMODE(st.st_mode):04o}: others may read it",
                hint=f"chmod 600 {path}",
                cause=Cause.USAGE,
            )
        raw = f.read(MAX_BYTES + 1)
    text = raw.decode("ascii", "replace").strip()
    hexed = all(c in "0123456789abcdefABCDEF" for c in text)
    if len(raw) > MAX_BYTES or len(text) != 2 * KEY_BYTES or not hexed:
        raise RdmacliError(
            f"--key-file {path}: not a key ({2 * KEY_BYTES} hex digits)", hint=HINT, cause=Cause.USAGE
        )
    return bytes.fromhex(text)


def write_key(path: str) -> None:
    """A new key in `path`, made 0600 and never over an existing file."""
    import errno

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        hint = (
            "a key file is never overwritten: remove the old one first, knowingly"
            if exc.errno in (errno.EEXIST, errno.ELOOP)
            else "give a path in a directory that exists and that you may write"
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EROFS, errno.EPERM)
            else None
        )
        raise RdmacliError(f"{path}: {exc.strerror}", hint=hint, cause=Cause.USAGE) from None
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(KEY_BYTES) + "\n")
