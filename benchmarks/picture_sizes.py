#!/usr/bin/env python3
"""Size, boxes and time of every default view of each MODEL, as ``placeviz render`` draws them.

    placeviz samples build inception -o inception.meta --ps-tasks 2 --sync-replicas
    python benchmarks/picture_sizes.py inception.meta [--png DIR]

Prints one row per view: the picture's size in px at 100 % (its long side must stay within
``placeviz.render.fit.MAX_SIDE_PX``), the boxes drawn and the budget the fit chose, how many
layouts the search took and its wall time. ``--png DIR`` also writes each picture as a PNG, to
look at. The graph is placed as it is (``--ps-tasks 0``: the devices written in it).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from placeviz.pipeline import Options, run_pipeline
from placeviz.placement import PlacementOptions
from placeviz.placement.setter import SetterConfig
from placeviz.render import VIEWS, ViewContext, build_view
from placeviz.render.dot import to_dot
from placeviz.render.fit import MAX_SIDE_PX, start_budget
from placeviz.render.layout import lay_out, run_graphviz


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--png", type=Path, help="write each picture as DIR/MODEL.VIEW.png")
    args = ap.parse_args()
    if args.png:
        args.png.mkdir(parents=True, exist_ok=True)
    print(f"{'model':28} {'view':9} {'size (px)':>15} {'fits':>4} {'boxes':>5} {'labels alike':>12} "
          f"{'layouts':>7} {'seconds':>7}")
    for model in args.models:
        ctx = ViewContext(run_pipeline(str(model), Options(placement=PlacementOptions(setter=SetterConfig(ps_tasks=0)))))
        for view in VIEWS:
            started = time.perf_counter()
            result = lay_out(lambda b, v=view, c=ctx: build_view(c, v, max_nodes=b), start_budget(view), "svg", fit=True)
            seconds = time.perf_counter() - started
            w, h = result.size or (float("nan"), float("nan"))
            alike = sum(n - 1 for n in Counter(b.label for b in result.diagram.boxes).values() if n > 1)
            print(f"{model.stem:28} {view:9} {w:7,.0f} x {h:5,.0f} {'yes' if max(w, h) <= MAX_SIDE_PX else 'NO':>4} "
                  f"{len(result.diagram.boxes):5} {alike:12} {len(result.tries):7} {seconds:7.1f}", flush=True)
            if args.png:
                png = run_graphviz(to_dot(result.diagram), "png")
                (args.png / f"{model.stem}.{view}.png").write_bytes(png)


if __name__ == "__main__":
    main()
