"""Live scoring: follow growing logs and write alerts as their records arrive.

* :mod:`~fedep.live.loop`: :class:`Watcher` and its :class:`WatchConfig` (``fedep watch``);
* :mod:`~fedep.live.positions`: the position file and the exactly-once batch write;
* :mod:`~fedep.live.models`: the current model and its hot swap.

The following of files (rotation, truncation, positions) is :mod:`fedep.data.follow`;
parsing blocks of lines, :mod:`fedep.data.readers.lines`; alerts and their sink,
:mod:`fedep.alerts`.
"""

from __future__ import annotations

from fedep.live.loop import WatchConfig, Watcher, WatchStopped
from fedep.live.positions import Positions

__all__ = ["Positions", "WatchConfig", "WatchStopped", "Watcher"]
