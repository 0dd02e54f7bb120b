"""The SYNC options shared by commands that can run the SyncReplicas pass first (README, "Commands")."""

from __future__ import annotations

import functools

import click

from placeviz.errors import PlacevizError


def sync_options(func):
    """Add ``--sync-replicas --replicas-to-aggregate R --total-replicas W --variable-averages
    --sync-name NAME``.

    They arrive as one ``sync`` argument: a :class:`placeviz.pipeline.SyncOptions`, or None when
    ``--sync-replicas`` was not given.
    """
    options = [
        click.option("--sync-replicas", is_flag=True,
                     help="Rewrite the plain training graph into SyncReplicasOptimizer's form first."),
        click.option("--replicas-to-aggregate", type=click.IntRange(min=1), default=None,
                     help="With --sync-replicas: gradients averaged per step (R)."),
        click.option("--total-replicas", type=click.IntRange(min=1), default=None,
                     help="With --sync-replicas: workers (W, default R; W > R means backup workers)."),
        click.option("--variable-averages", is_flag=True,
                     help="With --sync-replicas: run the graph's moving-average update after the token enqueue."),
        click.option("--sync-name", default=None, metavar="NAME",
                     help="With --sync-replicas: SyncReplicasOptimizer(name=NAME) (default sync_replicas)."),
    ]
    for option in reversed(options):
        func = option(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        wanted = kwargs.pop("sync_replicas")
        r = kwargs.pop("replicas_to_aggregate")
        w = kwargs.pop("total_replicas")
        averages = kwargs.pop("variable_averages")
        name = kwargs.pop("sync_name")
        kwargs["sync"] = build_sync_options(wanted, r, w, averages, name)
        return func(*args, **kwargs)

    return wrapper


def build_sync_options(wanted: bool, r: int | None, w: int | None, averages: bool, name: str | None = None):
    from placeviz.pipeline import SyncOptions

    if not wanted:
        if r is not None or w is not None or averages or name is not None:
            raise PlacevizError("--replicas-to-aggregate/--total-replicas/--variable-averages/--sync-name "
                                "need --sync-replicas")
        return None
    if r is None:
        r = w
    if r is None:
        raise PlacevizError("--sync-replicas needs --replicas-to-aggregate R (or --total-replicas W)")
    return SyncOptions(replicas_to_aggregate=r, total_replicas=w, variable_averages=averages,
                       name=name or "sync_replicas")
