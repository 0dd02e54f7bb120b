"""The PLACE options shared by every command that places a graph (README, "Commands").

Counts and device strings are bounded here, before anything is allocated for them
(:mod:`placeviz.limits`): ``--ps-tasks`` at most 10,000, ``--cpus-per-task`` and
``--gpus-per-worker`` at most 1,024 (click names the range), task and device indices in
``--worker-device``/``--ps-device``/``--master`` and the size of a ``--cluster`` file likewise.
"""

from __future__ import annotations

import functools

import click

from placeviz.errors import PlacevizError
from placeviz.limits import MAX_DEVICES_PER_TASK, MAX_TASKS_PER_JOB, device_bound_problem

PLACE_HELP = "Placement"


def place_options(func):
    """Add the PLACE options to a click command; they arrive as one ``place`` dict argument."""
    options = [
        click.option("--ps-tasks", type=click.IntRange(min=0, max=MAX_TASKS_PER_JOB), default=None,
                     help="Place an unplaced graph with replica_device_setter(ps_tasks=N)."),
        click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False),
                     help='Cluster JSON ({"ps": [...], "worker": [...]}) or a TF_CONFIG document.'),
        click.option("--worker-device", default="/job:worker", show_default=True,
                     help="replica_device_setter's worker_device (TF's default). Programs that pass "
                          "'/job:worker/task:%d' % task_index: give it as written; MODEL is task 0's graph, "
                          "each --worker-graph I gets task I."),
        click.option("--ps-device", default="/job:ps", show_default=True, help="replica_device_setter's ps_device."),
        click.option("--strategy", type=click.Choice(["round-robin", "greedy"]), default="round-robin",
                     show_default=True, help="PS strategy (greedy: TF1 contrib byte-size load balancing)."),
        click.option("--ps-ops", help="Comma-separated op types the setter puts on PS (default: TF's list)."),
        click.option("--no-merge-devices", is_flag=True, help="replica_device_setter(merge_devices=False)."),
        click.option("--cpus-per-task", type=click.IntRange(min=1, max=MAX_DEVICES_PER_TASK), default=1,
                     show_default=True),
        click.option("--gpus-per-worker", type=click.IntRange(min=0, max=MAX_DEVICES_PER_TASK), default=0,
                     show_default=True),
        click.option("--replace-devices", is_flag=True,
                     help="Re-run the setter on a placed graph (its jobs and tasks are dropped first)."),
        click.option("--master", default="/job:worker/task:0", show_default=True,
                     help="The task the session runs in (its devices come first in TF's order)."),
        click.option("--soft-placement", is_flag=True, help="ConfigProto(allow_soft_placement=True)."),
        click.option("--setter-scope-end", metavar="NODE",
                     help="The first node the program built after its `with tf.device(replica_device_setter(...))` "
                          "block (e.g. its Saver or MonitoredTrainingSession's report_uninitialized_variables): "
                          "from it on, nodes keep their own devices, as in TF. Default: the whole graph was inside."),
        click.option("--plain-noop", "plain_noops", metavar="NAME", multiple=True,
                     help="A control-only NoOp the program built with tf.no_op under control_dependencies, not "
                          "tf.group (only a group splits per device under the setter); repeatable."),
        click.option("--global-default-graph", is_flag=True,
                     help="The model was built in TF's implicit default graph, not under Graph.as_default() "
                          "(changes which colocated variables move the round-robin counter)."),
    ]
    for option in reversed(options):
        func = option(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        keys = ["ps_tasks", "cluster_file", "worker_device", "ps_device", "strategy", "ps_ops",
                "no_merge_devices", "cpus_per_task", "gpus_per_worker", "replace_devices", "master",
                "soft_placement", "global_default_graph", "setter_scope_end", "plain_noops"]
        kwargs["place"] = {k: kwargs.pop(k) for k in keys}
        # None: not given; 0 given explicitly is worth a note (see build_placement_options).
        kwargs["place"]["ps_tasks_zero"] = kwargs["place"]["ps_tasks"] == 0
        kwargs["place"]["ps_tasks"] = kwargs["place"]["ps_tasks"] or 0
        return func(*args, **kwargs)

    return wrapper


# tensorflow/python/training/device_setter.py, replica_device_setter: "if ps_tasks == 0: return None".
PS_TASKS_ZERO_NOTE = ("--ps-tasks 0: replica_device_setter(ps_tasks=0) returns None, so the setter places "
                      "nothing; give --ps-tasks N with N >= 1 (or --cluster FILE) to place the graph on N ps tasks")


def build_placement_options(place: dict):
    """Turn the parsed PLACE options into :class:`placeviz.placement.PlacementOptions`."""
    from placeviz.devices import ClusterSpec, check_cluster_bounds
    from placeviz.placement import PlacementOptions
    from placeviz.placement.placer import PlacerConfig
    from placeviz.placement.setter import SetterConfig

    # Bounds first (placeviz.limits): a task index or device count here sizes the device set.
    for option in ("worker_device", "ps_device", "master"):
        problem = device_bound_problem(place[option] or "")
        if problem is not None:
            raise PlacevizError(f"--{option.replace('_', '-')} {place[option]!r}: {problem}")
    from placeviz.io import note_input

    if place["cluster_file"]:
        note_input(place["cluster_file"], "--cluster")  # -o may not overwrite it
    cluster = None
    if place["cluster_file"]:
        cluster, _task = ClusterSpec.from_json_file(place["cluster_file"])
        if place["ps_tasks"]:
            raise PlacevizError("give --ps-tasks or --cluster, not both (TF ignores ps_tasks when a cluster is given)")
        check_cluster_bounds(cluster, place["cpus_per_task"], place["gpus_per_worker"])
    ps_ops = frozenset(x.strip() for x in place["ps_ops"].split(",") if x.strip()) if place["ps_ops"] else None
    placer = PlacerConfig(allow_soft_placement=place["soft_placement"], master_task=place["master"])
    master = placer.master  # the one reading of --master (PlacerConfig.master)
    if master is None or master.job is None or master.task is None:
        raise PlacevizError(f"--master must name a job and a task, like /job:worker/task:0; got {place['master']!r}")
    setter = SetterConfig(
        ps_tasks=place["ps_tasks"] or 0, ps_device=place["ps_device"], worker_device=place["worker_device"],
        merge_devices=not place["no_merge_devices"], cluster=cluster, ps_ops=ps_ops,
        strategy=place["strategy"], graph_as_default=not place["global_default_graph"],
        scope_end=place.get("setter_scope_end"), plain_noops=frozenset(place.get("plain_noops") or ()),
    )
    return PlacementOptions(
        setter=setter, cluster=cluster, cpus_per_task=place["cpus_per_task"],
        gpus_per_worker=place["gpus_per_worker"],
        placer=placer,
        replace_devices=place["replace_devices"],
        notes=(PS_TASKS_ZERO_NOTE,) if place.get("ps_tasks_zero") and cluster is None else (),
    )
