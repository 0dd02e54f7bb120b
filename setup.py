"""Build step for placeviz's C kernels (everything else is in pyproject.toml).

Each kernel module is an optional accelerator of one pure-Python path, which stays the
reference: the C code gives the same results (the tests compare both paths) and declines
anything unusual, which the Python path then handles. When no C compiler is at hand, the build
skips them and placeviz runs on the Python paths only, slower.

* ``placeviz._wire``: reads the graph IR's fields straight from a serialized GraphDef, checks that
  bytes surely parse, and writes the partitions' NodeDef bytes and index.json's transfers.
* ``placeviz.placement._setter_kernels``: the setter's replay (``setter``), one whole function.
* ``placeviz.placement._placer_kernels``: the placer's run (``place``, ``imported_colocation``).
* ``placeviz._partition_kernels``: the partitioner's cut of one level (``split_originals``),
  prune's reverse walk (``reach``) and the views' name-scope buckets (``bucket_by_component``).

Each is called at one function boundary and tested against the Python function it replaces
(``docs/architecture.md`` section 3).
"""

from pathlib import Path

from setuptools import Extension, setup

KERNELS = {
    "placeviz._wire": "placeviz/_wire.c",
    "placeviz.placement._setter_kernels": "placeviz/placement/_setter_kernels.c",
    "placeviz.placement._placer_kernels": "placeviz/placement/_placer_kernels.c",
    "placeviz._partition_kernels": "placeviz/_partition_kernels.c",
}

setup(ext_modules=[Extension(name, [source], optional=True, extra_compile_args=["-O2"])
                   for name, source in KERNELS.items() if Path(source).exists()])
