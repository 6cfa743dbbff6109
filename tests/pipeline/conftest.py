"""The pipeline tests reuse the CLI helpers (a plain module beside those tests, imported by name)."""

from __future__ import annotations

import sys
from pathlib import Path

_CLI = str(Path(__file__).resolve().parents[1] / "cli")
if _CLI not in sys.path:
    sys.path.append(_CLI)
