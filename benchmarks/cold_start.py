"""Where a cold ``placeviz lint`` of a small graph spends its CPU, step by step, in one process.

    python benchmarks/cold_start.py GRAPH.pb

Imports the pieces in the order ``placeviz lint`` does, then runs the command itself (everything
imported by then), and prints the CPU time (``time.process_time``) of each step: what the
``Cold start`` section of ``benchmarks/README.md`` tabulates. The interpreter's own start-up is
not in it (``python -c pass``). Never imports TensorFlow; never used by tests.
"""

from __future__ import annotations

import sys
import time

T0 = time.process_time()
_marks: list[tuple[str, float]] = []


def _mark(what: str) -> None:
    _marks.append((what, time.process_time()))


def main(graph: str) -> None:
    import click  # noqa: F401

    _mark("import click")
    import placeviz.cli  # noqa: F401

    _mark("import placeviz.cli")
    import placeviz.protos  # noqa: F401

    _mark("import placeviz.protos")
    import placeviz.io

    _mark("import placeviz.io")
    import placeviz.commands.lint  # noqa: F401

    _mark("import placeviz.commands.lint")
    from placeviz.lint.discovery import load_rules

    load_rules()
    _mark("load the rule modules")
    from placeviz.ops import load_op_table

    load_op_table()
    _mark("the op-facts table")
    import numpy  # noqa: F401

    _mark("import numpy")
    placeviz.io.load(graph)
    _mark("io.load")
    import placeviz.agreement  # noqa: F401
    import placeviz.lint.engine  # noqa: F401
    import placeviz.pipeline  # noqa: F401

    _mark("import lint.engine, pipeline, agreement")
    from placeviz.cli import main as cli_main

    try:
        cli_main(["--quiet", "lint", graph, "-o", "/dev/null"])
    except SystemExit:
        pass
    _mark("the lint command, everything imported")
    previous = T0
    for what, t in _marks:
        print(f"{what:45s} {1000 * (t - previous):7.1f} ms")
        previous = t
    print(f"{'total CPU in this process':45s} {1000 * (previous - T0):7.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1])
