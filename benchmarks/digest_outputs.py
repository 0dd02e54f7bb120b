"""The sha256 of every file placeviz writes for a set of graphs: are two trees' outputs identical?

Issue 19 asks that a refactoring leave the outputs byte-identical on the benchmark graphs. This
script runs, with the placeviz of one tree (``PYTHONPATH=TREE``, run from TREE), the commands users
run: ``analyze --format json``, ``lint --format json``, ``partition -o DIR`` and ``render --view
devices`` to DOT, on each graph given (``--ps-tasks 4``), and prints one JSON object: file ->
sha256 (a partition directory gives one entry per file). ``--compare A.json B.json`` lists the
files that differ or exist on one side only, and exits 1 if any does.

    python benchmarks/digest_outputs.py --tree /work/main /work/graphs/g10k.unplaced.pb sample:mlp > a.json
    python benchmarks/digest_outputs.py --tree . /work/graphs/g10k.unplaced.pb sample:mlp > b.json
    python benchmarks/digest_outputs.py --compare a.json b.json

Run it with ``PLACEVIZ_NO_KERNELS=1`` in the environment to digest the pure-Python paths.
``benchmarks/compare_placement.py`` digests the placement stage alone, in process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

COMMANDS = {  # name -> arguments after the graph; {out} is the output path
    "analyze.json": ["analyze", "{graph}", "--ps-tasks", "4", "--format", "json", "-o", "{out}"],
    "lint.json": ["lint", "{graph}", "--ps-tasks", "4", "--format", "json", "-o", "{out}"],
    "partition": ["partition", "{graph}", "--ps-tasks", "4", "-o", "{out}"],
    "devices.dot": ["render", "{graph}", "--ps-tasks", "4", "--view", "devices", "-o", "{out}"],
}


def digest(tree: Path, graphs: list[str]) -> dict[str, str]:
    """file -> sha256 of every output of :data:`COMMANDS` on ``graphs``, made by ``tree``'s placeviz."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for graph in graphs:
            label = Path(graph.replace("sample:", "sample_")).name
            for kind, template in COMMANDS.items():
                target = Path(scratch) / f"{label}.{kind}"
                args = [a.format(graph=graph, out=target) for a in template]
                print(f"{label}: {' '.join(args[:1])}", file=sys.stderr)
                done = subprocess.run([sys.executable, "-m", "placeviz", *args], cwd=tree, env=env,
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    out[f"{label}.{kind}"] = f"exit {done.returncode}: {done.stderr.strip()[-200:]}"
                    continue
                files = sorted(target.rglob("*")) if target.is_dir() else [target]
                for f in files:
                    if f.is_file():
                        out[str(f.relative_to(scratch))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def compare(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """The files whose digests differ, or that one side lacks."""
    return [f"{name}: {a.get(name, 'missing')} != {b.get(name, 'missing')}"
            for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="*", help="graph files or sample:NAME")
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="the placeviz tree to run (default: this one)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two digest files")
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        differ = compare(a, b)
        for line in differ:
            print(line)
        print(f"{len(set(a) | set(b)) - len(differ)} identical, {len(differ)} different", file=sys.stderr)
        return 1 if differ else 0
    if not args.graphs:
        ap.error("give graphs to digest, or --compare A B")
    json.dump(digest(args.tree.resolve(), args.graphs), sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
