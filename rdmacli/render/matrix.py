"""`rdmacli mesh --matrix FILE`: every pair's document, one JSON line each, gzip-compressed.

The summary lists every pair of a small run and only the pairs with trouble of a large one
(verdict.LISTED_PAIRS): a fleet's 4 million healthy pairs belong in a file asked for, not in
what a person or a script reads each time. Written as the verdict makes each document (never
all held at once), into files.writing's temporary file, renamed over FILE at the end. A write
that fails is said as a warning; the run's verdict stands.
"""

from __future__ import annotations

import contextlib
import gzip
import json

from rdmacli.mesh.findings import PairResult
from rdmacli.render import files


class Matrix:
    """A sink for pairs: `add(pair)` writes each one's document; `error` says why the file is not there."""

    def __init__(self, out):
        self.out = out
        self.pairs = 0
        self.error: str | None = None

    def add(self, pair: PairResult) -> None:
        if self.error is None:
            self.out.write(
                json.dumps(pair.to_json(), separators=(",", ":"), allow_nan=False).encode() + b"\n"
            )
            self.pairs += 1


@contextlib.contextmanager
def matrix_file(path: str | None):
    """A Matrix writing to `path` (None: no file, yields None). OSError while writing or at the
    rename is kept in `error` and the temporary file removed; anything else propagates."""
    if path is None:
        yield None
        return
    sink = Matrix(None)
    try:
        with files.writing(path) as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            sink.out = gz
            yield sink
    except OSError as exc:
        sink.error = f"--matrix: could not write {path}: {exc.strerror or exc}"
