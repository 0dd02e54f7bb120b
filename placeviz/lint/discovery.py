"""Finding the rules: the ``placeviz.rules`` package that ships with placeviz, plus a user's ``--rules DIR``.

Built-in rules are imported as the package ``placeviz.rules`` (``placeviz.rules.pv301_...``), not from a path next
to this file, so they work from an installed wheel as from a checkout. A user's directory is read
file by file (``*.py`` not starting with ``_``), each module under a private name so that two
directories may both hold a ``my_rule.py``.

Every rule is validated before anything runs (ID and kebab-case name unique across all sources,
``check`` callable, built-in file named after its ID): a bad rule set is a usage error (exit 2),
never a half-run lint.

A user's module is imported under :func:`placeviz.lint.contain.run_here`: ``sys.exit()``,
``KeyboardInterrupt`` (not a real Ctrl-C) or any exception at import is a :class:`RuleError` (one
line, exit 2) instead of ending placeviz with the module's exit code; an import that takes longer
than the rule time limit is stopped the same way; and what the module prints is kept out of
placeviz's output (:attr:`LoadedRule.output`, which ``lint`` notes on stderr).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from placeviz.errors import PlacevizError
from placeviz.lint.api import Finding, LintContext, Rule
from placeviz.lint.contain import DEFAULT_TIMEOUT, run_here

ID_RE = re.compile(r"^[A-Z]{2,}[0-9]{3}$")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_FILE_ID_RE = re.compile(r"^([a-z]{2,}[0-9]{3})_")


class RuleError(PlacevizError):
    """A rule module that cannot be used (import error, bad metadata, duplicate ID or name)."""


@dataclass(frozen=True)
class LoadedRule:
    """A rule's metadata, its ``check`` and where it came from."""

    rule: Rule
    check: Callable[[LintContext], Iterable[Finding] | None]
    origin: str  # "builtin" or the user's directory
    path: str
    output: str = ""
    """What a user's module printed while it was imported (kept out of placeviz's output)."""

    @property
    def id(self) -> str:
        return self.rule.id

    @property
    def name(self) -> str:
        return self.rule.name


def builtin_rule_modules() -> list[str]:
    """Module names of every rule module in the ``placeviz.rules`` package."""
    try:
        package = importlib.import_module("placeviz.rules")
    except ImportError as e:  # pragma: no cover - a broken install
        raise RuleError(f"the built-in rules package placeviz.rules cannot be imported: {e}") from None
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or info.ispkg:
            continue
        found.append(f"placeviz.rules.{info.name}")
    return sorted(found)


def load_rules(extra_dirs=(), *, builtin: bool = True, timeout: float | None = DEFAULT_TIMEOUT) -> list[LoadedRule]:
    """All rules, sorted by ID: the built-in ones (unless ``builtin`` is False) and those of ``extra_dirs``.

    ``timeout``: seconds each user module's import may take (None or 0: no limit).
    """
    loaded: list[LoadedRule] = []
    if builtin:
        for module_name in builtin_rule_modules():
            module = _import(module_name)
            loaded.append(_from_module(module, "builtin", getattr(module, "__file__", None) or module_name))
    for directory in extra_dirs:
        loaded.extend(_load_dir(Path(directory), timeout))
    _check_unique(loaded)
    return sorted(loaded, key=lambda r: r.id)


def _load_dir(directory: Path, timeout: float | None = DEFAULT_TIMEOUT) -> list[LoadedRule]:
    import hashlib  # only for --rules DIR: a run with the built-in rules does not pay for the import

    if not directory.is_dir():
        raise RuleError(f"--rules {directory}: not a directory")
    out = []
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
        module_name = f"placeviz_user_rules_{digest}.{path.stem}"
        module, output = _import_file(module_name, path, timeout)
        out.append(replace(_from_module(module, str(directory), str(path)), output=output))
    return out


def _import(module_name: str):
    try:
        return importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any failure of a rule module is the rule's
        raise RuleError(f"rule module {module_name} cannot be imported: {type(e).__name__}: {e}") from None


def _import_file(module_name: str, path: Path, timeout: float | None = DEFAULT_TIMEOUT):
    """The user's module and what it printed at import (contained: see the module docstring)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None  # a ``*.py`` path always has a source loader
    loader = spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    outcome = run_here(lambda: loader.exec_module(module), timeout)
    if outcome.error is not None:
        del sys.modules[module_name]
        what = f"its import timed out after {timeout:g} s (--rule-timeout)" if outcome.timed_out else outcome.error
        raise RuleError(f"rule module {path} cannot be imported: {what}")
    return module, outcome.output


def _from_module(module, origin: str, path: str) -> LoadedRule:
    rule = getattr(module, "RULE", None)
    check = getattr(module, "check", None)
    if not isinstance(rule, Rule):
        raise RuleError(f"{path}: no RULE = Rule(...) in the module")
    if not callable(check):
        raise RuleError(f"{path}: {rule.id} has no check(ctx) function")
    problems = validate_rule(rule)
    match = _FILE_ID_RE.match(Path(path).stem)
    if origin == "builtin" and (match is None or match.group(1) != rule.id.lower()):
        problems.append(f"the file must be named {rule.id.lower()}_<name>.py")
    if problems:
        raise RuleError(f"{path}: rule {rule.id}: " + "; ".join(problems))
    return LoadedRule(rule, check, origin, path)


def validate_rule(rule: Rule) -> list[str]:
    """What is wrong with a rule's metadata (empty: nothing)."""
    problems = []
    if not ID_RE.match(rule.id):
        problems.append("the ID must be 2+ capital letters and 3 digits, like PV301")
    if not NAME_RE.match(rule.name):
        problems.append(f"the name {rule.name!r} must be kebab-case, like sync-token-queue-shared")
    if not rule.summary.strip():
        problems.append("the summary is empty")
    if "\n" in rule.summary.strip():
        problems.append("the summary must be one line")
    return problems


def _check_unique(loaded: list[LoadedRule]) -> None:
    seen: dict[str, LoadedRule] = {}
    for r in loaded:
        for key in (r.id.upper(), r.name):
            other = seen.get(key)
            if other is not None:
                raise RuleError(f"two rules use {key!r}: {other.path} ({other.id}) and {r.path} ({r.id})")
            seen[key] = r
