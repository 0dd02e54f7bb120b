"""The collector is paused for placeviz's own passes and running for code that is not placeviz's."""

from __future__ import annotations

import gc

import pytest

from placeviz.errors import PlacevizError
from placeviz.gcpause import gc_paused, gc_running
from placeviz.io import load


def test_pause_and_resume_nest_and_restore():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_running():
            assert gc.isenabled()
            with gc_paused():
                assert not gc.isenabled()
            assert gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_builder_runs_with_the_collector_on_inside_a_paused_run(tmp_path):
    """TF's graph building makes cyclic temporaries: a user's builder runs with the collector on."""
    seen = tmp_path / "seen.txt"
    (tmp_path / "b.py").write_text(f"import gc\ndef build():\n    open({str(seen)!r}, 'w').write(str(gc.isenabled()))\n")
    with gc_paused(), pytest.raises(PlacevizError):  # returns None: not a graph
        load(f"{tmp_path / 'b.py'}:build")
    assert seen.read_text() == "True"
    assert gc.isenabled()
