"""PV901 unused-suppression: a per-node-ignores entry that suppressed nothing."""

from __future__ import annotations

from placeviz.lint import Rule

RULE = Rule(
    id="PV901",
    name="unused-suppression",
    severity="warning",
    summary="A per-node-ignores entry of the lint config matched no finding of a rule that ran.",
    doc="""\
## What it does
After every model is linted, reports each `per-node-ignores` entry that suppressed no finding
although a rule it names ran on a model it covers; and each entry that can never apply because
every rule it names is not ignorable per node (PV201, PV301, ...). The finding points at the config
file.

## Why it matters
A suppression outlives the problem it was written for: the node is renamed, the graph is fixed.
Left in place, it silently swallows the next real problem at a node matching its regex. Like ruff's
`RUF100` (unused `noqa`), this keeps the list of exceptions honest.

## How it is detected
By the engine, not by looking at a graph: each entry is marked *applicable* when one of its rules
ran on a model its `model` glob covers, and *used* when it suppressed a finding. Applicable and
unused entries are reported. An entry whose rules were deselected or skipped is not judged.

## Example
```toml
[[tool.placeviz.lint.per-node-ignores]]
rule = "PV208"
node = "^input_pipeline/"     # the pipeline moved to the workers long ago
reason = "decode on PS by design"
```

## Fix
Delete the entry, or narrow/repair its `node` regex.

## References
- ruff `RUF100` (unused-noqa); pylint `useless-suppression`
""",
    references=("ruff RUF100",),
)


def check(ctx):
    """Produced by the engine from the config (see placeviz.lint.suppression): nothing per model."""
    return ()
