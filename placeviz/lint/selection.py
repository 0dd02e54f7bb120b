"""Which rules run: ``select``/``extend-select``/``ignore`` selectors, as ruff reads them.

A selector is ``ALL``, a rule ID (``PV301``), a rule name (``sync-token-queue-shared``) or an ID
prefix (``PV3``, ``PV30``). The command line's ``--select`` replaces the config's ``select``;
``--extend-select`` and ``--ignore`` add to the config's. Then:

    selected = match(select + extend-select) - match(ignore)

Each value may be a comma-separated list (``--select PV201,PV104``, as ruff takes it):
:func:`split_selectors` flattens them before anything else looks at them.

Preview rules are selected only by their exact ID or name, or when ``preview`` is on: a new rule
does not start failing CI because someone wrote ``select = ["ALL"]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from placeviz.lint.discovery import LoadedRule


def split_selectors(values: Iterable[str]) -> list[str]:
    """``["PV201,PV104", "PV3"]`` -> ``["PV201", "PV104", "PV3"]``: a comma list is several selectors
    (no rule ID or kebab-case name holds a comma); blanks around and between commas are dropped."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def matches(selector: str, rule) -> bool:
    """Whether ``selector`` names ``rule`` (a :class:`Rule` or :class:`LoadedRule`)."""
    rule = getattr(rule, "rule", rule)
    return selector_matches(selector, rule.id, rule.name)


def selector_matches(selector: str, rule_id: str, rule_name: str) -> bool:
    s = selector.strip()
    upper = s.upper()
    return upper == "ALL" or s == rule_name or (len(upper) >= 2 and rule_id.startswith(upper))


def is_exact(selector: str, rule) -> bool:
    rule = getattr(rule, "rule", rule)
    return selector.strip().upper() == rule.id or selector.strip() == rule.name


def unknown_selectors(selectors: Iterable[str], rules: list[LoadedRule]) -> list[str]:
    """Selectors that name no rule (kept in order, without repeats)."""
    out = []
    for s in selectors:
        if s not in out and not any(matches(s, r) for r in rules):
            out.append(s)
    return out


def select_rules(rules: list[LoadedRule], select: list[str], extend_select: Sequence[str] = (),
                 ignore: Sequence[str] = (), preview: bool = False) -> list[LoadedRule]:
    """The rules that run, in ID order."""
    wanted = [*select, *extend_select]
    chosen = []
    for r in rules:
        hits = [s for s in wanted if matches(s, r)]
        if not hits:
            continue
        if r.rule.preview and not preview and not any(is_exact(s, r) for s in hits):
            continue
        if any(matches(s, r) for s in ignore):
            continue
        chosen.append(r)
    return chosen
