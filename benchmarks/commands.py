"""Whole placeviz commands timed as users run them (``benchmarks/run.py --commands``).

Each command runs as its own process (``python -m placeviz ...``, the interpreter start and the
imports included), once per repetition; ``os.wait4`` gives that process's user + system CPU and
peak RSS, ``time.perf_counter`` its wall time. Next to them, in the same run, the protobuf parse
floor of the same file (``GraphDef.ParseFromString`` of its bytes, CPU, median of the
repetitions, in a process of its own) and each command's ratio to it (wall / floor), the ratio the
targets of issue 18 are stated in. ``render`` runs Graphviz's ``dot`` as a child of the command:
its CPU is in the command's (``RUSAGE_CHILDREN`` of the command is summed by the kernel into what
``wait4`` returns), so the render row is "command + dot".

Never imports TensorFlow; never used by tests.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PS_TASKS = 4
SMALL_NODES = 100
MIN_FLOOR_S = 0.001  # below this, a ratio to the parse floor measures timer noise

_PARSE_FLOOR = r"""
import sys, time, json
from placeviz.protos import GraphDef
data = open(sys.argv[1], "rb").read()
times = []
for _ in range(int(sys.argv[2])):
    g = GraphDef()
    t = time.process_time()
    g.ParseFromString(data)
    times.append(time.process_time() - t)
    del g
