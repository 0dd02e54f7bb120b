"""placeviz lint: CI checks for parameter-server graphs (rules live in the package ``placeviz.rules``)."""

from placeviz.lint.api import SEVERITIES, Finding, LintContext, Rule

__all__ = ["SEVERITIES", "Finding", "LintContext", "Rule"]
