"""placeviz's built-in lint rules: one module per rule (see README.md and ``placeviz rules``).

A package (not a loose folder) so that the rules ship in the wheel and are found by import,
wherever placeviz is installed.
"""
