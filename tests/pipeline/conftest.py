"""The pipeline tests reuse the CLI and fault helpers (plain modules beside those tests, imported by name)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# before any test module imports Ray: otherwise Ray rewrites 127.0.0.1 to this VM's own address, and a
# ray.cluster_utils cluster bound to 127.0.0.1 hangs on connect (../shared/research/distributed-engines.md)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

for helpers in ("cli", "faults"):
    path = str(Path(__file__).resolve().parents[1] / helpers)
    if path not in sys.path:
        sys.path.append(path)
