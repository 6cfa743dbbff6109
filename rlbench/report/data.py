"""Access to one run's records, shaped for reports (per-repeat values, medians, phase trees).

:func:`select_run` is re-exported from :mod:`rlbench.results.store`, where run selection lives.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rlbench.analysis.stats import Summary, median, summarize
from rlbench.results.records import Record, role_of
from rlbench.results.store import select_run

__all__ = ["RunData", "role_of", "select_run"]


@dataclass
class RunData:
    """One run's records indexed by metric.

    Attributes:
        records: The run's records of its main process's main thread (every record without ``meta.role``).
        by_metric: Those records per metric name, ordered by repeat.
        role_records: The records of every other role a profile followed (its threads, its processes), each with
            ``meta.role`` (:mod:`rlbench.report.roles` renders them).
    """

    records: list[Record]
    by_metric: dict[str, list[Record]] = field(default_factory=dict)
    role_records: list[Record] = field(default_factory=list)

    @classmethod
    def from_records(cls, records: list[Record]) -> RunData:
        """Index records (all from one run) by metric; records of other roles are kept apart."""
        by_metric: dict[str, list[Record]] = defaultdict(list)
        main, roles = [], []
        for r in records:
            (roles if role_of(r) else main).append(r)
        for r in main:
            by_metric[r.metric].append(r)
        for recs in by_metric.values():
            recs.sort(key=lambda r: r.repeat)
        return cls(main or records, dict(by_metric), roles)

    @property
    def first(self) -> Record:
        """A representative record (fingerprint, params, benchmark are shared by the run)."""
        return min(self.records, key=lambda r: (r.repeat, r.metric))

    @property
    def repeats(self) -> int:
        """Number of repeats present."""
        return len({r.repeat for r in self.records})

    @property
    def seeds(self) -> list[Any]:
        """Seed of each repeat."""
        return [r.seed for r in sorted({r.repeat: r for r in self.records}.values(), key=lambda r: r.repeat)]

    def has(self, metric: str) -> bool:
        """Whether the run recorded ``metric``."""
        return metric in self.by_metric

    def per_repeat(self, metric: str) -> list[float]:
        """One value per repeat: the single sample, or the mean of a repeat's samples."""
        out = []
        for r in self.by_metric.get(metric, []):
            xs = [v for v in r.samples if math.isfinite(v)]
            out.append(sum(xs) / len(xs) if xs else math.nan)
        return out

    def med(self, metric: str) -> float:
        """Median over repeats of :meth:`per_repeat` (NaN when absent)."""
        return median(self.per_repeat(metric))

    def summary(self, metric: str) -> Summary:
        """Summary over repeats of :meth:`per_repeat`."""
        return summarize(self.per_repeat(metric))

    def pooled(self, metric: str) -> list[float]:
        """Every sample of every repeat."""
        return [v for r in self.by_metric.get(metric, []) for v in r.samples]

    def meta(self, metric: str, key: str, default: Any = None) -> Any:
        """A meta field of the first record of ``metric``."""
        recs = self.by_metric.get(metric)
        return recs[0].meta.get(key, default) if recs else default

    def phases(self) -> list[str]:
        """Phase names with a ``time/<phase>`` metric, in recorded order."""
        return [m[len("time/") :] for m in self.by_metric if m.startswith("time/")]
