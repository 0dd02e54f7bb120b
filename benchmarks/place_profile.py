"""Repeat ``place_graph`` (setter + placer) on one loaded graph and show where its time goes.

``run.py`` gives the median of a few repetitions; this shows each repetition's user and system
CPU and minor page faults (on a noisy host, and at 1M nodes while the heap grows, they differ a
lot), and with ``--cprofile N`` the N largest items of a profile of one more repetition. Before
each repetition it drops what a repetition caches on the loaded graph (the op-fact attr keys, the
``_class`` name lookups), as ``run.py`` does, so every repetition pays what a command pays.

Examples:
  python benchmarks/place_profile.py 200k --reps 7
  python benchmarks/place_profile.py 1m --reps 4 --cprofile 25
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import sys
from pathlib import Path

GRAPHS = Path(__file__).parent / "graphs"
PS_TASKS = 4


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("size", help="a generated size (10k, 50k, 200k, 1m): its .unplaced.pb is placed")
    ap.add_argument("--graph-dir", type=Path, default=GRAPHS)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cprofile", type=int, metavar="N", default=0, help="profile one more repetition")
    args = ap.parse_args(argv)

    from placeviz.io import load
    from placeviz.ops import load_op_table
    from placeviz.placement import PlacementOptions, place_graph
    from placeviz.placement.setter import SetterConfig

    graph = load(args.graph_dir / f"g{args.size}.unplaced.pb").graph
    graph.colocation, graph.colocated_names  # noqa: B018 - read once, as run.py's setup does
    op_table = load_op_table()
    options = PlacementOptions(setter=SetterConfig(ps_tasks=PS_TASKS, worker_device="/job:worker/task:0"))

    def forget() -> None:
        graph.clear_caches("located_names", "colocated_name_ids")
        graph.reset_caches("attr_keys")  # the keys io.load read with the nodes stay

    print(f"g{args.size}: {len(graph):,} nodes; place_graph with ps_tasks={PS_TASKS}")
    print("rep   user s   sys s   CPU s   minor faults")
    for rep in range(args.reps):
        forget()
        before = resource.getrusage(resource.RUSAGE_SELF)
        result = place_graph(graph, options, op_table=op_table)
        after = resource.getrusage(resource.RUSAGE_SELF)
        user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
        print(f"{rep:3d}  {user:7.3f} {system:7.3f} {user + system:7.3f}   {after.ru_minflt - before.ru_minflt:,}")
        result = None  # noqa: F841 - freed before the next repetition
    if args.cprofile:
        forget()
        profile = cProfile.Profile()
        profile.enable()
        place_graph(graph, options, op_table=op_table)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
