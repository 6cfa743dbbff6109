"""The pipeline tests reuse the CLI and fault helpers (plain modules beside those tests, imported by name)."""

from __future__ import annotations

import sys
from pathlib import Path

for helpers in ("cli", "faults"):
    path = str(Path(__file__).resolve().parents[1] / helpers)
    if path not in sys.path:
        sys.path.append(path)
