"""``placeviz demo`` (what ``make demo`` runs) shows the whole product and writes its files."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from placeviz.io import load

pytestmark = pytest.mark.tf


def test_demo_writes_every_artifact(tmp_path, capsys, monkeypatch):
    from placeviz import pipeline

    runs = []

    def counted(model, options, **kwargs):
        runs.append(options)
        return run_pipeline(model, options, **kwargs)

    run_pipeline = pipeline.run_pipeline
    monkeypatch.setattr(pipeline, "run_pipeline", counted)
    monkeypatch.setattr("placeviz.commands.demo.run_pipeline", counted)
    code, out, err = run_cli(["demo", "-o", tmp_path], capsys)
    assert code == 0, err
    # One pipeline for the analysis, the lint and the pictures; verify places once more for its
    # CPU-only local servers (soft placement), without partitioning.
    assert [options.partition for options in runs] == [True, False]
    assert "Single update per step: holds" in out and "Placement (setter replayed" in out
    assert "Network traffic for one step of the train op" in out
    report = json.loads((tmp_path / "analysis.json").read_text())
    assert report["sync"]["single_update"] is True
    assert report["placement"]["ps_balance"]["max_over_mean"] >= 1.0
    assert report["partition"]["bytes_per_step"] > 0
    placed = load(tmp_path / "inception.placed.pb").graph
    assert all(d.startswith("/job:") and "/device:CPU:" in d for d in placed.devices)
    assert len(list((tmp_path / "partitions").iterdir())) == 3
    lint = json.loads((tmp_path / "lint.json").read_text())
    assert lint["schema"] == "placeviz.lint/1"
    # The demo model is correct: no finding at warning level or above.
    assert [f for f in lint["findings"] if f["severity"] in ("error", "warning")] == []
    assert json.loads((tmp_path / "lint.sarif").read_text())["version"] == "2.1.0"
    verify = json.loads((tmp_path / "verify.json").read_text())
    assert verify["schema"] == "placeviz.verify/1" and verify["ok"] is True
    assert {c["id"]: c["status"] for c in verify["checks"]}["global_step"] == "pass"
    assert "verify: every check passed" in out
    # worker 2 is slowed: the run's numbers, its trace and the report's run section
    assert verify["run"]["slow_workers"] == {"2": 0.2} and verify["modes"]["global_steps"] == 4
    assert json.loads((tmp_path / "verify-trace.json").read_text())["traceEvents"]
    assert '<section id="verify">' in (tmp_path / "report.html").read_text()
    html = (tmp_path / "report.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "global_step" in html
    assert (tmp_path / "overview.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
