"""Contained user rules (``lint --rules DIR``, placeviz.lint.contain).

The issue's planted rules: one calling ``sys.exit(0)`` made lint exit 0 with no report;
``sys.exit(3)`` at import exited 3 silently; an endless loop hung lint; ``print`` corrupted JSON
output. Each now is an error of that rule (exit 2), lint goes on with the other rules, and the
report stays the report. Everything goes through the CLI in-process (``run_cli``), where the
forked child of a rule shares pytest's process, as it shares placeviz's.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest
from conftest import lint_cli, lint_workdir, run_cli

from placeviz.lint import contain

HEADER = "import os, sys, signal\nfrom placeviz.lint import Rule\n"
GOOD = HEADER + textwrap.dedent('''
    RULE = Rule(id="XY100", name="flag-consts", severity="warning", summary="Flags every Const.")
    def check(ctx):
        for i in ctx.nodes_by_op("Const"):
            yield ctx.finding(RULE, i, "a constant")
''')


def rule(rule_id: str, body: str, at_import: str = "") -> str:
    """A user rule module whose check runs ``body`` (indented), with ``at_import`` at module level."""
    return HEADER + at_import + textwrap.dedent(f'''
        RULE = Rule(id="{rule_id}", name="rule-{rule_id.lower()}", severity="error", summary="Planted.")
        def check(ctx):
    ''') + textwrap.indent(textwrap.dedent(body), "    ") + "\n    return []\n"


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    return lint_workdir(tmp_path, monkeypatch, [("c", "Const", []), ("i", "Identity", ["c"])], {"good.py": GOOD},
                        rules_dir="rules")


def lint_json(capsys, *extra, rules="rules"):
    code, doc, err = lint_cli(capsys, "model.pb", "--select", "XY", *extra, rules_dir=rules)
    return code, doc, err  # doc: stdout parsed as JSON, so it holds the report and nothing else


def errors_of(doc) -> dict[str, str]:
    return {e["rule"]: e["message"] for e in doc["errors"]}


def test_sys_exit_and_keyboard_interrupt_in_check_are_rule_errors(work, capsys, kernel_mode):  # noqa: F811
    (work / "rules" / "exit0.py").write_text(rule("XY201", "sys.exit(0)"))
    (work / "rules" / "exit3.py").write_text(rule("XY202", "raise SystemExit(3)"))
    (work / "rules" / "kbd.py").write_text(rule("XY203", "raise KeyboardInterrupt"))
    (work / "rules" / "oserror.py").write_text(rule("XY204", "os._exit(5)"))
    (work / "rules" / "crash.py").write_text(rule("XY205", "os.kill(os.getpid(), signal.SIGSEGV)"))
    code, doc, err = lint_json(capsys)
    assert code == 2  # an error of a rule, as for any rule that raises
    assert {(f["rule"], f["node"]) for f in doc["findings"]} == {("XY100", "c")}  # lint went on
    errors = errors_of(doc)
    assert errors["XY201"] == "rule XY201 (rule-xy201) failed on model.pb: SystemExit: it called sys.exit(0)"
    assert errors["XY202"].endswith("SystemExit: it called sys.exit(3)")
    assert errors["XY203"].endswith("KeyboardInterrupt: raised by the rule itself (not a Ctrl-C)")
    assert errors["XY204"].endswith("ended its process with exit code 5 (os._exit?) before returning")
    assert errors["XY205"].endswith("crashed: its process was killed by SIGSEGV")
    assert doc["summary"]["exit_code"] == 2 and "Traceback" not in err
    assert [line for line in err.splitlines() if "XY201" in line] == [
        "placeviz: error: rule XY201 (rule-xy201) failed on model.pb: SystemExit: it called sys.exit(0)"]


@pytest.mark.parametrize("body", [
    "while True:\n    pass",
    # swallows everything it is sent: only killing the process stops it
    "while True:\n    try:\n        time_waster = sum(range(1000))\n    except BaseException:\n        pass",
    # one long call in C: no Python-level timer would ever get to run
    "import re\nre.match(r'(a+)+$', 'a' * 64 + 'b')",
    # prints without end: the output is drained and capped, neither memory nor disk fills up
    "while True:\n    print('x' * 4096)",
], ids=["python-loop", "swallows-exceptions", "c-level", "prints-forever"])
def test_an_endless_rule_times_out_and_lint_goes_on(work, capsys, body):
    pid_file = work / "pid"
    (work / "rules" / "loop.py").write_text(rule("XY210", f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                                          + body))
    started = time.monotonic()
    code, doc, err = lint_json(capsys, "--rule-timeout", "1")
    assert time.monotonic() - started < 30
    assert code == 2 and {(f["rule"], f["node"]) for f in doc["findings"]} == {("XY100", "c")}
    assert errors_of(doc) == {"XY210": "rule XY210 (rule-xy210) timed out on model.pb after 1 s (--rule-timeout): "
                                       "it was stopped, and the other rules ran"}
    pid = int(pid_file.read_text())
    assert pid != os.getpid() and not Path(f"/proc/{pid}").exists()  # killed and reaped
    if "print" in body:
        [note] = [line for line in err.splitlines() if "XY210" in line and "printed" in line]
        printed = int(note.split(" printed ")[1].split(" bytes")[0].replace(",", ""))
        assert printed > 1 << 20 and note.endswith("first line: '" + "x" * 200 + "'")


def test_what_a_rule_prints_stays_out_of_the_report(work, capsys):
    (work / "rules" / "printer.py").write_text(rule(
        "XY220", 'print("{not json")\nsys.stderr.write("to stderr\\n")\nos.write(1, b"raw fd 1\\n")\n'
                 'os.write(2, b"raw fd 2\\n")\nyield ctx.finding(RULE, None, "printed")',
        at_import='print("printed at import")\n'))
    code, doc, err = lint_json(capsys, "--fail-on", "never")
    assert code == 0 and doc["errors"] == []
    assert {f["rule"] for f in doc["findings"]} == {"XY100", "XY220"}
    assert "{not json" not in err.splitlines() and "raw fd" not in err  # not passed through: summarized
    notes = [line for line in err.splitlines() if "printed" in line and "XY220" in line]
    assert notes == ["placeviz: rule XY220 (rule-xy220) printed 38 bytes on stdout/stderr on model.pb, kept out "
                     "of the report; first line: '{not json'"]
    assert any(line.startswith("placeviz: rule module rules/printer.py printed 18 characters when imported")
               for line in err.splitlines())
    code, out, _ = run_cli(["lint", "model.pb", "--format", "sarif", "--rules", "rules", "--select", "XY"], capsys)
    assert json.loads(out)["version"] == "2.1.0"


@pytest.mark.parametrize("module, message", [
    ("import sys\nsys.exit(3)\n", "SystemExit: it called sys.exit(3)"),
    ("import sys\nsys.exit(0)\n", "SystemExit: it called sys.exit(0)"),
    ("raise KeyboardInterrupt\n", "KeyboardInterrupt: raised by the rule itself (not a Ctrl-C)"),
    ("while True:\n    pass\n", "its import timed out after 1 s (--rule-timeout)"),
    ("while True:\n    print('x' * 4096)\n", "its import timed out after 1 s (--rule-timeout)"),
])
def test_a_module_that_exits_or_hangs_at_import_is_one_line(work, capsys, module, message):
    (work / "rules" / "bad.py").write_text(module)
    started = time.monotonic()
    code, out, err = run_cli(["lint", "model.pb", "--rules", "rules", "--rule-timeout", "1"], capsys)
    assert time.monotonic() - started < 30
    assert code == 2 and out == ""
    assert err.strip() == f"placeviz: error: rule module rules/bad.py cannot be imported: {message}"


def test_a_rule_returning_what_cannot_cross_the_pipe(work, capsys):
    (work / "rules" / "lazy.py").write_text(rule("XY230", "return [x for x in ()] or [lambda: 1]"))
    code, doc, _ = lint_json(capsys)
    assert code == 2
    assert "XY230" in errors_of(doc) and "cannot be sent back to placeviz" in errors_of(doc)["XY230"]


def test_without_fork_the_in_process_guard_does_the_same(work, capsys, monkeypatch):
    monkeypatch.setattr(contain, "fork_available", lambda: False)
    (work / "rules" / "exit0.py").write_text(rule("XY201", "sys.exit(0)"))
    (work / "rules" / "loop.py").write_text(rule("XY210", "while True:\n    pass"))
    (work / "rules" / "printer.py").write_text(rule("XY220", 'print("{not json")'))
    code, doc, err = lint_json(capsys, "--rule-timeout", "1")
    assert code == 2 and {(f["rule"], f["node"]) for f in doc["findings"]} == {("XY100", "c")}
    errors = errors_of(doc)
    assert errors["XY201"].endswith("SystemExit: it called sys.exit(0)")
    assert errors["XY210"].endswith("timed out on model.pb after 1 s (--rule-timeout): it was stopped, and the "
                                    "other rules ran")
    assert "XY220" not in errors and "first line: '{not json'" in err


def test_a_real_ctrl_c_still_interrupts_a_guarded_import(work, capsys, python_sigint):
    # The guard turns a KeyboardInterrupt *raised by the module* into an error; one from SIGINT propagates.
    (work / "rules" / "selfint.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n"
                                               "import time\ntime.sleep(5)\n")
    code, out, err = run_cli(["lint", "model.pb", "--rules", "rules"], capsys)
    assert code == 130 and "placeviz: interrupted" in err and "cannot be imported" not in err
