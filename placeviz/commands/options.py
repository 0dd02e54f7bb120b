"""One :class:`placeviz.pipeline.Options` per command, made here from its command-line values.

Every command that runs the pipeline (``analyze``, ``place``, ``partition``, ``render``, ``lint``,
``verify``, ``compare-modes``) calls :func:`build_options` once, with what its click options
gave: the PLACE options as :func:`placeviz.commands.place_options.place_options` collects them,
the SYNC options as :func:`placeviz.commands.sync_options.sync_options` parsed them, the step it
partitions and the stages it needs. The result is handed through unchanged (to
:func:`placeviz.pipeline.run_pipeline`, to the per-task pipelines as :meth:`Options.for_task`, to
lint's rules), so each option is parsed, bounded and checked in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from placeviz.commands.place_options import build_placement_options

if TYPE_CHECKING:  # the pipeline is imported when a command runs it, not when the CLI starts
    from placeviz.pipeline import Options, SyncOptions


def build_options(place: dict, sync: SyncOptions | None = None, *, tag: str | None = None,
                  default_cluster: str | None = None, fetches=(), targets=(), feeds=(), level: str = "task",
                  replicate_constants: bool = True, batch_size: int | None = None,
                  train_op_by_default: bool = True, place_always: bool = False, partition: bool = True,
                  describe: bool = True, setter_only: bool = False, summaries: bool = True) -> Options:
    """The command's :class:`~placeviz.pipeline.Options`.

    ``place``: the PLACE options' dict. ``default_cluster``: the cluster file to place on when
    neither ``--cluster`` nor ``--ps-tasks`` was given (lint's config ``cluster = "..."``,
    verify's ``--servers FILE``). ``fetches``/``targets``/``feeds``/``level``/
    ``replicate_constants``/``batch_size``/``train_op_by_default``: the step to partition
    (:class:`~placeviz.pipeline.StepOptions`). The rest are the stage switches. Raises
    :class:`~placeviz.errors.PlacevizError` (one line) for a bad option value.
    """
    from placeviz.pipeline import Options, StepOptions

    if default_cluster and not place["cluster_file"] and not place["ps_tasks"]:
        place = {**place, "cluster_file": default_cluster}
    step = StepOptions(tuple(fetches), tuple(targets), tuple(feeds), level=level,
                       replicate_constants=replicate_constants, batch_size=batch_size,
                       train_op_by_default=train_op_by_default)
    return Options(placement=build_placement_options(place), sync=sync, step=step, tag=tag,
                   place_always=place_always, partition=partition, describe=describe, setter_only=setter_only,
                   summaries=summaries)
