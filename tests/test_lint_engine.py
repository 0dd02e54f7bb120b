"""The lint engine: discovery, selection, config, suppressions and meta rules, baseline, skipped
and failing rules, the four formats (SARIF against the official 2.1.0 schema), exit codes, docs.

The models here are tiny GraphDefs written with placeviz's own protos, and the rules that look at
them are a user's rules written into a temporary ``--rules DIR`` (selected with ``--select XY``),
so each test controls exactly which findings exist. Real rules on real TF graphs are tested in
tests/test_lint_integrity.py and the rule helpers' own tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from placeviz.lint.discovery import load_rules
from placeviz.lint.selection import select_rules
from placeviz.protos import GraphDef
from tests.conftest import lint_cli, lint_workdir, run_cli

REPO = Path(__file__).resolve().parent.parent
SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"

USER_RULES = {
    "flag_identity.py": '''
from placeviz.lint import Rule
RULE = Rule(id="XY101", name="flag-identity", severity="warning", summary="Flags Identity nodes.")
def check(ctx):
    for i in ctx.nodes_by_op("Identity"):
        yield ctx.finding(RULE, i, f"{ctx.graph.names[i]} is an Identity", suggestion="remove it")
''',
    "flag_const.py": '''
from placeviz.lint import Rule
RULE = Rule(id="XY102", name="flag-const", severity="info", summary="Flags Const nodes.")
def check(ctx):
    for i in ctx.nodes_by_op("Const"):
        yield ctx.finding(RULE, i, "a constant, with a comma, a colon: and 100%")
''',
    "flag_noop.py": '''
from placeviz.lint import Rule
RULE = Rule(id="XY103", name="flag-noop", severity="error", summary="Flags NoOps; not ignorable.",
            ignorable=False)
def check(ctx):
    for i in ctx.nodes_by_op("NoOp"):
        yield ctx.finding(RULE, i, "a NoOp")
''',
    "needs_cluster.py": '''
from placeviz.lint import Rule
RULE = Rule(id="XY104", name="needs-cluster", severity="error", summary="Needs a cluster.", needs=("cluster",))
def check(ctx):
    yield ctx.finding(RULE, None, f"cluster has jobs {sorted(ctx.cluster.jobs)}")
''',
    "preview_rule.py": '''
from placeviz.lint import Rule
RULE = Rule(id="XY199", name="preview-rule", severity="error", summary="A preview rule.", preview=True)
def check(ctx):
    yield ctx.finding(RULE, None, "preview ran")
''',
}

RAISING_RULE = '''
from placeviz.lint import Rule
RULE = Rule(id="XY150", name="always-raises", severity="error", summary="Raises.")
def check(ctx):
    raise KeyError("boom")
'''


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """A temp cwd with model.pb (c, i1, i2: Identity, n: NoOp) and a user rules dir."""
    return lint_workdir(tmp_path, monkeypatch, [("c", "Const", []), ("scope/i1", "Identity", ["c"]),
                                                ("scope/i2", "Identity", ["scope/i1"]), ("n", "NoOp", ["^scope/i2"])],
                        USER_RULES)


lint = lint_cli


def pairs(doc) -> set[tuple[str, str | None]]:
    return {(f["rule"], f["node"]) for f in doc["findings"]}


ALL_XY = {("XY101", "scope/i1"), ("XY101", "scope/i2"), ("XY102", "c"), ("XY103", "n")}


# ------------------------------------------------------------------------------ selection
def test_selectors_by_id_prefix_name_all_and_preview(work):
    rules = load_rules(["myrules"])

    def ids(select, extend=(), ignore=(), preview=False):
        return {r.id for r in select_rules(rules, select, list(extend), list(ignore), preview)} - {
            r.id for r in rules if not r.id.startswith("XY")}

    assert ids(["XY"]) == {"XY101", "XY102", "XY103", "XY104"}  # the preview rule needs asking by name
    assert ids(["XY"], preview=True) == {"XY101", "XY102", "XY103", "XY104", "XY199"}
    assert ids(["XY10"], ignore=["flag-const"]) == {"XY101", "XY103", "XY104"}
    assert ids(["flag-identity"], extend=["XY199"]) == {"XY101", "XY199"}
    assert ids(["ALL"], ignore=["XY1"]) == set()
    assert ids(["xy101"]) == {"XY101"}  # IDs are case-insensitive


def test_cli_select_and_unknown_selector(work, capsys):
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY1")
    assert pairs(doc) == ALL_XY and code == 1  # XY103 is an error
    assert [s["rule"] for s in doc["skipped"]] == ["XY104"]
    code, doc, _ = lint(capsys, "model.pb", "--select", "flag-identity", "--extend-select", "XY102")
    assert pairs(doc) == {("XY101", "scope/i1"), ("XY101", "scope/i2"), ("XY102", "c")} and code == 0
    code, out, err = lint(capsys, "model.pb", "--select", "XY777", fmt="text")
    assert code == 2 and "XY777" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------- config
def test_config_found_upwards_and_cli_overrides_it(work, capsys, monkeypatch):
    (work / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.placeviz.lint]\nselect = ["XY101"]\nfail-on = "warning"\n')
    sub = work / "sub"
    sub.mkdir()
    (sub / "myrules").symlink_to(work / "myrules")
    monkeypatch.chdir(sub)
    code, doc, _ = lint(capsys, "../model.pb")
    assert pairs(doc) == {("XY101", "scope/i1"), ("XY101", "scope/i2")}
    assert code == 1 and doc["summary"]["fail_on"] == "warning" and doc["config"] == "../pyproject.toml"
    code, doc, _ = lint(capsys, "../model.pb", "--select", "XY102", "--fail-on", "error")
    assert pairs(doc) == {("XY102", "c")} and code == 0


def test_config_errors_are_exit_2_in_one_line(work, capsys):
    (work / "placeviz.toml").write_text('[lint]\nselct = ["XY"]\n')
    code, _, err = lint(capsys, "model.pb", fmt="text")
    assert code == 2 and "unknown key 'selct'" in err and len(err.strip().splitlines()) == 1
    (work / "placeviz.toml").write_text('[lint]\n[[lint.per-node-ignores]]\nrule = "XY101"\nnode = "("\nreason = "x"\n')
    code, _, err = lint(capsys, "model.pb", fmt="text")
    assert code == 2 and "not a valid regex" in err


def test_severity_override_and_thresholds_reach_rules(work, capsys):
    (work / "myrules" / "threshold.py").write_text('''
from placeviz.lint import Rule
RULE = Rule(id="XY120", name="threshold", severity="info", summary="Reports a threshold.")
def check(ctx):
    yield ctx.finding(RULE, None, f"limit={ctx.threshold_bytes('limit', 5)}")
''')
    (work / "placeviz.toml").write_text('[lint]\nselect = ["XY120", "XY102"]\n[lint.thresholds]\nlimit = "2KiB"\n'
                                        '[lint.severity]\nXY102 = "error"\n')
    code, doc, _ = lint(capsys, "model.pb")
    by_rule = {f["rule"]: f for f in doc["findings"]}
    assert by_rule["XY120"]["message"] == "limit=2048"
    assert by_rule["XY102"]["severity"] == "error" and code == 1


# ----------------------------------------------------------------- suppression, PV901-903
def test_per_node_ignores_and_the_meta_rules(work, capsys):
    (work / "placeviz.toml").write_text('''
[lint]
select = ["XY", "PV9"]
ignore = ["XY2O1"]
[[lint.per-node-ignores]]
rule = "XY101"
node = "^scope/i1$"
reason = "kept on purpose"
[[lint.per-node-ignores]]
rule = "flag-const"
node = "^c$"
[[lint.per-node-ignores]]
rule = "XY101"
node = "^gone/"
reason = "stale"
[[lint.per-node-ignores]]
rule = "XY103"
node = ".*"
reason = "not ignorable"
[[lint.per-node-ignores]]
rule = "XY104"
node = ".*"
reason = "rule is skipped here, so this entry is not judged"
[[lint.per-node-ignores]]
rule = "XY9"
node = ".*"
reason = "unknown rule"
''')
    code, doc, _ = lint(capsys, "model.pb")
    assert pairs(doc) == {
        ("XY101", "scope/i2"),  # i1 suppressed with a reason
        ("XY102", "c"),  # the entry without a reason is inert ...
        ("PV902", None),  # ... and reported
        ("XY103", "n"),  # not ignorable
        ("PV901", None), ("PV901", None),  # "^gone/" matched nothing; the XY103 entry can never apply
        ("PV903", None), ("PV903", None),  # ignore = XY2O1, per-node-ignores rule XY9
    }
    meta = [f for f in doc["findings"] if f["rule"].startswith("PV9")]
    assert all(f["model"] == "placeviz.toml" for f in meta)
    texts = sorted(f["message"] for f in meta)
    assert sum("per-node-ignores[3]" in t and "matched no finding" in t for t in texts) == 1
    assert sum("per-node-ignores[4]" in t and "XY103 cannot be silenced" in t for t in texts) == 1
    assert sum("per-node-ignores[2]" in t and "has no reason" in t for t in texts) == 1
    assert sum("'XY2O1'" in t for t in texts) == 1 and sum("'XY9'" in t for t in texts) == 1
    assert not any("per-node-ignores[5]" in t for t in texts)
    assert doc["summary"]["suppressed"] == 1


def test_model_glob_in_an_ignore_entry(work, capsys):
    (work / "placeviz.toml").write_text('[lint]\nselect = ["XY101"]\n[[lint.per-node-ignores]]\nrule = "XY101"\n'
                                        'model = "other/*.pb"\nreason = "only there"\n')
    code, doc, _ = lint(capsys, "model.pb")
    assert pairs(doc) == {("XY101", "scope/i1"), ("XY101", "scope/i2")}  # the glob does not cover model.pb


# ------------------------------------------------------------------------------- baseline
def test_baseline_accepts_todays_findings_and_reports_new_ones(work, capsys):
    code, _, err = lint(capsys, "model.pb", "--select", "XY1", "--write-baseline", "base.json", fmt="text")
    assert code == 0 and "wrote base.json: 4 fingerprints" in err
    base = json.loads((work / "base.json").read_text())
    assert base["schema"] == "placeviz.lint-baseline/1"
    assert {(e["rule"], e["model"], e["node"]) for e in base["findings"]} == {
        (r, "model.pb", n) for r, n in ALL_XY}
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY1", "--baseline", "base.json")
    assert pairs(doc) == set() and doc["summary"]["baselined"] == 4 and code == 0
    g = GraphDef()
    g.ParseFromString((work / "model.pb").read_bytes())
    g.node.add(name="new_identity", op="Identity", input=["c"])
    (work / "model.pb").write_bytes(g.SerializeToString())
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY1", "--baseline", "base.json")
    assert pairs(doc) == {("XY101", "new_identity")} and code == 0  # a warning; fail-on error
    code, _, err = lint(capsys, "model.pb", "--baseline", "missing.json", fmt="text")
    assert code == 2 and "missing.json" in err


# --------------------------------------------------------------- skipped and failing rules
def test_a_rule_whose_need_is_missing_is_skipped_with_the_reason(work, capsys):
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY104")
    assert doc["findings"] == [] and code == 0
    assert doc["skipped"] == [{"rule": "XY104", "name": "needs-cluster", "model": "model.pb",
                               "reason": 'needs a cluster spec: give --cluster FILE (or cluster = "..." in the '
                                         'lint config)'}]
    (work / "cluster.json").write_text('{"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]}')
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY104", "--cluster", "cluster.json")
    assert doc["skipped"] == [] and [f["message"] for f in doc["findings"]] == ["cluster has jobs ['ps', 'worker']"]
    (work / "conf").mkdir()
    (work / "conf" / "c.json").write_text('{"ps": ["ps0:2222"], "chief": ["c:1"]}')
    (work / "placeviz.toml").write_text('[lint]\ncluster = "conf/c.json"\n')  # relative to the config file
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY104")
    assert [f["message"] for f in doc["findings"]] == ["cluster has jobs ['chief', 'ps']"]


def test_a_pipeline_crash_is_an_error_not_a_traceback(work, capsys, monkeypatch):
    import placeviz.pipeline

    def crash(*args, **kwargs):
        raise RuntimeError("stage blew up")

    monkeypatch.setattr(placeviz.pipeline, "run_pipeline", crash)
    code, doc, err = lint(capsys, "model.pb", "--select", "XY101")
    assert code == 2 and doc["findings"] == []
    assert doc["errors"][0]["message"] == "internal error in the pipeline: RuntimeError: stage blew up"


def test_a_rule_that_raises_is_an_error_naming_it_and_the_others_still_run(work, capsys):
    (work / "myrules" / "raises.py").write_text(RAISING_RULE)
    code, doc, err = lint(capsys, "model.pb", "--select", "XY101", "--select", "XY150")
    assert code == 2
    assert pairs(doc) == {("XY101", "scope/i1"), ("XY101", "scope/i2")}
    assert doc["errors"] == [{"message": "rule XY150 (always-raises) failed on model.pb: KeyError: 'boom'",
                              "model": "model.pb", "rule": "XY150"}]
    assert "Traceback" not in err and "XY150" in err


def test_bad_rule_sets_are_usage_errors(work, capsys):
    (work / "myrules" / "dup.py").write_text(USER_RULES["flag_const.py"].replace("flag-const", "other-name"))
    code, _, err = lint(capsys, "model.pb", fmt="text")
    assert code == 2 and "two rules use 'XY102'" in err
    (work / "myrules" / "dup.py").write_text(USER_RULES["flag_const.py"].replace('id="XY102", name="flag-const"',
                                                                                 'id="XY130", name="Bad_Name"'))
    code, _, err = lint(capsys, "model.pb", fmt="text")
    assert code == 2 and "kebab-case" in err
    (work / "myrules" / "dup.py").write_text("import nonexistent_module_xyz\n")
    code, _, err = lint(capsys, "model.pb", fmt="text")
    assert code == 2 and "cannot be imported" in err and "Traceback" not in err


# -------------------------------------------------------------------------------- formats
def test_json_document(work, capsys):
    code, doc, _ = lint(capsys, "model.pb", "--select", "XY1")
    assert doc["schema"] == "placeviz.lint/1"
    assert set(doc) >= {"findings", "skipped", "errors", "summary", "models", "rules"}
    f = next(f for f in doc["findings"] if f["rule"] == "XY101")
    assert set(f) >= {"rule", "name", "severity", "model", "node", "device", "message", "related", "suggestion",
                      "doc", "fingerprint"}
    assert f["doc"] == "docs/rules/XY101.md" and f["suggestion"] == "remove it"
    assert doc["summary"] == {"models": 1, "rules": 4, "findings": 4,
                              "by_severity": {"error": 1, "warning": 2, "info": 1},
                              "by_rule": {"XY101": 2, "XY102": 1, "XY103": 1}, "skipped": 1, "suppressed": 0,
                              "baselined": 0, "errors": 0, "fail_on": "error", "exit_code": 1}


def test_text_report_and_output_file(work, capsys):
    code, out, err = lint(capsys, "model.pb", "--select", "XY1", "-o", "report.txt", fmt="text")
    assert out == "" and code == 1 and "wrote report.txt" in err
    text = (work / "report.txt").read_text()
    assert "model.pb: scope/i1: XY101 [warning] scope/i1 is an Identity  (flag-identity)" in text
    assert "    help: remove it" in text
    assert "skipped on model.pb: XY104: needs a cluster spec" in text
    assert text.rstrip().endswith("placeviz lint: 4 findings (1 error, 2 warning, 1 info) in 1 model with 4 rules; "
                                  "1 rules skipped; fail-on error: exit 1")


def test_github_annotations_and_summary(work, capsys):
    code, out, _ = lint(capsys, "model.pb", "--select", "XY1", fmt="github")
    lines = out.splitlines()
    assert lines[:4] == [
        "::warning file=model.pb,line=1,title=XY101 flag-identity::scope/i1: scope/i1 is an Identity",
        "::warning file=model.pb,line=1,title=XY101 flag-identity::scope/i2: scope/i2 is an Identity",
        "::notice file=model.pb,line=1,title=XY102 flag-const::c: a constant, with a comma, a colon: and 100%25",
        "::error file=model.pb,line=1,title=XY103 flag-noop::n: a NoOp",
    ]
    assert lines[-1].startswith("placeviz lint: 4 findings (1 error, 2 warning, 1 info)")
    assert code == 1


def test_github_lines_point_into_text_models(work, capsys):
    from google.protobuf import text_format

    g = GraphDef()
    g.ParseFromString((work / "model.pb").read_bytes())
    (work / "model.pbtxt").write_text(text_format.MessageToString(g))
    _, out, _ = lint(capsys, "model.pbtxt", "--select", "XY103", fmt="github")
    line = int(out.splitlines()[0].split("line=")[1].split(",")[0])
    assert (work / "model.pbtxt").read_text().splitlines()[line - 1].strip() == 'name: "n"'


def test_sarif_validates_against_the_official_schema(work, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    (work / "myrules" / "raises.py").write_text(RAISING_RULE)
    (work / "placeviz.toml").write_text('[lint]\n[[lint.per-node-ignores]]\nrule = "XY101"\nnode = "x"\n')
    code, sarif, _ = lint(capsys, "model.pb", "--select", "XY1", "--select", "PV9", fmt="sarif")
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(sarif), key=str)
    assert not errors, errors[0]
    run = sarif["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rules == ["PV901", "PV902", "PV903", "XY101", "XY102", "XY103", "XY104", "XY150"]
    results = {(r["ruleId"], r["level"], r["locations"][0].get("logicalLocations", [{}])[0].get("fullyQualifiedName"))
               for r in run["results"]}
    assert results == {("XY101", "warning", "scope/i1"), ("XY101", "warning", "scope/i2"), ("XY102", "note", "c"),
                       ("XY103", "error", "n"), ("PV902", "warning", None)}
    for r in run["results"]:
        assert rules[r["ruleIndex"]] == r["ruleId"]
        assert r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] in ("model.pb", "placeviz.toml")
        assert len(r["partialFingerprints"]["placevizNode/v1"]) == 24
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False and code == 2
    levels = [(n["level"], n["message"]["text"][:20]) for n in invocation["toolExecutionNotifications"]]
    assert ("error", "rule XY150 (always-r") in levels and ("note", "skipped on model.pb:") in levels
    # A broken sarif (wrong level) must fail the same validation: the check has teeth.
    run["results"][0]["level"] = "fatal"
    assert list(validator.iter_errors(sarif))


def test_sarif_of_a_clean_run_is_valid_too(work, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    code, sarif, _ = lint(capsys, "model.pb", "--select", "PV0", fmt="sarif")
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.Draft4Validator(schema).validate(sarif)
    assert code == 0 and sarif["runs"][0]["results"] == []
    assert "## How it is detected" in sarif["runs"][0]["tool"]["driver"]["rules"][0]["help"]["markdown"]


@pytest.mark.parametrize("fail_on, expected", [("error", 1), ("warning", 1), ("info", 1), ("never", 0)])
def test_exit_codes_follow_fail_on(work, capsys, fail_on, expected):
    code, _, _ = lint(capsys, "model.pb", "--select", "XY101", "--select", "XY103", "--fail-on", fail_on)
    assert code == expected
    code, _, _ = lint(capsys, "model.pb", "--select", "XY102", "--fail-on", fail_on)  # info only
    assert code == (1 if fail_on == "info" else 0)


def test_a_missing_model_is_exit_2_and_the_other_models_are_still_linted(work, capsys):
    code, doc, err = lint(capsys, "model.pb", "nope.pb", "--select", "XY101")
    assert code == 2 and pairs(doc) == {("XY101", "scope/i1"), ("XY101", "scope/i2")}
    assert "nope.pb: no such file or directory" in err


# ----------------------------------------------------------------------- rules and docs
def test_rules_listing_and_rule_page(work, capsys):
    code, out, _ = run_cli(["rules", "--format", "json"], capsys)
    rules = json.loads(out)["rules"]
    ids = [r["id"] for r in rules]
    assert code == 0 and ids == sorted(ids) and {"PV001", "PV005", "PV901", "PV903"} <= set(ids)
    assert all(r["origin"] == "builtin" for r in rules)
    code, out, _ = run_cli(["rule", "duplicate-node-name"], capsys)
    assert code == 0 and out.startswith("# PV002: duplicate-node-name\n") and "## Fix" in out
    code, out, _ = run_cli(["rule", "PV002"], capsys)
    assert out.startswith("# PV002")
    code, _, err = run_cli(["rule", "PV999"], capsys)
    assert code == 2 and "PV999" in err


def test_docs_are_generated_from_the_rules_and_do_not_drift():
    """docs/rules/ must equal what the rules generate: run `make docs` after changing a rule."""
    from placeviz.lint.docs import generate_docs

    pages = generate_docs(load_rules())
    docs = REPO / "docs" / "rules"
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in docs.glob("*.md")}
    assert sorted(on_disk) == sorted(pages), "docs/rules is out of date: run `make docs`"
    stale = [name for name, text in pages.items() if on_disk[name] != text]
    assert not stale, f"docs/rules is out of date ({stale}): run `make docs`"


def test_write_docs_and_check(work, capsys):
    code, _, err = run_cli(["rules", "--rules", "myrules", "--write-docs", "out"], capsys)
    assert code == 0 and (work / "out" / "XY101.md").is_file() and (work / "out" / "PV002.md").is_file()
    code, _, _ = run_cli(["rules", "--rules", "myrules", "--write-docs", "out", "--check"], capsys)
    assert code == 0
    (work / "out" / "XY101.md").write_text("edited by hand\n")
    code, _, err = run_cli(["rules", "--rules", "myrules", "--write-docs", "out", "--check"], capsys)
    assert code == 1 and "XY101.md" in err


def test_rules_package_ships_in_the_wheel():
    """The built-in rules are found by importing ``placeviz.rules``, which setuptools packages (inside
    placeviz's own namespace, so no other project's top-level ``rules`` can collide with it)."""
    import tomllib
    from setuptools import find_packages

    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = find_packages(str(REPO), include=include)
    assert {"placeviz.rules", "placeviz.sample_graphs"} <= set(packages)
    assert not [p for p in packages if not p.startswith("placeviz")]
    from placeviz.lint.discovery import builtin_rule_modules

    assert "placeviz.rules.pv002_duplicate_node_name" in builtin_rule_modules()


COLD = """
import sys
from placeviz.cli import main
try:
    main(["lint", sys.argv[1], "--format", "json"])
