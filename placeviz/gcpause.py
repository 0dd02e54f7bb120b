"""Pausing Python's cyclic garbage collector while placeviz builds graph-sized structures.

CPython's collector runs a full pass whenever the objects that survived earlier passes have grown
by a quarter since the last one, and a full pass visits every live container. A run over a
200k-node graph keeps millions of lists, tuples and dicts alive (the graph's tables, the
placement, one dict per transfer, the report), so those passes cost a quarter of ``analyze``,
``lint`` and ``render`` while finding nothing: placeviz's own structures hold no reference cycles.
Stdlib only, so that the command line can use it before anything heavy is imported.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """Pause the cyclic garbage collector while a pass builds many small objects.

    At 100k+ nodes the GC's periodic full collections traverse every live container (the graph's
    own lists and tuples included) and cost more than the pass itself; nothing built in these
    passes forms reference cycles that would need collecting. Nests: only the outermost pause
    turns the collector back on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def gc_running():
    """The collector on while code that is not placeviz's builds objects: TensorFlow's graph
    construction (a sample, a user's builder) makes temporaries in reference cycles, which only the
    collector frees, so a big build inside :func:`gc_paused` would hold them all until exit."""
    was_enabled = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was_enabled:
            gc.disable()
