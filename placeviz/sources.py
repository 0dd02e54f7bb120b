"""Where each op was made: the line of the user's Python code that created it.

A lint finding is about a node of a graph, but the fix goes into the Python program that built
the graph. TensorFlow knows that line in two ways, and placeviz reads both:

* every graph-mode ``Operation`` keeps the Python stack of its creation (``Operation.traceback``,
  a ``tf_stack.StackTrace`` set in ``Operation.from_node_def``/``Graph._create_op_internal``,
  ``tensorflow/python/framework/ops.py``): a builder MODEL (``file.py:fn``) returns its
  ``tf.Graph``, and :func:`from_tf_graph` reads it before the graph is exported;
* a ``GraphDebugInfo`` (``tensorflow/core/framework/graph_debug_info.proto``) holds those stacks
  for a saved graph. TF writes it when asked to: ``export_meta_graph(..., save_debug_info=True)``
  and ``Saver.save(..., save_debug_info=True)`` write ``NAME.debug`` next to ``NAME.meta``
  (``tensorflow/python/framework/meta_graph.py``, ``export_scoped_meta_graph``), and
  ``tf.saved_model.save(..., options=tf.saved_model.SaveOptions(save_debug_info=True))`` writes
  ``debug/saved_model_debug_info.pb`` in the SavedModel; ``GraphDef.debug_info`` (field 5) may
  carry one too. Keys are ``node@function`` (an empty function for the top-level graph), values
  are frames by id (``name_to_trace_id``, ``traces_by_id``, ``frames_by_id``, TF >= 2.15) or, in
  files older TFs wrote, the frames themselves (``traces``).

Of a stack, the frame that counts is the innermost one outside TensorFlow, Keras, tf_slim,
placeviz and Python's standard library: the user's own line. A stack with no such frame gives no
location (the finding stays at the model file). Nothing here imports TensorFlow: a graph's
operations are only iterated, and GraphDebugInfo is parsed with placeviz's own proto classes.
"""

from __future__ import annotations

import functools
import os
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

LIBRARY_PACKAGES = frozenset({"tensorflow", "tensorflow_core", "tf_keras", "keras", "tf_slim", "placeviz"})
"""Top-level packages whose frames are never the user's line (below site-/dist-packages)."""

