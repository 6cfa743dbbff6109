"""rlbench: benchmarking and profiling harness for reinforcement-learning training code.

``rlbench.load(path)`` returns stored records as a tidy pandas DataFrame; the ``rlbench`` command
runs benchmarks and renders reports.
"""

from __future__ import annotations

from rlbench.store import load

__all__ = ["load"]
