"""Files a run writes for others to read (`--prometheus`, `--matrix`): atomically, and as root
nothing but a regular file. A temporary file is made O_EXCL|O_NOFOLLOW with a random name in the
target's directory, written whole and renamed over the target, so a reader never sees half a
file; what the path names must be a regular file or nothing (not a device, a FIFO, a link or a
directory), checked before and again just before the rename."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

PREFIX = ".rdmacli-mesh."


CHECK_BYTES = 64 << 10  # what the start check writes: a full disk refuses it (an empty file it makes)


def check(path: str, size: int = CHECK_BYTES) -> None:
    """Can `path` be written, and only as a regular file? Tried for real before a run starts:
    a temporary file in its directory written with `size` bytes and synced, then removed (a
    full disk still lets an empty file be made, and a run that checked only that died later).
    OSError says why not."""
    _target(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=PREFIX)
    try:
        view = memoryview(bytes(size))
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(tmp)


def _target(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"))
        what = next((name for test, name in kinds if test(st.st_mode)), "not a regular file")
        raise OSError(f"{path} is {what}: only a regular file is replaced")


@contextlib.contextmanager
def writing(path: str):
    """A binary file to write the new content of `path` into, renamed over it when the block
    ends without an exception (removed otherwise); nothing but a regular file is replaced."""
    _target(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=PREFIX)
    try:
        os.fchmod(fd, 0o644)  # node_exporter (or a person) reads it as another user
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        _target(path)  # again: nothing may have been put there meanwhile
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def replace(path: str, data: bytes) -> None:
    """data as the file at path, atomically."""
    with writing(path) as f:
        f.write(data)