_INSTALL_DIRS = {"site-packages", "dist-packages"}
_OWN_DIR = str(Path(__file__).resolve().parent) + os.sep
_STDLIB_DIRS = tuple({str(Path(p).resolve()) + os.sep
                      for p in (sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")) if p})
DEBUG_INFO_IN_SAVED_MODEL = ("debug", "saved_model_debug_info.pb")
"""``tensorflow/cc/saved_model/constants.h``: kSavedModelDebugDirectory, kSavedModelDebugInfoFilenamePb."""


@dataclass(frozen=True)
class SourceLine:
    """A line of the user's code: ``file`` as TF recorded it (usually absolute), 1-based ``line``."""

    file: str
    line: int
    function: str | None = None

    @property
    def path(self) -> str:
        """``file`` relative to the current directory when inside it (what code scanning and GitHub
        annotations expect: paths from the repository root), else as recorded."""
        p = Path(self.file)
        if p.is_absolute():
            try:
                return p.resolve().relative_to(Path.cwd().resolve()).as_posix()
            except (ValueError, OSError):
                return p.as_posix()
        return p.as_posix()

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"

    def to_json(self) -> dict:
        return {"file": self.path, "line": self.line, "function": self.function}


@functools.lru_cache(maxsize=4096)
def is_library_file(filename: str) -> bool:
    """Whether a frame's file belongs to TF, Keras, tf_slim, placeviz or the standard library
    (or is no file at all, like ``<frozen runpy>``), so that it cannot be the user's line."""
    if not filename or filename.startswith("<"):
        return True
    parts = Path(filename).parts
    for k, part in enumerate(parts[:-1]):
        if part in _INSTALL_DIRS and parts[k + 1] in LIBRARY_PACKAGES:
            return True
    if parts[:2] in (("tensorflow", "python"), ("tensorflow", "core")):  # paths of a source build
        return True
    if not os.path.isabs(filename):
        return False
    resolved = os.path.realpath(filename)
    return resolved.startswith(_OWN_DIR) or (resolved.startswith(_STDLIB_DIRS) and not _in_install_dir(parts))


def _in_install_dir(parts: tuple[str, ...]) -> bool:
    return any(p in _INSTALL_DIRS for p in parts)


def user_line(frames: Iterable[tuple[str, int, str | None]]) -> SourceLine | None:
    """The innermost frame (``frames`` run outermost first, as TF records them) outside the
    libraries (:func:`is_library_file`)."""
    for filename, line, function in reversed(list(frames)):
        if line and not is_library_file(filename):
            return SourceLine(filename, int(line), function or None)
    return None


def from_tf_graph(graph) -> dict[str, SourceLine]:
    """Node name -> the user's line that created it, for a ``tf.Graph`` built in this process."""
    out = {}
    for op in graph.get_operations():
        found = _stack_user_line(getattr(op, "traceback", None))
        if found is not None:
            out[op.name] = found
    return out


def _stack_user_line(stack) -> SourceLine | None:
    """:func:`user_line` of a ``tf_stack.StackTrace``, read from its innermost frame outwards, one
    frame at a time (building every frame's Python object costs ~100 us an op). TF's
    ``last_user_frame()`` and ``get_user_frames()`` (``tensorflow/python/util/tf_stack.cc``) leave
    out the frames of TF's own framework files, which :func:`is_library_file` would skip anyway;
    frames in tf_slim or Keras are still walked past here."""
    if not stack:
        return None
    if hasattr(stack, "last_user_frame"):  # the common case in one call: the innermost non-TF frame is the user's
        f = stack.last_user_frame()
        if f is not None and f.lineno and not is_library_file(f.filename):
            return SourceLine(f.filename, int(f.lineno), f.name or None)
    if hasattr(stack, "get_user_frames"):
        stack = stack.get_user_frames()
    for k in range(len(stack) - 1, -1, -1):
        f = stack[k]
        if f.lineno and not is_library_file(f.filename):
            return SourceLine(f.filename, int(f.lineno), f.name or None)
    return None


def from_debug_info(info) -> dict[str, SourceLine]:
    """Node name -> the user's line, from a ``GraphDebugInfo`` (either layout; see the module
    docstring). Nodes of the top-level graph only: those are what lint reports on."""
    files = list(info.files)

    def frame(flc) -> tuple[str, int, str]:
        name = files[flc.file_index] if 0 <= flc.file_index < len(files) else ""
        return name, flc.line, flc.func

    out = {}
    for key, trace_id in info.name_to_trace_id.items():
        node, _, function = key.partition("@")
        if function or trace_id not in info.traces_by_id:
            continue
        ids = info.traces_by_id[trace_id].frame_id
        found = user_line(frame(info.frames_by_id[i]) for i in ids if i in info.frames_by_id)
        if found is not None:
            out[node] = found
    for key, trace in info.traces.items():
        node, _, function = key.partition("@")
        if function or node in out:
            continue
        found = user_line(frame(flc) for flc in trace.file_line_cols)
        if found is not None:
            out[node] = found
    return out


def debug_info_files(spec: str, kind: str) -> list[Path]:
    """Where TF writes the GraphDebugInfo of a model file or SavedModel (see the module docstring)."""
    path = Path(spec)
    if kind == "savedmodel":
        directory = path if path.is_dir() else path.parent
        return [directory.joinpath(*DEBUG_INFO_IN_SAVED_MODEL)]
    if kind == "metagraph":
        return [path.with_suffix(".debug")]
    return []
