"""The cyclic garbage collector paused while a task pair moves records.

Records are acyclic and freed by reference counting; the cyclic collector would re-scan every
record in flight many times per epoch. An epoch or bridge pauses it (the runner collects the young
generations at each commit point instead). Counted: a process runs many pairs at once (shared
hosting), and the collector comes back when the last of them ends, as it was.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["gc_pause", "gc_resume"]

_GC_LOCK = threading.Lock()
_GC_PAUSES = [0, False]  # epochs and bridges running with the cyclic collector paused; was it enabled before


def gc_pause() -> None:
    """Pause the cyclic collector for an epoch or bridge (one :func:`gc_resume` each)."""
    with _GC_LOCK:
        if _GC_PAUSES[0] == 0:
            _GC_PAUSES[1] = gc.isenabled()
            gc.disable()
        _GC_PAUSES[0] += 1


def gc_resume() -> None:
    with _GC_LOCK:
        _GC_PAUSES[0] -= 1
        if _GC_PAUSES[0] == 0 and _GC_PAUSES[1]:
            gc.enable()
