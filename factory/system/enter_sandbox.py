"""Start a command in bubblewrap's sandbox, and start it again where bubblewrap's own set-up
failed before the command ran.

bwrap binds the whole file system into the sandbox and then remounts each mount under it
read-only. A mount that goes away in between (a container's file system, unmounted when a
container of a docker build beside this one ends) makes that remount fail, and bwrap exits
before the command ran ("Can't bind mount /oldroot/ on /newroot/: Unable to apply mount
flags: ... Invalid argument"): one start in a few hundred while containers come and go.

Run as `python -I -S enter_sandbox.py BWRAP [bwrap's arguments]`, this program gives bwrap a
status pipe (`--json-status-fd`), on which bwrap writes an exit code only once the command
was started. Where none came and bwrap failed as its set-up fails (exit status 1), nothing of
the command ran: bwrap is started again, a moment later, a few times. Otherwise bwrap's exit
status (the command's) is this program's. The sandbox never sees the pipe (bwrap closes it
before it starts the command), so what runs there cannot make the factory start it again.

The standard library only: it runs with the factory's interpreter, isolated (-I -S).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

ATTEMPTS = 4
FIRST_PAUSE = 0.1  # seconds before the second attempt; doubled before each one after it
SET_UP_FAILED = 1  # bwrap's exit status when it gives up before starting the command


def started(bwrap: str, options: list[str]) -> tuple[int, bool]:
    """bwrap's exit status, and whether it started the command."""
    read, write = os.pipe()
    try:
        child = subprocess.Popen([bwrap, "--json-status-fd", str(write), *options],
                                 pass_fds=(write,))
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as status:
        reports = status.read()
    return child.wait(), b'"exit-code"' in reports


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: enter_sandbox.py BWRAP [bwrap's arguments]\n")
        return 2
    bwrap, options = argv[0], argv[1:]
    pause = FIRST_PAUSE
    for attempt in range(1, ATTEMPTS + 1):
        try:
            status, ran = started(bwrap, options)
        except OSError as exc:
            sys.stderr.write(f"enter_sandbox: {bwrap} cannot be run ({exc.strerror or exc})\n")
            return 127
        if ran or status != SET_UP_FAILED or attempt == ATTEMPTS:
            return status if status >= 0 else 128 - status
        sys.stderr.write(f"enter_sandbox: the sandbox's set-up failed before its command "
                         f"started; starting it again ({attempt + 1} of {ATTEMPTS})\n")
        sys.stderr.flush()
        time.sleep(pause)
        pause *= 2
    return SET_UP_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
