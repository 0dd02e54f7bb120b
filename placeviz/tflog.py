"""TensorFlow's start-up and deprecation chatter kept out of placeviz's output (``--debug`` shows it).

Whenever placeviz loads TensorFlow (a builder MODEL, a sample, ``verify``), TF prints on stderr:

* C++ log lines written while its shared libraries load, before ``absl::InitializeLog()``
  (``WARNING: All log messages before absl::InitializeLog() ...``, the oneDNN banner of
  ``tensorflow/core/util/port.cc``). ``TF_CPP_MIN_LOG_LEVEL`` does not reach those in TF 2.21, so
  the import itself runs with file descriptor 2 sent to a temporary file; the text is dropped
  if the import succeeds and written out if it fails (an import error keeps its explanation);
* later C++ lines (``cpu_feature_guard.cc``, ...): ``TF_CPP_MIN_LOG_LEVEL=2`` (warnings and info
  off; errors stay), set for this process and inherited by the processes it starts;
* Python deprecation notices through the ``tensorflow`` logger
  (``tensorflow/python/util/deprecation.py``: "Colocations handled automatically by placer",
  "Call initializer instance with the dtype argument ...") and Keras/tf_slim ``warnings``: the
  logger is set to ERROR, and warnings issued from those packages are ignored.

Nothing here imports TensorFlow: :func:`quiet_tensorflow` installs an import hook that wraps the
import when (if ever) it happens. ``placeviz --debug`` does not call it, so everything shows.

The processes ``verify`` starts (its coordinator, one per TF task with ``--isolate``) import TF
themselves; :func:`quiet_tensorflow` leaves ``PLACEVIZ_QUIET_TF=1`` in the environment they
inherit, and they call :func:`quiet_if_inherited` first, so their stderr (shown when a run fails)
holds the error, not TF's banner. Under ``--debug`` the variable is absent and they stay verbose.

Every command runs :func:`quiet_tensorflow` at start-up, most of them never import TF: what only
the TF import needs (``logging``, ``tempfile``) is imported when that import happens, and the
hook's classes are plain objects with the methods the import system calls (PEP 451), not
``importlib.abc`` subclasses, whose module costs a cold ``lint`` more than the rest of this one.
"""

from __future__ import annotations

import os
import sys
import warnings

CHATTY_PACKAGES = r"(tensorflow|tf_keras|keras|tf_slim)(\.|$)"
INHERITED = "PLACEVIZ_QUIET_TF"


def quiet_tensorflow() -> None:
    """Silence TF's logging in this process (see the module docstring). Idempotent."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ[INHERITED] = "1"
    warnings.filterwarnings("ignore", module=CHATTY_PACKAGES)
    if "tensorflow" in sys.modules:
        _quiet_tf_logger()
    elif not any(isinstance(f, _QuietImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())


def quiet_if_inherited() -> None:
    """In a child process: silence TF as the placeviz process that started it did (if it did)."""
    if os.environ.get(INHERITED) == "1":
        quiet_tensorflow()


def _quiet_tf_logger() -> None:
    """The ``tensorflow`` logger at ERROR (``tensorflow/python/platform/tf_logging.py`` only adds a
    handler to it, never sets its level), before anything logs through it."""
    import logging

    logging.getLogger("tensorflow").setLevel(logging.ERROR)


class _QuietImport:
    """Finds ``tensorflow`` as the other finders do, and wraps its loader in :class:`_QuietLoader`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _QuietLoader(spec.loader)
                return spec
        return None


class _QuietLoader:
    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):  # get_resource_reader, is_package, ...: the real loader's
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        import tempfile

        from placeviz import progress

        _quiet_tf_logger()
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as sink, progress.paused():  # no progress line into the sink
            os.dup2(sink.fileno(), 2)
            try:
                self._loader.exec_module(module)
            except BaseException:
                _restore(saved)
                sink.seek(0)
                os.write(2, sink.read())  # the import failed: what TF said is part of why
                raise
            _restore(saved)
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        for finder in [f for f in sys.meta_path if isinstance(f, _QuietImport)]:
            sys.meta_path.remove(finder)  # imported once: nothing left to wrap


def _restore(saved: int) -> None:
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
