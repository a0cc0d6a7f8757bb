"""A test hook: with GENIE_TEST_PAUSE_AT set to one of :data:`PAUSE_POINTS`, genie stops
there (after saying so on stderr) so that a test can kill it at that point."""

from __future__ import annotations

import os
import sys
import time

PAUSE_POINTS = ("render", "staging", "rename", "replace")


def pause_point(name: str) -> None:
    if os.environ.get("GENIE_TEST_PAUSE_AT") == name:
        sys.stderr.write(f"GENIE_TEST_PAUSED {name}\n")
        sys.stderr.flush()
        time.sleep(3600)
