"""Run Graphviz safely: a subprocess with a timeout, and a fallback when ``dot`` runs out of time.

``dot`` has no time limit of its own and the ``graphviz`` package's ``pipe``/``render`` have none
either, while real training graphs can keep ``dot`` busy for minutes (``docs/architecture.md``: a 930-op
graph does not finish in 120 s with default settings). So placeviz pipes the DOT text into the
program itself, with a timeout, and when that fails tries, in order:

1. ``dot`` on the view at its box budget (the DOT already carries the mclimit/nslimit limits);
2. ``dot`` on a coarser collapse of the same view (a third of the budget);
3. ``sfdp``, which lays out every collapsed view measured so far in under 2 s (it loses the
   top-down flow and the clusters, which is why it is the last resort).

Each attempt that fails says why on stderr, so a slow render is never silent.

With ``fit=True`` (the default of ``placeviz render`` when ``--max-nodes`` is not given) the budget
is only where the search starts: :func:`placeviz.render.fit.fit_view` collapses the view until
its picture fits a screen, and the fallbacks above apply only when ``dot`` fails on the way.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from placeviz.errors import PlacevizError
from placeviz.interrupts import set_parent_death_signal
from placeviz.render.diagram import Diagram
from placeviz.render.dot import to_dot

FORMATS = ("svg", "png", "pdf", "dot", "html")
COARSER = 3
"""The fallback collapse uses budget // COARSER boxes."""
MIN_BUDGET = 20
SFDP_ATTRS = ("-Goverlap=prism", "-Gsplines=false", "-Goutputorder=edgesfirst")


class GraphvizMissing(PlacevizError):
    """Graphviz's programs are not on PATH."""


class LayoutFailed(PlacevizError):
    """Every layout attempt failed or timed out."""


def install_hint(fmt: str) -> str:
    return (f"writing .{fmt} needs Graphviz's `dot`, which is not installed: install it (apt-get install "
            "graphviz, dnf install graphviz, brew install graphviz, or scripts/ensure-graphviz.sh); "
            ".dot output works without it")


def require_graphviz(fmt: str, engine: str = "dot") -> None:
    if shutil.which(engine) is None:
        raise GraphvizMissing(install_hint(fmt))


class _Attempt(Exception):
    pass


AttemptFailed = _Attempt
"""One Graphviz run that failed or timed out (its message is one line)."""


