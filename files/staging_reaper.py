"""Remove a release's staging directory when the release process ends, SIGKILL included.

Started by `files.staging_dir.StagingDir.create` as
``python -I -S staging_reaper.py FD DIRECTORY`` (standard library only, so it
starts in milliseconds). FD is the read end of a pipe whose only write end the
release holds; the kernel closes it when the release exits for any reason,
and the read below then returns end-of-file. The reaper detaches first (a
double fork, so the release never waits for it), ignores the terminal's
signals (Ctrl-C and hang-up are the release's to handle), waits for that
end-of-file, and deletes DIRECTORY (raw input chunks and noise seeds). After a
normal end the release has already deleted it, and the reaper just exits.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys


def main(argv: list[str]) -> int:
    """Wait for the release to end, then delete its staging directory; return 0."""
    fd, directory = int(argv[1]), argv[2]
    if os.fork() > 0:          # the release waits only for this first process
        os._exit(0)
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            if not os.read(fd, 4096):
                break
        except InterruptedError:
            continue
    shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
