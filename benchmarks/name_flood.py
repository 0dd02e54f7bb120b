"""Write a GraphDef whose node names all fall in one narrow band of the C reader's name table, as
the reader hashed them before its hash was keyed per process (``placeviz/_wire.c``, ``hash_seed``).

With that fixed hash, linear probing compared every such name with every earlier one: the load was
quadratic in the graph's size. After the change the same file loads as fast as any other, because
the band it aims at moves with each process's secret. Never imported by placeviz or its tests.

    python benchmarks/name_flood.py 200000 1024 /tmp/flood.pb      # 200k names, a band of 1024 slots
    python benchmarks/name_flood.py 200000 0 /tmp/plain.pb         # the same names, not chosen
    /usr/bin/time -f "%e s %U user" placeviz lint /tmp/flood.pb -o /tmp/lint.txt

Names are 8 characters from 32 letters and digits; for those the unkeyed hash below is
``hash_bytes`` with a secret of 0 (8 bytes in one round, then the tail round of an empty tail).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

_K, _C1, _C2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz012345", dtype=np.uint8)


def unkeyed_hash(words: np.ndarray) -> np.ndarray:
    """The reader's old hash of 8-byte names (``words``: each name's bytes as a little-endian uint64)."""
    with np.errstate(over="ignore"):
        h = (_K ^ np.uint64(8)) ^ words
        h = h * _C1
        h ^= h >> np.uint64(32)
        h = h * _C2  # the empty tail
        h ^= h >> np.uint64(29)
        h = h * _C1
        h ^= h >> np.uint64(32)
    return h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("nodes", type=int)
    parser.add_argument("band", type=int, help="slots the names aim at (0: any names)")
    parser.add_argument("out")
    args = parser.parse_args()
    from placeviz.protos import GraphDef

    size = 16  # the table scan_graph starts with for this many names
    while size < 2 * args.nodes + 2:
        size <<= 1
    names: list[str] = []
    start, t = 0, time.process_time()
    while len(names) < args.nodes:
        i = np.arange(start, start + 4_000_000, dtype=np.uint64)
        start += 4_000_000
        chars = np.stack([_ALPHABET[((i >> np.uint64(5 * k)) & np.uint64(31)).astype(np.int64)] for k in range(8)],
                         axis=1)
        words = chars.copy().view(np.uint64).ravel()
        hit = (unkeyed_hash(words) & np.uint64(size - 1)) < np.uint64(args.band) if args.band else slice(None)
        names.extend(bytes(row).decode() for row in chars[hit][: args.nodes - len(names)])
    graph = GraphDef()
    for name in names:
        graph.node.add(name=name, op="NoOp")
    with open(args.out, "wb") as f:
        f.write(graph.SerializeToString())
    print(f"{len(names):,} NoOps, table of {size:,} slots, band {args.band}: {args.out} "
          f"({time.process_time() - t:.1f} s CPU)")


if __name__ == "__main__":
    main()
