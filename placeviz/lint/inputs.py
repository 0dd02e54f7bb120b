"""Which of the files a pre-commit hook hands over are graphs (``placeviz lint --only-graphs``).

pre-commit passes every staged file matching the hook's ``files`` pattern (``.pb``, ``.pbtxt``,
``.meta``), and in a real repository many of those are not training graphs:

* a SavedModel directory holds ``saved_model.pb`` (the graphs) next to ``fingerprint.pb``
  (``tensorflow/core/protobuf/fingerprint.proto``, written since TF 2.12), ``keras_metadata.pb``
  (Keras), and ``variables/``, ``assets/`` and ``debug/`` (``saved_model_debug_info.pb``): the
  model is the directory, linted once, whichever of its files were staged;
* a text proto may be any message: an object-detection label map (``item { ... }``), a pipeline
  config (``model { ... }``). Only one whose first field is a ``GraphDef``, ``MetaGraphDef`` or
  ``SavedModel`` field (:func:`placeviz.io.text_proto_kind`) is a graph.

Everything else is skipped with one line on stderr saying why, never an error: the hook must not
fail a commit for a label map. Without ``--only-graphs`` every MODEL is linted as given (a file
that is not a graph is an error, exit 2), which is right when a person names the files.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from placeviz.io import TEXT_SUFFIXES, text_proto_kind

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
SAVED_MODEL_SIDE_FILES = {"fingerprint.pb": "a SavedModel's fingerprint", "keras_metadata.pb": "Keras metadata"}
SAVED_MODEL_SUBDIRS = ("variables", "assets", "assets.extra", "debug")
HEAD_BYTES = 64 * 1024
"""How much of a text proto is read to find its first field (comments may come first)."""


def graph_models(specs: list[str]) -> tuple[list[str], list[str]]:
    """(the MODELs to lint, one note per file skipped), in the order given, each model once."""
    models: list[str] = []
    notes: list[str] = []
    seen: set[str] = set()

    def add(spec: str) -> None:
        key = os.path.normpath(os.path.abspath(spec)) if os.path.exists(spec) else spec
        if key not in seen:
            seen.add(key)
            models.append(spec)

    for spec in specs:
        model, reason = _classify(spec)
        if model is not None:
            add(model)
        else:
            notes.append(f"skipped {spec}: {reason} (--only-graphs)")
    return models, notes


def saved_model_dir(directory: Path) -> Path | None:
    """The SavedModel directory that ``directory`` is or is directly inside of (``variables/``,
    ``assets/``...), if any: the one holding ``saved_model.pb`` or ``saved_model.pbtxt``."""
    for d in (directory, directory.parent):
        if any((d / n).is_file() for n in SAVED_MODEL_FILES):
            return d
    return None


def _classify(spec: str) -> tuple[str | None, str]:
    """(the MODEL to lint for ``spec``, or None and why it is skipped)."""
    path = Path(spec)
    if not os.path.lexists(spec):
        return spec, ""  # a builder (file.py:fn), sample:NAME, or missing: lint says what it is
    if path.name in SAVED_MODEL_FILES:
        return os.path.dirname(spec) or ".", ""  # models/sm/saved_model.pb -> models/sm
    saved = saved_model_dir(path.parent) if path.is_file() else None
    if saved is not None and (path.parent == saved or path.parent.name in SAVED_MODEL_SUBDIRS):
        what = SAVED_MODEL_SIDE_FILES.get(path.name, f"a file of the SavedModel {saved.as_posix()}")
        return None, f"{what}, not a graph; the SavedModel is linted as a whole"
    if path.name in SAVED_MODEL_SIDE_FILES:
        return None, f"{SAVED_MODEL_SIDE_FILES[path.name]}, not a graph"
    if path.suffix.lower() in TEXT_SUFFIXES and path.is_file():
        head = _head(path)
        if head is not None and text_proto_kind(head) is None:
            return None, "a text proto that is not a GraphDef, MetaGraphDef or SavedModel"
    return spec, ""


def _head(path: Path) -> str | None:
    """The first bytes of a regular file as text; None when it cannot be read or is not UTF-8
    (then lint reads it itself and says what is wrong)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open
            return None
        with open(path, "rb") as f:
            data = f.read(HEAD_BYTES)
    except OSError:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        return data[: e.start].decode("utf-8") if e.start > HEAD_BYTES - 8 else None
