"""Whether a process has exited, for tests that kill process trees."""

from __future__ import annotations

import os
import time
from pathlib import Path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited all the same.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def wait_dead(pid: int, seconds: float = 5.0) -> bool:
    """Poll until `pid` has exited; False if it is still alive after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False
