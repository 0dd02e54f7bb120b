"""Per-node ignores from the config, and the meta findings that keep them honest (PV901, PV902).

A GraphDef has no comments, so there is no ``# noqa``: suppressions live in the config, keyed by
rule and a regex on the node name (plus an optional glob on the model path), each with a
mandatory reason. An entry without a reason suppresses nothing and is itself reported (PV902),
so the finding it meant to hide stays visible until someone writes down why. An entry that
matched no finding of a rule that actually ran is reported as unused (PV901, ruff's RUF100):
stale suppressions would silently swallow the next real problem at that node.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from placeviz.lint.api import Finding
from placeviz.lint.config import IgnoreEntry
from placeviz.lint.selection import selector_matches


class Suppressor:
    """Applies ``per-node-ignores`` to findings and remembers which entries were used."""

    def __init__(self, entries: list[IgnoreEntry], rules: dict):
        """``rules``: ID -> :class:`LoadedRule` of every known rule (to honour ``ignorable``)."""
        self.entries = entries
        self.rules = rules
        self.used: set[int] = set()
        self.applicable: set[int] = set()  # entries whose rule ran on a model they cover
        self.suppressed = 0

    def _covers(self, entry: IgnoreEntry, rule_id: str, rule_name: str, model: str) -> bool:
        return (any(selector_matches(s, rule_id, rule_name) for s in entry.rules)
                and (entry.model is None or fnmatchcase(model, entry.model)))

    def note_ran(self, rule_id: str, rule_name: str, model: str) -> None:
        """Record that a rule ran on a model: its entries can now be judged used or unused."""
        rule = self.rules.get(rule_id)
        if rule is not None and not rule.rule.ignorable:
            return
        for e in self.entries:
            if e.reason and self._covers(e, rule_id, rule_name, model):
                self.applicable.add(e.index)

    def filter(self, findings: list[Finding]) -> list[Finding]:
        """The findings no entry suppresses."""
        if not self.entries:
            return findings
        kept = []
        for f in findings:
            entry = self._match(f)
            if entry is None:
                kept.append(f)
            else:
                self.used.add(entry.index)
                self.suppressed += 1
        return kept

    def _match(self, f: Finding) -> IgnoreEntry | None:
        rule = self.rules.get(f.rule)
        if rule is not None and not rule.rule.ignorable:
            return None
        for e in self.entries:
            if not e.reason or not self._covers(e, f.rule, f.name, f.model):
                continue
            if e.node is None or (f.node is not None and e.node.search(f.node)):
                return e
        return None

    def meta_findings(self, config_path: str, unused_rule, no_reason_rule) -> list[Finding]:
        """PV902 for entries without a reason, PV901 for entries that suppressed nothing.

        ``unused_rule``/``no_reason_rule``: the :class:`Rule` of PV901/PV902, or None when not selected.
        """
        out = []
        for e in self.entries:
            if not e.reason:
                if no_reason_rule is not None:
                    out.append(_meta(no_reason_rule, config_path,
                                     f"{e.describe()} has no reason, so it suppresses nothing: add "
                                     f"reason = \"why this is fine here\""))
            elif unused_rule is not None and e.index in self.applicable and e.index not in self.used:
                out.append(_meta(unused_rule, config_path,
                                 f"{e.describe()} matched no finding: remove it (its rule ran and found "
                                 f"nothing there)"))
            elif unused_rule is not None and e.index not in self.applicable and self._not_ignorable(e):
                out.append(_meta(unused_rule, config_path,
                                 f"{e.describe()} can never apply: {', '.join(self._not_ignorable(e))} "
                                 f"cannot be silenced per node (deselect it with ignore = [...] instead)"))
        return out

    def _not_ignorable(self, e: IgnoreEntry) -> list[str]:
        hit = [r for r in self.rules.values() if any(selector_matches(s, r.id, r.name) for s in e.rules)]
        if hit and all(not r.rule.ignorable for r in hit):
            return [r.id for r in hit]
        return []


def _meta(rule, config_path: str, message: str, node: str | None = None) -> Finding:
    return Finding(rule=rule.id, name=rule.name, severity=rule.severity, model=config_path, node=node,
                   device=None, message=message)
