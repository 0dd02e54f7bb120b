"""``python -m placeviz`` runs the command-line interface (:func:`placeviz.cli.run`)."""

from placeviz.cli import run

run()
