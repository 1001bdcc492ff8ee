"""Copies a JVM's stderr (this process's stdin) to stderr, less one line: the warning the
JVM prints at boot about the incubator module Spark's launcher always adds (see
``quiet_spark``).

A process of its own rather than a thread of the job's, so that it lasts exactly as long
as the JVM's stderr does: whatever the JVM says last, after the job's interpreter has begun
to exit, still gets through.
"""

from __future__ import annotations

import signal
import sys

INCUBATOR_WARNING = b"WARNING: Using incubator modules:"


def main() -> None:
    # Ctrl-C reaches every process of the terminal's group; the JVM ignores it (PySpark
    # starts it so) and this copy must outlive it to the end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for line in sys.stdin.buffer:
        if not line.startswith(INCUBATOR_WARNING):
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()


if __name__ == "__main__":
    main()
