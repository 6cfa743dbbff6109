"""``python -m rlbench`` runs the command line."""

from __future__ import annotations

from rlbench.cli import console_main

console_main()
