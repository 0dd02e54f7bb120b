"""What recording each op's source line costs a builder MODEL (placeviz.sources.from_tf_graph).

Builds the benchmark model of ``gen_graphs.py`` with TensorFlow at the given sizes and times, per
graph: reading every op's creation stack into source lines, and ``export_meta_graph`` (which a
builder MODEL always pays) for scale. Imports TensorFlow. Not a test: numbers vary by machine.

    .venv/bin/python benchmarks/source_lines.py --sizes 10k,50k
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gen_graphs import build_tf_graph, layers_for, parse_size  # noqa: E402
from placeviz.sources import from_tf_graph  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10k,50k", help="approximate node counts, comma-separated")
    args = ap.parse_args(argv)
    from placeviz.tflog import quiet_tensorflow

    quiet_tensorflow()
    print(f"{'nodes':>8} {'source lines':>12} {'read stacks s':>13} {'export s':>9}")
    for size in (parse_size(s) for s in args.sizes.split(",")):
        layers, _ = layers_for(size, sync=False)
        graph, _ = build_tf_graph(layers, sync=False)
        import tensorflow as tf

        t0 = time.perf_counter()
        sources = from_tf_graph(graph)
        t1 = time.perf_counter()
        with graph.as_default():
            meta = tf.compat.v1.train.export_meta_graph(graph=graph)
        t2 = time.perf_counter()
        print(f"{len(meta.graph_def.node):>8} {len(sources):>12} {t1 - t0:>13.2f} {t2 - t1:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
