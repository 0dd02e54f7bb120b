"""The repository's own docs stay true: the TF-behaviour index names real code and tests, and
nothing points at files outside the repository.

* ``docs/tf-behaviours.md``: every ``placeviz.module:function`` in its tables resolves (module
  imported, attributes followed), and every ``tests/file.py::test`` names a test function defined in
  that file (read with ``ast``, so test modules that need TensorFlow are not imported). Each table
  row names at least one placeviz function and one test.
* Code, comments and docs cite only what a clone holds: a reference to the design notes and
  research notes the project started from (which live outside the repository) fails here, and so
  does a ``docs/<page>.md`` that does not exist.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "docs" / "tf-behaviours.md"
FUNCTION = re.compile(r"`(placeviz(?:\.\w+)*):([\w.]+)`")
TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")

SCANNED = ("placeviz", "tests", "docs", "benchmarks", "scripts")
SCANNED_FILES = ("README.md", "Makefile", "setup.py", "pyproject.toml")
SUFFIXES = {".py", ".md", ".c", ".toml", ".txt", ".sh", ".cfg", ".yaml", ".yml"}
PORTED = ROOT / "tests" / "realworld" / "programs"
"""Ports of public programs: their ``research/...`` paths are tensorflow/models' own, not ours."""

# This file spells the old references out to test the patterns, so the scan skips it.
_NOTES = "|".join(("tf-internals", "perf", "viz", "lint", "user-painpoints"))
OUTSIDE = re.compile("|".join((
    r"\bDESIGN\.md\b",
    r"\bresearch/(?:" + _NOTES + r")\b",
    r"\btf-internals\b",
    r"(?<![\w/-])(?:perf|viz|lint)\.md\b",
    r"\bshared/(?:research|seeds|DESIGN)",
    r"\.\./shared",
)))
DOC_PAGE = re.compile(r"\bdocs/([\w-]+\.md)\b")


TF_TESTS_SECTION = "## TF's own tests"
"""The last section of the index: TF's tests and where they are re-created (tests only)."""


def _table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")
            and (FUNCTION.search(line) or TEST.search(line))]


def _resolve(module: str, qualname: str) -> object:
    obj: object = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


@cache
def _tests_in(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                     and n.name.startswith("test_"))


def test_index_rows_name_code_and_tests():
    behaviours, _, tf_tests = INDEX.read_text(encoding="utf-8").partition(TF_TESTS_SECTION)
    rows = _table_rows(behaviours)
    assert len(rows) >= 40, "docs/tf-behaviours.md lost its tables"
    for row in rows:
        assert FUNCTION.search(row), f"no placeviz function in: {row}"
        assert TEST.search(row), f"no test in: {row}"
    assert all(TEST.search(row) for row in _table_rows(tf_tests)) and _table_rows(tf_tests)


def test_every_indexed_function_exists():
    missing = []
    for module, qualname in FUNCTION.findall(INDEX.read_text(encoding="utf-8")):
        try:
            _resolve(module, qualname)
        except (ImportError, AttributeError) as e:
            missing.append(f"{module}:{qualname} ({e})")
    assert missing == []


def test_every_indexed_test_exists():
    text = INDEX.read_text(encoding="utf-8")
    found = TEST.findall(text)
    assert found
    missing = [f"{path}::{name}" for path, name in found
               if not (ROOT / path).is_file() or name not in _tests_in(path)]
    assert missing == []


def _scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]
    for top in SCANNED:
        files += [p for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES
                  and PORTED not in p.parents and p != Path(__file__).resolve()]
    return sorted(files)


def test_no_reference_to_files_outside_the_repository():
    hits = []
    for path in _scanned_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert hits == [], "cite the repository's own docs (docs/architecture.md, docs/tf-behaviours.md)"


def test_cited_doc_pages_exist():
    missing = set()
    for path in _scanned_files():
        for page in DOC_PAGE.findall(path.read_text(encoding="utf-8", errors="replace")):
            if not (ROOT / "docs" / page).is_file():
                missing.add(f"{path.relative_to(ROOT)}: docs/{page}")
    assert missing == set()


@pytest.mark.parametrize("line", [
    "see DESIGN.md section 2",
    "(research/tf-internals.md 2.2)",
    "(tf-internals 4.1)",
    "(perf.md section 5)",
    "seed `shared/seeds/000_*`",
    "../shared/research/viz.md",
])
def test_outside_pattern_catches_the_old_references(line):
    assert OUTSIDE.search(line)


@pytest.mark.parametrize("line", [
    "tensorflow/models research/slim/train_image_classifier.py",
    "docs/tf-behaviours.md",
    "the shared_name of the queue",
    "shared/exclusive locks",
])
def test_outside_pattern_leaves_ordinary_text_alone(line):
    assert not OUTSIDE.search(line)
