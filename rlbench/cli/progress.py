"""A rich progress bar fed by the training callback (one update per iteration, never per step)."""

from __future__ import annotations

import math
from typing import Any

from rlbench.instrument.callbacks import Callback, IterationInfo


def start_bars(unit: str, *fields: str, title: str = "{task.description}", refresh_per_second: int = 4) -> Any:
    """A started rich ``Progress`` on stderr: title (bold), bar, ``k/N unit``, one text column per task field, elapsed
    time.

    Every column is plain text, never rich markup: a description or field holds user text (a benchmark's name, a
    parameter's value, a commit's subject), and ``[/]`` in it would make rich's refresh thread raise, ``[link=...]``
    a hyperlink. Keep ``refresh_per_second`` low where timed code runs beside it: the refresh thread takes the GIL.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn(title, style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit, markup=False),
        *(TextColumn(f"{{task.fields[{f}]}}", markup=False) for f in fields),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        refresh_per_second=refresh_per_second,
        transient=False,
    )
    progress.start()
    return progress


class Bars:
    """Owner of a started ``Progress`` (``self.progress``, ``None`` when disabled) that, as a context manager, stops
    it on the way out and removes the bars when the block raised: a failed or interrupted command ends with its
    one-line message only."""

    progress: Any = None

    def discard(self) -> None:
        """Remove the bars when the display stops."""
        if self.progress is None:
            return
        if self.progress.console.is_terminal:
            self.progress.live.transient = True  # erase the bars
        else:
            self.progress.console.quiet = True  # a log, not a screen: print nothing more (not even an empty line)

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self.progress is not None:
            if exc_type is not None:
                self.discard()
            self.progress.stop()


class _RepeatProgress(Callback):
    def __init__(self, owner: TrainingProgress, repeat: int) -> None:
        self.owner = owner
        self.repeat = repeat
        self.task = None

    def on_train_start(self, info: dict[str, Any]) -> None:
        total = info["iterations"] * info["steps_per_iteration"]
        if self.owner.progress is not None:
            label = self.owner.label(self.repeat) + (f" [{info['label']}]" if info.get("label") else "")
            self.task = self.owner.progress.add_task(label, total=total, sps="", ret="")

    def on_iteration_end(self, it: IterationInfo) -> bool | None:
        if self.owner.progress is not None and self.task is not None:
            sps = it.env_steps / it.elapsed_s if it.elapsed_s > 0 else 0.0
            ret = "" if math.isnan(it.recent_return) else f"training return {it.recent_return:6.1f}"
            self.owner.progress.update(self.task, completed=it.env_steps, sps=f"{sps:,.0f} SPS", ret=ret)
        return None


class TrainingProgress(Bars):
    """Context manager owning a rich ``Progress`` on stderr; ``callback(repeat)`` makes a per-repeat callback.

    Args:
        name: Benchmark id shown in the bar.
        repeats: Number of repeats (shown as ``k/K``).
        enabled: ``False`` shows nothing (``--quiet``).
    """

    def __init__(self, name: str, repeats: int, enabled: bool = True) -> None:
        self.name = name
        self.repeats = repeats
        self.enabled = enabled
        self.progress: Any = None

    def label(self, repeat: int) -> str:
        """Description of one repeat's bar."""
        return self.name if self.repeats == 1 else f"{self.name} {repeat + 1}/{self.repeats}"

    def callback(self, repeat: int) -> Callback:
        """The callback for repeat ``repeat``."""
        return _RepeatProgress(self, repeat)

    def __enter__(self) -> TrainingProgress:
        if self.enabled:
            self.progress = start_bars("steps", "sps", "ret")
        return self


class CaseProgress(Bars):
    """A rich bar over every case of a fanned-out run (``--backend ray``), advanced as each case's records land.

    Args:
        name: Benchmark id shown in the bar.
        enabled: ``False`` shows nothing (``--quiet``).
    """

    def __init__(self, name: str, enabled: bool = True) -> None:
        self.name = name
        self.enabled = enabled
        self.progress: Any = None
        self.task: Any = None
        self.failed = 0

    def __enter__(self) -> CaseProgress:
        if self.enabled:
            self.progress = start_bars("cases", "last")
        return self

    def plan(self, cases: list[Any]) -> None:
        """Set the total: every case of the matrix."""
        if self.progress is not None:
            self.task = self.progress.add_task(f"{self.name} on ray", total=len(cases), last="")

    def done(self, case: Any, reason: str | None) -> None:
        """One case ended: saved, or failed for ``reason``."""
        self.failed += reason is not None
        if self.progress is not None and self.task is not None:
            last = f"{case.label} failed" if reason else f"{case.label} saved"
            failed = f" ({self.failed} failed)" if self.failed else ""
            self.progress.update(self.task, advance=1, last=last + failed)
