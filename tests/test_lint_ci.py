"""placeviz lint in a user's CI: comma lists of selectors, a configured baseline not written yet,
findings at the Python line that created the op (builders' tracebacks, TF's GraphDebugInfo), and
the pre-commit hook's file filter (graph files only; SavedModel side files and label maps skipped).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placeviz.lint.selection import split_selectors
from placeviz.protos import GraphDef
from tests.conftest import run_cli

SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"

FLAG_IDENTITY = '''
from placeviz.lint import Rule
RULE = Rule(id="XY101", name="flag-identity", severity="error", summary="Flags Identity nodes.")
def check(ctx):
    for i in ctx.nodes_by_op("Identity"):
        yield ctx.finding(RULE, i, f"{ctx.graph.names[i]} is an Identity")
'''
FLAG_NOOP = '''
from placeviz.lint import Rule
RULE = Rule(id="XY102", name="flag-noop", severity="warning", summary="Flags NoOps.")
def check(ctx):
    for i in ctx.nodes_by_op("NoOp"):
        yield ctx.finding(RULE, i, "a NoOp")
'''


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """A temp cwd with model.pb (c: Const, i: Identity, n: NoOp) and a rules dir (XY101, XY102)."""
    monkeypatch.chdir(tmp_path)
    g = GraphDef()
    g.node.add(name="c", op="Const")
    g.node.add(name="i", op="Identity", input=["c"])
    g.node.add(name="n", op="NoOp", input=["^i"])
    (tmp_path / "model.pb").write_bytes(g.SerializeToString())
    (tmp_path / "myrules").mkdir()
    (tmp_path / "myrules" / "flag_identity.py").write_text(FLAG_IDENTITY)
    (tmp_path / "myrules" / "flag_noop.py").write_text(FLAG_NOOP)
    return tmp_path


def lint(capsys, *args, fmt="json"):
    code, out, err = run_cli(["lint", "--format", fmt, "--rules", "myrules", *map(str, args)], capsys)
    return code, (json.loads(out) if fmt in ("json", "sarif") and out.strip() else out), err


def rule_ids(doc) -> list[str]:
    return sorted({f["rule"] for f in doc["findings"]})


# ------------------------------------------------------------------------ comma lists
def test_split_selectors():
    assert split_selectors(["PV201,PV104", " PV3 ", "a-name, ,XY1,"]) == ["PV201", "PV104", "PV3", "a-name", "XY1"]


def test_comma_lists_on_the_command_line_and_in_the_config(work, capsys):
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY101,XY102")
    assert rule_ids(doc) == ["XY101", "XY102"] and code == 1
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY101", "--extend-select", "flag-noop,PV0")
    assert rule_ids(doc) == ["XY101", "XY102"] and "PV001" in doc["rules"]
    code, doc, _ = lint(capsys, "model.pb", "--select", "ALL", "--ignore", "XY101,PV")
    assert doc["rules"] == ["XY102"] and code == 0
    code, _, err = lint(capsys, "model.pb", "--select", "XY101,XY777", fmt="text")
    assert code == 2 and "--select XY777: no rule" in err  # each part is checked on its own
    (work / "placeviz.toml").write_text('[lint]\nselect = "XY102, XY101"\nignore = ["PV0,PV1"]\n')
    code, doc, _ = lint(capsys, "model.pb")
    assert doc["rules"] == ["XY101", "XY102"]


# ------------------------------------------------------------- a baseline not written yet
def test_a_configured_baseline_that_does_not_exist_yet_is_a_note(work, capsys):
    (work / "placeviz.toml").write_text('[lint]\nselect = ["XY1"]\nbaseline = ".placeviz-baseline.json"\n')
    code, doc, err = lint(capsys, "model.pb")
    assert code == 1 and rule_ids(doc) == ["XY101", "XY102"]  # exit by the findings, not 2
    assert ("the config's baseline .placeviz-baseline.json does not exist yet" in err
            and "--write-baseline .placeviz-baseline.json" in err)
    code, _, err = lint(capsys, "model.pb", "--write-baseline", ".placeviz-baseline.json")
    assert code == 0 and (work / ".placeviz-baseline.json").is_file()
    code, doc, err = lint(capsys, "model.pb")
    assert code == 0 and doc["findings"] == [] and doc["summary"]["baselined"] == 2 and "does not exist" not in err
    code, _, err = lint(capsys, "model.pb", "--baseline", "typo.json", fmt="text")
    assert code == 2 and "typo.json" in err  # named on the command line: still an error
