"""PV902 suppression-without-reason: a per-node-ignores entry lacks its mandatory reason."""

from __future__ import annotations

from placeviz.lint import Rule

RULE = Rule(
    id="PV902",
    name="suppression-without-reason",
    severity="warning",
    summary="A per-node-ignores entry of the lint config has no reason, so it suppresses nothing.",
    doc="""\
## What it does
Reports every `per-node-ignores` entry without a non-empty `reason`. Such an entry is inert: the
findings it would cover are still reported, next to this one.

## Why it matters
A suppression is a decision that a finding is acceptable *here*; without the why, nobody can later
tell whether it still holds (the PS got more cores, the pipeline moved). Making the reason
mandatory (as hadolint's DL1001 and tflint's annotation guidance do for inline ignores) costs one
line and keeps reviews meaningful.

## How it is detected
By the engine, from the config file: `reason` missing or blank.

## Example
```toml
[[tool.placeviz.lint.per-node-ignores]]
rule = "PV208"
node = "^input_pipeline/"
```

## Fix
Add `reason = "..."` saying why the finding is acceptable at these nodes.

## References
- hadolint DL1001; tflint annotations (`# tflint-ignore: rule # reason`)
""",
    references=("hadolint DL1001",),
)


def check(ctx):
    """Produced by the engine from the config (see placeviz.lint.suppression): nothing per model."""
    return ()
