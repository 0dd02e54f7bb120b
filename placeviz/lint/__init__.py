"""placeviz lint: CI checks for parameter-server graphs (rules live in the top-level ``rules/``)."""

from placeviz.lint.api import SEVERITIES, Finding, LintContext, Rule

__all__ = ["SEVERITIES", "Finding", "LintContext", "Rule"]