except SystemExit as e:
    assert e.code == 0, e.code
leaked = sorted(m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow."))
assert not leaked, leaked
print("NO_TF_OK", file=sys.stderr)
"""


def test_a_cold_lint_does_not_import_tensorflow(work):
    proc = subprocess.run([sys.executable, "-c", COLD, "model.pb"], capture_output=True, text=True, timeout=120,
                          cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "NO_TF_OK" in proc.stderr and json.loads(proc.stdout)["schema"] == "placeviz.lint/1"


def test_sarif_keeps_the_most_severe_results_within_githubs_limit(monkeypatch):
    from placeviz.lint import sarif
    from placeviz.lint.api import Finding
    from placeviz.lint.engine import LintReport

    monkeypatch.setattr(sarif, "MAX_RESULTS", 3)
    rules = [r for r in load_rules() if r.id == "PV001"]
    findings = [Finding("PV001", "unknown-op", sev, "m.pb", f"n{i}", None, "x")
                for i, sev in enumerate(["info", "error", "warning", "info", "error"])]
    run = sarif.to_sarif(LintReport(rules=rules, models=["m.pb"], findings=findings))["runs"][0]
    assert [r["level"] for r in run["results"]] == ["error", "error", "warning"]
    assert run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"].startswith("2 less severe")


def test_the_partition_of_a_step_is_made_only_when_a_selected_rule_can_read_it(work):
    """PV401 and PV403 read the partition of one step; without them (``--ignore PV401,PV403``) lint
    does not partition, unless a ``--rules DIR`` rule is loaded (it may read ``ctx.partitions``
    without declaring it). The report-only summaries are never made for lint."""
    from placeviz.io import load
    from placeviz.lint.runner import LintOptions, lint_pipeline, model_pipeline
    from placeviz.pipeline import Options
    from placeviz.placement import PlacementOptions
    from placeviz.placement.setter import SetterConfig

    g = GraphDef()
    g.node.add(name="a", op="NoOp")
    g.node.add(name="b", op="NoOp", input=["^a"])
    (work / "noops.pb").write_bytes(g.SerializeToString())
    options = LintOptions(pipeline=Options(placement=PlacementOptions(setter=SetterConfig(ps_tasks=1))))
    model = load("noops.pb")
    builtin = load_rules()
    without = [r for r in builtin if r.id not in ("PV401", "PV403")]
    full = model_pipeline(model, builtin, options)
    assert full.devices is not None and full.partitions is not None
    lint_pipeline(full, builtin, options)
    assert full.analysis._views == {}  # no section view was made
    skipped = model_pipeline(model, without, options)
    assert skipped.devices == full.devices and skipped.partitions is None
    user = load_rules(["myrules"], builtin=False)
    assert model_pipeline(model, [*without, *user], options).partitions is not None
