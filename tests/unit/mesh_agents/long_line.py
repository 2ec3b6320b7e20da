"""A stand-in mesh agent that prints MiB (argv) bytes with no newline, then a newline and a line
`after`: a liar's endless line. No RDMA."""

from __future__ import annotations

import sys


def main() -> None:
    mib = int(sys.argv[1])
    chunk = b"x" * (1 << 20)
    for _ in range(mib):
        sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.write(b"\nafter\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
