"""``python -m rlbench`` runs the command line."""

from __future__ import annotations

import sys

from rlbench.cli import main

sys.exit(main())
