"""tests/ui: the status page in a real browser. The engine button test borrows tests/engines' podman rig."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engines"))

from engine_rig import podman  # noqa: E402

__all__ = ["podman"]
