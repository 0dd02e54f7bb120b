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

    When the process holds its results until it ends (:func:`hold_until_exit`), the objects made
    in the pause are moved to the collector's permanent generation first (``gc.freeze``): else the
    first allocation after the pause starts a collection of the youngest generation, which then
    holds every container made while paused and still alive (at 200k ops, 0.16-0.3 s CPU of a
    ``render`` after its last line), to free nothing before ``os._exit``.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if _kept is not None:
                gc.freeze()
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


_kept: list[object] | None = None
"""What :func:`keep_until_exit` holds; None: nothing is held (``placeviz.cli.run`` turns it on)."""


def keep_until_exit(*objects: object) -> None:
    """Hold ``objects`` until the process ends, when :func:`hold_until_exit` was called (the
    ``placeviz`` program's entry point, which then ends with ``os._exit``); else do nothing.

    Why: a command's model, pipeline and report are millions of small objects, freed one by one
    when the command returns (0.11-0.15 s CPU of ``analyze`` at 200k nodes, 0.6 s at 1M) just
    before the process ends and the OS takes the memory back whole. Held here, they never are.
    Tests run commands in-process through ``placeviz.cli.main``, where nothing is held.
    """
    if _kept is not None:
        _kept.append(objects)


def hold_until_exit() -> None:
    """From now on :func:`keep_until_exit` holds what it is given (see there)."""
    global _kept
    if _kept is None:
        _kept = []
