"""Build step for placeviz's one C module (everything else is in pyproject.toml).

``placeviz._wire`` reads the graph IR's fields straight from a serialized GraphDef (see
placeviz/_wire.c). It is optional: when no C compiler is at hand the build skips it and
placeviz uses its pure-Python path, which gives the same results, only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("placeviz._wire", ["placeviz/_wire.c"], optional=True,
                             extra_compile_args=["-O2"])])
