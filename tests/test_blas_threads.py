"""The placeviz program runs numpy's BLAS on one thread, and its children get the user's setting.

Each case runs a fresh interpreter: OpenBLAS reads the variable once, when numpy is first imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from placeviz import blas_threads

PROBE = """
import json, os
from placeviz import blas_threads
blas_threads.one_thread()
import numpy
from placeviz.verify.sandbox import child_env
print(json.dumps({"own": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "child": child_env().get("OPENBLAS_NUM_THREADS"),
                  "threads": len(os.listdir("/proc/self/task"))}))
"""


def _probe(**settings: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in blas_threads.USER_SETTINGS}
    env.update(settings)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_program_starts_no_blas_threads_and_its_children_do_not_inherit_the_setting():
    seen = _probe()
    assert seen["own"] == "1"
    assert seen["child"] is None
    assert seen["threads"] == 1  # numpy imported, and no BLAS worker thread started


def test_a_thread_count_the_user_chose_is_kept_for_the_program_and_its_children():
    seen = _probe(OPENBLAS_NUM_THREADS="2")
    assert (seen["own"], seen["child"]) == ("2", "2")
    seen = _probe(OMP_NUM_THREADS="3")
    assert (seen["own"], seen["child"]) == (None, None)


def test_nothing_is_set_once_numpy_is_loaded(monkeypatch):
    """In-process (the tests, a caller of ``placeviz.cli.main``) numpy is already loaded: too late to
    matter, so the environment is left as it was."""
    import numpy  # noqa: F401

    for name in blas_threads.USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(blas_threads, "_set_here", False)
    blas_threads.one_thread()
    assert "OPENBLAS_NUM_THREADS" not in os.environ
    assert blas_threads.user_environment({"OPENBLAS_NUM_THREADS": "4"}) == {"OPENBLAS_NUM_THREADS": "4"}