def run_graphviz(source: str, fmt: str, engine: str = "dot", timeout: float = 30.0, extra=()) -> bytes:
    """``engine -Tfmt`` on ``source``; raises ``_Attempt`` with a one-line reason on timeout or error.

    Graphviz never outlives this call: it runs in its own process group (a terminal's Ctrl-C
    reaches placeviz, which decides), the group is killed on a timeout and on any exception while
    it runs (Ctrl-C's KeyboardInterrupt, SIGTERM's :class:`placeviz.interrupts.Terminated`), and
    on Linux the kernel kills it if placeviz itself is SIGKILLed (``PR_SET_PDEATHSIG``).
    """
    exe = shutil.which(engine)
    if exe is None:
        raise GraphvizMissing(install_hint(fmt))
    launcher, preexec = _death_signal_launcher()
    proc = subprocess.Popen([*launcher, exe, f"-T{fmt}", *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec)
    try:
        out, err = proc.communicate(source.encode("utf-8"), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise _Attempt(f"{engine} did not finish in {timeout:g} s") from None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
            proc.communicate()
    if proc.returncode != 0 or not out:
        message = err.decode("utf-8", "replace").strip().splitlines()
        raise _Attempt(f"{engine} failed (exit {proc.returncode}): {message[0] if message else 'no output'}")
    return out


def _death_signal_launcher() -> tuple[list[str], Callable[[], None] | None]:
    """How Graphviz gets its parent death signal: ``(argv prefix, preexec_fn)``.

    A ``preexec_fn`` makes :mod:`subprocess` ``fork`` the whole placeviz process (``vfork`` is
    only used without one: CPython's ``Modules/_posixsubprocess.c``): with a 200k-op graph loaded
    that costs 40-70 ms per Graphviz run, and ``render`` runs ``dot`` up to a dozen times while
    fitting a picture. util-linux's ``setpriv --pdeathsig KILL`` sets the same ``prctl`` in the
    child and then execs Graphviz (the signal survives ``execve`` for a program that is not
    set-user-ID, ``prctl(2)``), so Python can ``vfork``. Without ``setpriv`` (or with one too old
    to know ``--pdeathsig``, before util-linux 2.33) the ``preexec_fn`` does it, as before;
    elsewhere than Linux there is no parent death signal.
    """
    if not sys.platform.startswith("linux"):
        return [], None
    setpriv = shutil.which("setpriv")
    if setpriv is not None and _knows_pdeathsig(setpriv):
        return [setpriv, "--pdeathsig", "KILL", "--"], None
    return [], set_parent_death_signal


@functools.lru_cache(maxsize=4)
def _knows_pdeathsig(setpriv: str) -> bool:
    """Whether this ``setpriv`` takes ``--pdeathsig`` (asked once per process and path)."""
    try:
        done = subprocess.run([setpriv, "--pdeathsig", "KILL", "--", setpriv, "--version"],
                              capture_output=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@dataclass
class LayoutResult:
    data: bytes
    diagram: Diagram
    engine: str
    budget: int
    seconds: float
    """Wall seconds of the successful Graphviz run."""
    attempts: list[str] = field(default_factory=list)
    """Why earlier attempts failed (empty when the first one worked)."""
    tries: list[str] = field(default_factory=list)
    """With ``fit``: the budgets, orientations and sizes tried (see :mod:`placeviz.render.fit`)."""
    size: tuple[float, float] | None = None
    """With ``fit``: the picture's (width, height) in px at 100 %."""


def lay_out(build: Callable[[int], Diagram], budget: int, fmt: str, timeout: float = 30.0,
            progress: Callable[[str], None] | None = None, diagram: Diagram | None = None,
            fit: bool = False) -> LayoutResult:
    """Render the view ``build(budget)`` to ``fmt`` bytes, falling back as the module docstring says.

    ``diagram``: the view already built at ``budget`` (saves building it twice). ``fit``: collapse
    further until the picture fits a screen, starting at ``budget`` (:mod:`placeviz.render.fit`).
    """
    say = progress or (lambda _m: None)
    require_graphviz(fmt)
    attempts: list[str] = []
    if fit:
        from placeviz.render.fit import fit_view

        try:
            f = fit_view(build, lambda src: run_graphviz(src, "svg", "dot", timeout), budget, say=say)
            started = time.perf_counter()
            data = (f.svg if fmt == "svg" else to_dot(f.diagram).encode() if fmt == "dot"
                    else run_graphviz(to_dot(f.diagram), fmt, "dot", timeout))
            return LayoutResult(data, f.diagram, "dot", f.budget, f.seconds + time.perf_counter() - started, [],
                                f.tries, f.size)
        except _Attempt as e:
            attempts.append(str(e))
            say(f"{e}; laying out at the budget instead")
            diagram = None
    first = diagram if diagram is not None else build(budget)
    plans: list[tuple[str, int, Callable[[], Diagram], float]] = [("dot", budget, lambda: first, timeout)]
    coarse = max(MIN_BUDGET, budget // COARSER)
    if coarse < budget and len(first.boxes) > coarse:
        plans.append(("dot", coarse, lambda: build(coarse), timeout / 2))
    plans.append(("sfdp", budget, lambda: first, timeout))
    for engine, plan_budget, make, limit in plans:
        d = make()
        if engine == "dot" and plan_budget != budget and len(d.boxes) >= len(first.boxes):
            continue  # the view cannot get coarser
        if shutil.which(engine) is None:
            attempts.append(f"{engine} is not installed")
            continue
        say(f"layout of the {d.name} view with {engine}: {len(d.boxes):,} boxes, {len(d.edges):,} edges ...")
        started = time.perf_counter()
        try:
            data = run_graphviz(to_dot(d), fmt, engine, limit, SFDP_ATTRS if engine == "sfdp" else ())
        except _Attempt as e:
            attempts.append(str(e))
            say(f"{e}; trying " + ("a coarser collapse" if engine == "dot" and len(attempts) == 1 and
                                   len(plans) == 3 else "the next fallback"))
            continue
        return LayoutResult(data, d, engine, plan_budget, time.perf_counter() - started, attempts)
    raise LayoutFailed(f"could not lay out the {first.name} view: " + "; ".join(attempts))
