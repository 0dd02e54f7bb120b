"""The collector is paused for placeviz's own passes and running for code that is not placeviz's."""

from __future__ import annotations

import gc
from pathlib import Path

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


class _Result:
    """Something a command computed (weakly referenceable, unlike ``object()``)."""


def test_results_are_held_to_the_end_only_in_the_program(monkeypatch):
    import weakref

    from placeviz import gcpause

    monkeypatch.setattr(gcpause, "_kept", None)  # in-process (tests, placeviz.cli.main): nothing held
    result = _Result()
    ref = weakref.ref(result)
    gcpause.keep_until_exit(result)
    del result
    assert ref() is None
    gcpause.hold_until_exit()  # what placeviz.cli.run, the program, does first
    result = _Result()
    ref = weakref.ref(result)
    gcpause.keep_until_exit(result, None)
    del result
    assert ref() is not None


@pytest.mark.parametrize("command", [["analyze", "--format", "json"], ["lint", "--format", "json"]])
def test_analyze_and_lint_hold_their_model_and_pipeline(monkeypatch, tmp_path, command, unfreeze):
    from importlib.resources import files

    from placeviz import gcpause
    from placeviz.cli import main
    from placeviz.graph import Graph
    from placeviz.pipeline import Pipeline

    monkeypatch.setattr(gcpause, "_kept", [])
    graph = str(files("placeviz") / "data" / "misconfigured.pb")
    with pytest.raises(SystemExit):
        main([command[0], graph, "--ps-tasks", "2", *command[1:], "-o", str(tmp_path / "out.json")])
    held = [x for objects in gcpause._kept for x in objects]
    assert any(isinstance(x, Pipeline) for x in held)
    assert any(getattr(x, "graph", None).__class__ is Graph for x in held)  # the model


def test_partition_holds_its_model_and_partitions(monkeypatch, tmp_path, unfreeze):
    """``partition`` holds what it wrote the partitions from (model, partitions) to the end too."""
    from placeviz import gcpause
    from placeviz.cli import main
    from placeviz.graph import Graph
    from placeviz.partition import PartitionResult

    monkeypatch.setattr(gcpause, "_kept", [])
    graph = str(Path(__file__).parent / "golden" / "render" / "mlp_sync.pbtxt")  # placed by TF
    with pytest.raises(SystemExit) as exit_info:
        main(["partition", graph, "-o", str(tmp_path / "parts")])
    assert exit_info.value.code in (0, None)
    held = [x for objects in gcpause._kept for x in objects]
    assert any(isinstance(x, PartitionResult) for x in held)
    assert any(getattr(x, "graph", None).__class__ is Graph for x in held)  # the model


@pytest.fixture
def unfreeze():
    """What a test's ``gc.freeze`` moved to the permanent generation goes back (the test process
    goes on; the program ends with ``os._exit`` instead)."""
    yield
    gc.unfreeze()


def test_render_holds_its_pipeline_and_view(monkeypatch, tmp_path, unfreeze):
    """``render`` holds its pipeline and view context to the end too."""
    from placeviz import gcpause
    from placeviz.cli import main
    from placeviz.pipeline import Pipeline
    from placeviz.render import ViewContext

    monkeypatch.setattr(gcpause, "_kept", [])
    graph = str(Path(__file__).parent / "golden" / "render" / "mlp_sync.pbtxt")  # placed by TF
    with pytest.raises(SystemExit) as exit_info:
        main(["render", graph, "--view", "devices", "--max-nodes", "20", "-o", str(tmp_path / "x.dot")])
    assert exit_info.value.code in (0, None)
    held = [x for objects in gcpause._kept for x in objects]
    assert any(isinstance(x, Pipeline) for x in held)
    assert any(isinstance(x, ViewContext) for x in held)


def test_a_held_run_freezes_what_it_made_before_the_collector_resumes(monkeypatch, unfreeze):
    """When the program holds its results to the end, the end of the outermost pause moves every
    object to the permanent generation, so that the collector's next pass does not visit them
    all; in-process (nothing held) nothing is frozen."""
    from placeviz import gcpause

    gc.unfreeze()
    monkeypatch.setattr(gcpause, "_kept", None)
    with gc_paused():
        made = [[] for _ in range(1000)]
    assert gc.get_freeze_count() == 0
    monkeypatch.setattr(gcpause, "_kept", [])
    with gc_paused():
        with gc_paused():
            made += [[] for _ in range(1000)]
        assert gc.get_freeze_count() == 0  # an inner pause leaves the collector off
    assert gc.isenabled() and gc.get_freeze_count() >= len(made)
