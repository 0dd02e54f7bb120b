"""PV903 unknown-rule-in-config: the lint config names a rule that does not exist."""

from __future__ import annotations

from placeviz.lint import Rule

RULE = Rule(
    id="PV903",
    name="unknown-rule-in-config",
    severity="error",
    summary="The lint config selects, ignores, overrides or suppresses a rule ID or name that matches no rule.",
    doc="""\
## What it does
Checks every selector in the config file (`select`, `extend-select`, `ignore`, the keys of
`severity`, the `rule` of each `per-node-ignores` entry) against the known rules: an ID (`PV301`),
a name (`sync-token-queue-shared`), an ID prefix (`PV3`) or `ALL`. Each selector that matches
nothing is reported, at the config file.

## Why it matters
A typo in a config silently changes what CI checks: `ignore = ["PV2O4"]` ignores nothing, while
`select = ["PV3O1"]` selects nothing and the run is green forever. An unknown ID must be loud.
(On the command line an unknown selector is a usage error, exit 2: you are there to fix it.)

## How it is detected
By the engine, when it reads the config, against the rules it discovered (built-in and `--rules`).

## Example
```toml
[tool.placeviz.lint]
ignore = ["PV2O4"]    # letter O, not zero
```

## Fix
Correct the ID (`placeviz rules` lists them), or remove the entry of a retired rule.

## References
- ruff rejects unknown rule codes in its settings; tflint `rule "x"` blocks are validated
""",
    references=("ruff configuration: unknown rule selectors",),
)


def check(ctx):
    """Produced by the engine from the config (see placeviz.commands.lint): nothing per model."""
    return ()