print(json.dumps(times))
"""


def commands_for(path: Path, unplaced: Path, out_dir: Path) -> dict[str, list[str]]:
    """The command lines timed for one graph: what issue 18's table lists.

    ``partition`` and ``analyze`` place the unplaced sibling with ``--ps-tasks 4`` (the setter's
    replay, then the placer), as the issue measured; ``lint`` and ``render`` read the graph as TF
    placed it.
    """
    return {
        "partition -o DIR": ["partition", str(unplaced), "--ps-tasks", str(PS_TASKS), "-o", str(out_dir / "parts")],
        "lint": ["lint", str(path), "-o", str(out_dir / "lint.txt")],
        "analyze --format json": ["analyze", str(unplaced), "--ps-tasks", str(PS_TASKS), "--format", "json",
                                  "-o", str(out_dir / "analyze.json")],
        "render --view devices -o x.svg": ["render", str(path), "--view", "devices",
                                           "-o", str(out_dir / "x.svg")],
    }


def small_graph(source: Path, out: Path, nodes: int = SMALL_NODES) -> Path:
    """The first ``nodes`` nodes of a generated graph as a GraphDef of its own: TF writes every
    input before its consumer, so the prefix is a whole graph (inputs or ``loc:@`` names that
    leave it are dropped, which TF's order makes rare)."""
    sys.path.insert(0, str(REPO))
    from placeviz.protos import GraphDef

    full = GraphDef.FromString(source.read_bytes())
    small = GraphDef()
    small.versions.CopyFrom(full.versions)
    small.node.extend(full.node[:nodes])
    kept = {n.name for n in small.node}
    for node in small.node:
        inputs = [i for i in node.input if i.lstrip("^").split(":")[0] in kept]
        del node.input[:]
        node.input.extend(inputs)
        if "_class" in node.attr:
            groups = [g for g in node.attr["_class"].list.s if g[5:].decode() in kept]
            del node.attr["_class"].list.s[:]
            node.attr["_class"].list.s.extend(groups)
    out.write_bytes(small.SerializeToString(deterministic=True))
    return out


def time_process(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> dict:
    """Run ``argv`` to completion (in ``cwd``): wall s, CPU s (user + system, its children
    included), peak RSS MiB, exit code."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    proc.stderr.close()
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024,
            "exit": proc.returncode, "stderr": err[-500:]}


def parse_floor(path: Path, reps: int, env: dict[str, str]) -> list[float]:
    out = subprocess.run([sys.executable, "-c", _PARSE_FLOOR, str(path), str(reps)], env=env,
                         capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.strip().strip("[]").split(",")]


def run_commands(paths: list[Path], reps: int | None, default_reps, graph_facts, unplaced_of,
                 only: set[str] | None = None) -> list[dict]:
    """Time every command of :func:`commands_for` on each graph, alternating the commands inside
    each repetition (so load changes hit all alike), plus the cold ``lint`` of a small graph.
    ``only``: the commands to time, by the first word of their name (None: all)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    placeviz = [sys.executable, "-m", "placeviz"]
    # The bytecode an installed placeviz has (pip compiles it): without it, with
    # PYTHONDONTWRITEBYTECODE set as on this host, every run compiled placeviz's sources again
    # (0.15-0.35 s of the cold lint's 0.7-1 s). compileall writes it whatever that variable says.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "placeviz")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    results = []
    with tempfile.TemporaryDirectory(prefix="placeviz-bench-") as tmp:
        tmp_dir = Path(tmp)
        # Cut in a process of its own: a forked child's peak RSS counts what the parent held at the
        # fork, so the driver never parses a big graph itself.
        small = tmp_dir / f"g{SMALL_NODES}.pb"
        subprocess.run([sys.executable, __file__, "--small", str(paths[0]), str(small)], env=env, check=True)
        for path in [small, *paths]:
            facts = graph_facts(path) if path != small else {"nodes": SMALL_NODES}
            nodes = facts.get("nodes") or path.stat().st_size // 225
            n_reps = reps or max(3, min(default_reps(nodes), 5))
            unplaced = unplaced_of(path) if path != small else small
            cmds = {"lint (cold, small graph)": ["lint", str(small)]} if path == small else \
                commands_for(path, unplaced, tmp_dir)
            cmds = {name: args for name, args in cmds.items() if only is None or name.split()[0] in only}
            if not cmds:
                continue
            print(f"{path.name}: {nodes:,} nodes, {n_reps} reps of {len(cmds)} commands ...", file=sys.stderr,
                  flush=True)
            floor = parse_floor(path, max(n_reps, 5), env)
            samples: dict[str, list[dict]] = {name: [] for name in cmds}
            for _ in range(n_reps):
                for name, args in cmds.items():
                    shutil.rmtree(tmp_dir / "parts", ignore_errors=True)
                    rec = time_process(placeviz + args, env)
                    if rec["exit"] not in (0, 1):  # lint exits 1 when it finds something
                        raise SystemExit(f"{path.name}: placeviz {' '.join(args)} failed (exit {rec['exit']}): "
                                         f"{rec['stderr']}")
                    samples[name].append(rec)
            floor_s = statistics.median(floor)
            rows = {}
            for name, recs in samples.items():
                wall = statistics.median(r["wall"] for r in recs)
                rows[name] = {"wall_s": round(wall, 3), "cpu_s": round(statistics.median(r["cpu"] for r in recs), 3),
                              "peak_rss_mib": round(max(r["rss_mib"] for r in recs)),
                              "ratio_to_floor": round(wall / floor_s, 1), "samples": recs}
            results.append({"name": path.name.removesuffix(".pb"), "nodes": nodes, "reps": n_reps,
                            "parse_floor_s": round(floor_s, 4), "parse_floor_samples": floor, "commands": rows})
    return results


def table(results: list[dict]) -> str:
    """The commands table: wall and CPU medians, and both as a multiple of the parse floor (on a
    loaded machine wall time waits for the CPU; the CPU ratio is then the steadier one)."""
    lines = ["| graph | command, whole process | wall s | CPU s | peak RSS MiB | parse floor s | wall / floor | CPU / floor |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        floor = res["parse_floor_s"]
        for name, row in res["commands"].items():
            cpu_ratio, wall_ratio = _ratio(row["cpu_s"], floor), _ratio(row["wall_s"], floor)
            lines.append(f"| {res['name']} | `{name}` | {row['wall_s']:.2f} | {row['cpu_s']:.2f} | "
                         f"{row['peak_rss_mib']:,} | {floor:.3f} | {wall_ratio} | {cpu_ratio} |")
    return "\n".join(lines)


AB_COMMANDS = {
    "partition": ["partition", "{graph}", "--ps-tasks", str(PS_TASKS), "-o", "{out}/parts"],
    "lint": ["lint", "{graph}", "-o", "{out}/lint.txt"],
    "analyze": ["analyze", "{graph}", "--ps-tasks", str(PS_TASKS), "--format", "json", "-o", "{out}/analyze.json"],
    "render": ["render", "{graph}", "--view", "devices", "-o", "{out}/x.svg"],
}
"""The commands ``--ab`` names (``lint`` of a small graph is the cold start), as placeviz arguments:
``{graph}`` stands for GRAPH, ``{out}`` for a scratch directory made empty before every run."""


def ab_command(trees: list[Path], graph: Path, reps: int, args: list[str] | None = None) -> str:
    """Before/after of one command in two source trees (each with its C kernels built): ``args``
    is a name of :data:`AB_COMMANDS` or placeviz arguments in the same form (default:
    ``partition``). The trees alternate inside each repetition so that load changes hit both
    alike; the parse floor of the same file is measured before and after the runs (the floor's
    median over both). Returns a table of medians (wall, CPU) and peak RSS per tree."""
    args = args or ["partition"]
    if len(args) == 1 and args[0] in AB_COMMANDS:
        args = AB_COMMANDS[args[0]]
    ok_exits = (0, 1) if args[0] == "lint" else (0,)  # lint exits 1 when it finds something
    samples: dict[Path, list[dict]] = {tree: [] for tree in trees}
    graph = graph.resolve()
    floors = parse_floor(graph, 5, dict(os.environ, PYTHONPATH=str(trees[-1])))
    with tempfile.TemporaryDirectory(prefix="placeviz-ab-") as tmp:
        for _ in range(reps):
            for tree in trees:
                out = Path(tmp) / "scratch"
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                env = dict(os.environ, PYTHONPATH=str(tree))
                # run from the tree: ``python -m`` puts the working directory first on sys.path
                rec = time_process([sys.executable, "-m", "placeviz",
                                    *(a.format(graph=graph, out=out) for a in args)], env, cwd=tree)
                if rec["exit"] not in ok_exits:
                    raise SystemExit(f"{tree}: {args[0]} failed (exit {rec['exit']}): {rec['stderr']}")
                samples[tree].append(rec)
    floors += parse_floor(graph, 5, dict(os.environ, PYTHONPATH=str(trees[-1])))
    floor = statistics.median(floors)
    lines = [f"`placeviz {' '.join(args)}` of {graph.name}: parse floor {floor:.3f} s CPU (median of {len(floors)}: {min(floors):.3f}-{max(floors):.3f}), "
             f"{reps} alternating repetitions",
             "| tree | wall s (each) | CPU s (each) | peak RSS MiB | wall / floor | CPU / floor |",
             "|---|---|---|---:|---:|---:|"]
    for tree, recs in samples.items():
        wall = statistics.median(r["wall"] for r in recs)
        cpu = statistics.median(r["cpu"] for r in recs)
        each_wall = " / ".join(f"{r['wall']:.2f}" for r in recs)
        each_cpu = " / ".join(f"{r['cpu']:.2f}" for r in recs)
        lines.append(f"| {tree} | {wall:.2f} ({each_wall}) | {cpu:.2f} ({each_cpu}) | "
                     f"{max(r['rss_mib'] for r in recs):,.0f} | {_ratio(wall, floor)} | {_ratio(cpu, floor)} |")
    return "\n".join(lines)


def _ratio(seconds: float, floor: float) -> str:
    """``seconds`` as a multiple of the parse floor; none for a floor under a millisecond (the
    100-node cold-start graph), where the ratio measures timer noise: that target is wall seconds."""
    return f"{seconds / floor:.1f}x" if floor >= MIN_FLOOR_S else "-"


if __name__ == "__main__":  # re-print the table of saved results: python benchmarks/commands.py FILE...
    import json

    if sys.argv[1:2] == ["--small"]:
        small_graph(Path(sys.argv[2]), Path(sys.argv[3]))
        sys.exit(0)
    if sys.argv[1:2] == ["--ab"]:
        # python benchmarks/commands.py --ab TREE_BEFORE TREE_AFTER GRAPH [REPS [COMMAND | PLACEVIZ ARGS...]]
        # (COMMAND: partition, lint or render; ARGS: {graph} is GRAPH, {out} a scratch directory)
        print(ab_command([Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve()], Path(sys.argv[4]),
                         int(sys.argv[5]) if len(sys.argv) > 5 else 3, sys.argv[6:] or None))
        sys.exit(0)
    for file in sys.argv[1:]:
        print(file)
        print(table(json.loads(Path(file).read_text())["results"]))
