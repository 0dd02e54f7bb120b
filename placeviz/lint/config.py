"""Lint configuration: ``[tool.placeviz.lint]`` in ``pyproject.toml``, or ``placeviz.toml``.

Found like ruff finds its settings: ``--config FILE`` if given, else the nearest directory from
the current one upwards holding a ``placeviz.toml`` (table ``[lint]`` or ``[tool.placeviz.lint]``)
or a ``pyproject.toml`` with a ``[tool.placeviz.lint]`` table; a ``pyproject.toml`` without one
is passed over. Unknown keys are errors (a typo must not silently disable a check); unknown rule
IDs are not errors here but PV903 findings, reported by the engine, so a CI log shows them.

Keys::

    select = ["PV0", "PV2"]          # default: every non-preview rule ("ALL")
    extend-select = ["PV210"]
    ignore = ["PV106"]
    fail-on = "warning"              # error | warning | info | never
    preview = false                  # also select preview rules
    cluster = "cluster.json"         # the cluster spec (relative to this file) when --cluster is not given
    baseline = ".placeviz-baseline.json"
    [tool.placeviz.lint.thresholds]  # read by rules through ctx.threshold(...)
    const-bytes = "16MiB"
    [tool.placeviz.lint.severity]    # per-rule severity override
    PV204 = "error"
    [[tool.placeviz.lint.per-node-ignores]]
    rule = "PV208"                   # ID, name, prefix, or a list of them
    node = "^input_pipeline/"        # regex searched in the node name
    model = "models/*.pb"            # optional glob on the model path
    reason = "decode on PS by design" # mandatory (PV902 otherwise, and the entry is inert)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from placeviz.errors import PlacevizError
from placeviz.lint.api import SEVERITIES
from placeviz.lint.selection import split_selectors

FAIL_ON = (*SEVERITIES, "never")
KEYS = {"select", "extend-select", "ignore", "fail-on", "preview", "cluster", "baseline", "thresholds",
        "severity", "per-node-ignores"}
IGNORE_KEYS = {"rule", "node", "model", "reason"}


class ConfigError(PlacevizError):
    """A lint config that cannot be used (exit 2)."""


@dataclass
class IgnoreEntry:
    """One ``per-node-ignores`` entry, as written (``index`` counts from 1 in messages)."""

    index: int
    rules: list[str]
    node: re.Pattern | None
    model: str | None
    reason: str

    def describe(self) -> str:
        parts = [f"rule={','.join(self.rules)}"]
        if self.node is not None:
            parts.append(f"node={self.node.pattern!r}")
        if self.model is not None:
            parts.append(f"model={self.model!r}")
        return f"per-node-ignores[{self.index}] ({' '.join(parts)})"


@dataclass
class LintConfig:
    path: Path | None = None
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    fail_on: str | None = None
    preview: bool = False
    cluster: str | None = None
    baseline: str | None = None
    thresholds: dict = field(default_factory=dict)
    severity: dict[str, str] = field(default_factory=dict)
    per_node_ignores: list[IgnoreEntry] = field(default_factory=list)


def find_config(start: Path | None = None) -> Path | None:
    """The nearest ``placeviz.toml``, or ``pyproject.toml`` with ``[tool.placeviz.lint]``, upwards."""
    directory = (start or Path.cwd()).resolve()
    for d in (directory, *directory.parents):
        candidate = d / "placeviz.toml"
        if candidate.is_file():
            return candidate
        candidate = d / "pyproject.toml"
        if candidate.is_file() and _lint_table(_read_toml(candidate), candidate) is not None:
            return candidate
    return None


def load_config(path: str | Path | None = None, *, search: bool = True) -> LintConfig:
    """Read ``path`` (or the one :func:`find_config` finds; none: defaults)."""
    if path is None:
        path = find_config() if search else None
        if path is None:
            return LintConfig()
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--config {path}: no such file")
    table = _lint_table(_read_toml(path), path)
    if table is None:
        if path.name == "pyproject.toml":
            raise ConfigError(f"{path}: no [tool.placeviz.lint] table")
        table = {}
    return parse_config(table, path)


def _read_toml(path: Path) -> dict:
    # imported here: most runs find no config file (a cold start pays for every import)
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the tomli backport (a dependency there)
        import tomli as tomllib

    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None


def _lint_table(doc: dict, path: Path) -> dict | None:
    table = doc.get("tool", {}).get("placeviz", {}).get("lint") if isinstance(doc.get("tool"), dict) else None
    if table is None and path.name != "pyproject.toml":
        table = doc.get("lint")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: the lint settings must be a table")
    return table


def parse_config(table: dict, path: Path) -> LintConfig:
    where = f"{path} [tool.placeviz.lint]" if path.name == "pyproject.toml" else str(path)
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})")
    cfg = LintConfig(path=path)
    cfg.select = _str_list(table, "select", where) if "select" in table else None
    cfg.extend_select = _str_list(table, "extend-select", where)
    cfg.ignore = _str_list(table, "ignore", where)
    if "fail-on" in table:
        if table["fail-on"] not in FAIL_ON:
            raise ConfigError(f"{where}: fail-on must be one of {', '.join(FAIL_ON)}, got {table['fail-on']!r}")
        cfg.fail_on = table["fail-on"]
    cfg.preview = _typed(table, "preview", bool, where, False)
    base = path.parent
    for key in ("cluster", "baseline"):
        value = _typed(table, key, str, where, None)
        if value is not None:
            setattr(cfg, key, str(base / value))
    cfg.thresholds = _typed(table, "thresholds", dict, where, {})
    severity = _typed(table, "severity", dict, where, {})
    for rule, level in severity.items():
        if level not in SEVERITIES:
            raise ConfigError(f"{where}: severity.{rule} must be one of {', '.join(SEVERITIES)}, got {level!r}")
    cfg.severity = {k.upper() if k[:1].isalpha() and k[-3:].isdigit() else k: v for k, v in severity.items()}
    entries = _typed(table, "per-node-ignores", list, where, [])
    cfg.per_node_ignores = [_ignore_entry(e, i, where) for i, e in enumerate(entries, start=1)]
    return cfg


def _ignore_entry(entry, index: int, where: str) -> IgnoreEntry:
    at = f"{where}: per-node-ignores[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{at} must be a table with rule, node and reason")
    unknown = sorted(set(entry) - IGNORE_KEYS)
    if unknown:
        raise ConfigError(f"{at}: unknown key {unknown[0]!r} (known: {', '.join(sorted(IGNORE_KEYS))})")
    rules = entry.get("rule")
    rules = [rules] if isinstance(rules, str) else rules
    if not rules or not all(isinstance(r, str) for r in rules):
        raise ConfigError(f"{at} needs rule = \"ID\" (or a list of IDs, names or prefixes)")
    if "node" not in entry and "model" not in entry:
        raise ConfigError(f"{at} needs node = \"regex\" (or model = \"glob\")")
    node = None
    if "node" in entry:
        if not isinstance(entry["node"], str):
            raise ConfigError(f"{at}: node must be a regex string")
        try:
            node = re.compile(entry["node"])
        except re.error as e:
            raise ConfigError(f"{at}: node {entry['node']!r} is not a valid regex: {e}") from None
    model = entry.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"{at}: model must be a glob string")
    reason = entry.get("reason", "")
    if not isinstance(reason, str):
        raise ConfigError(f"{at}: reason must be a string")
    return IgnoreEntry(index, list(rules), node, model, reason.strip())


def _str_list(table: dict, key: str, where: str) -> list[str]:
    value = table.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of rule IDs, names or prefixes")
    return split_selectors(value)  # "PV201,PV104" is two selectors, as on the command line


def _typed(table: dict, key: str, kind: type, where: str, default):
    if key not in table:
        return default
    value = table[key]
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: {key} must be a {kind.__name__}, got {type(value).__name__}")
    return value
