"""Engines that place the pipeline's roles in processes or actors: one small interface, each imported lazily.

* ``local`` (:mod:`.local`): processes on this machine, no extra dependency (the default);
* ``ray`` (:mod:`.ray_engine`): Ray actors, on a local Ray or a cluster (``--address``); extra ``rlbench[ray]``;
* ``monarch`` (:mod:`.monarch_engine`, experimental): Monarch actors on process meshes of this host, weights through
  an ``RDMABuffer``; extra ``rlbench[monarch]``.

:func:`get_engine` returns an engine's ``run(config) -> PipelineRun`` function; an engine whose library is missing
fails with a one-line error naming the ``pip install``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rlbench.core.errors import UsageError

ENGINES = {
    "local": ("rlbench.engines.local", None),
    "ray": ("rlbench.engines.ray_engine", "ray"),
    "monarch": ("rlbench.engines.monarch_engine", "monarch"),
}
EXTRAS = {"ray": "pip install 'rlbench[ray]'", "monarch": "pip install 'rlbench[monarch]'"}


def get_engine(name: str) -> Callable[[Any], Any]:
    """The ``run`` function of engine ``name``.

    Raises:
        UsageError: For an unknown engine, or one whose library is not installed.
    """
    if name not in ENGINES:
        raise UsageError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    module, library = ENGINES[name]
    if library is not None and importlib.util.find_spec(library) is None:
        raise UsageError(f"--engine {name} needs {library}, which is not installed: {EXTRAS[name]}")
    return importlib.import_module(module).run
