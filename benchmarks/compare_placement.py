"""Digest ``place_graph``'s whole result on the generated graphs, to compare two versions of placeviz.

A speed-up must not change a single result. Run this once in each tree (old and new, or with and
without ``PLACEVIZ_NO_KERNELS=1``) and compare the digests: for each graph and configuration, one
SHA-256 over the result graph (names, ops, devices, inputs, name index, colocation, GraphDef
bytes), the placement (devices, reasons, group roots, candidates, explanations of every 997th
node) and the setter's rules, references and strategy calls.

Examples:
  PYTHONPATH=/tmp/old python benchmarks/compare_placement.py --out /tmp/old.json
  python benchmarks/compare_placement.py --against /tmp/old.json
  PLACEVIZ_NO_KERNELS=1 python benchmarks/compare_placement.py --sizes 10k,50k --against /tmp/old.json

Exit code 1 when ``--against`` finds a digest that differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
from pathlib import Path

GRAPHS = Path(__file__).parent / "graphs"


def _configs():
    from placeviz.placement import PlacementOptions
    from placeviz.placement.placer import PlacerConfig
    from placeviz.placement.setter import SetterConfig

    return {
        "ps4": PlacementOptions(setter=SetterConfig(ps_tasks=4, worker_device="/job:worker/task:0")),
        "greedy3": PlacementOptions(setter=SetterConfig(ps_tasks=3, strategy="greedy",
                                                        worker_device="/job:worker/task:0")),
        "ps2-no-merge-soft": PlacementOptions(setter=SetterConfig(ps_tasks=2, merge_devices=False),
                                              placer=PlacerConfig(allow_soft_placement=True)),
        "ps2-global-graph": PlacementOptions(setter=SetterConfig(ps_tasks=2, graph_as_default=False)),
    }


def digest(result) -> str:
    """One SHA-256 over everything ``place_graph`` returned."""
    g, p, s = result.graph, result.placement, result.setter
    h = hashlib.sha256()
    sample = range(0, len(g), 997)
    for part in (list(g.names), list(g.ops), list(g.devices), g.in_start.tolist(), g.in_src.tolist(),
                 g.in_slot.tolist(), sorted(g.index.items()), list(g.colocation.items()),
                 list(g.colocated_names.items()), list(p.devices), list(p.reason), list(p.group_root),
                 list(p.candidates.items()), list(s.rule), list(s.reference.items()), list(s.strategy_calls),
                 [p.explain(i) for i in sample], [s.explain(i) for i in sample]):
        h.update(pickle.dumps(part))
    h.update(g.graph_def.SerializeToString(deterministic=True))
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10k,50k,200k", help="generated sizes (default 10k,50k,200k)")
    ap.add_argument("--graph-dir", type=Path, default=GRAPHS)
    ap.add_argument("--out", type=Path, help="write the digests here (JSON)")
    ap.add_argument("--against", type=Path, help="compare with digests written by --out")
    args = ap.parse_args(argv)

    from placeviz.io import load
    from placeviz.ops import load_op_table
    from placeviz.placement import place_graph

    op_table = load_op_table()
    digests: dict[str, str] = {}
    for size in args.sizes.split(","):
        for variant in (f"g{size}", f"g{size}_sync"):
            path = args.graph_dir / f"{variant}.unplaced.pb"
            if not path.exists():
                print(f"missing {path} (python benchmarks/gen_graphs.py --sizes {size})", file=sys.stderr)
                return 2
            model = load(path)
            for name, options in _configs().items():
                key = f"{variant} {name}"
                digests[key] = digest(place_graph(model.graph, options, op_table=op_table))
                print(f"{key:32s} {digests[key][:16]}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(digests, indent=1) + "\n")
    if args.against:
        other = json.loads(args.against.read_text())
        compared = [k for k in digests if k in other]
        differ = [k for k in compared if digests[k] != other[k]]
        for k in differ:
            print(f"DIFFERS: {k}")
        print(f"{len(compared) - len(differ)} of {len(compared)} equal")
        return 1 if differ or not compared else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
