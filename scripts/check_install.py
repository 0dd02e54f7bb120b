"""Check that placeviz installs from its wheel and runs without TensorFlow; print the install's time and size.

The static core reads graph files with protobuf-level packages only (pyproject.toml: TensorFlow is
the ``tf`` extra). This script checks it as a user meets it: it builds the sdist and, from that
sdist, the wheel (``python -m build``: a file missing from the sdist breaks the wheel, and the C
kernels of setup.py compile there), creates a fresh virtualenv, installs the wheel with its declared
dependencies from the configured package index, checks that TensorFlow is absent there, and runs
``placeviz lint`` on the graph the wheel ships (``placeviz/data/misconfigured.pb``: the
``misconfigured`` sample, placed with ``--ps-tasks 2``), expecting its known findings.

Usage (from a checkout, with the dev extra installed, which brings ``build``)::

    .venv/bin/python scripts/check_install.py [--json FILE] [--keep DIR]

It prints the sizes of the sdist and the wheel, the time of the venv creation and of the install
(``pip install --no-cache-dir``: every dependency fetched from the index, as on a fresh machine;
wall time, and the CPU time of its processes, steadier on a shared machine), and the size of the
venv's ``site-packages`` (``du -sh``) with its largest entries. Exit 0 when every check holds, 1
when one fails (its output is shown), 2 on bad usage. ``tests/test_install.py`` runs it (slow).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The graph the wheel ships, and what `placeviz lint` finds in it (exit 1: errors among them): two
# PV104 (nodes colocated across jobs), PV106 and PV201 (output_bias created outside the setter).
SHIPPED_GRAPH = "data/misconfigured.pb"
EXPECTED_RULES = ("PV104", "PV106", "PV201")
EXPECTED_EXIT = 1
# placeviz.native.MODULES, as files: setup.py compiles them when a C compiler is at hand.
KERNEL_MODULES = ("_wire", "placement/_setter_kernels", "placement/_placer_kernels", "_partition_kernels")
STEP_TIMEOUT = 900


class CheckFailed(Exception):
    """A step failed or gave the wrong answer; the message says which, with the output's tail."""


CPU_SECONDS: dict[str, float] = {}
"""CPU time (user + system) of each step's processes: on a shared machine, steadier than wall time."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(step: str, cmd: list[str], *, cwd: Path, env: dict[str, str], ok=(0,)) -> tuple[subprocess.CompletedProcess, float]:
    start, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT)
    elapsed = time.perf_counter() - start
    CPU_SECONDS[step] = _children_cpu() - cpu
    if proc.returncode not in ok:
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise CheckFailed(f"{step}: `{' '.join(cmd)}` exited {proc.returncode}\n{tail}")
    return proc, elapsed


def clean_env() -> dict[str, str]:
    """The environment minus what would make the fresh venv see this checkout or the dev venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PLACEVIZ_NO_KERNELS")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def copy_sources(dest: Path) -> None:
    """The files a fresh clone has (tracked, plus new files git does not ignore): no build output,
    no in-place compiled kernels, no egg-info of the editable install."""
    proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                          capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise CheckFailed(f"listing the sources: git ls-files failed in {REPO}: {proc.stderr.decode()[-500:]}")
    for name in filter(None, proc.stdout.decode().split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def du(path: Path) -> str:
    """``du -sh PATH``'s size column (the number the README quotes)."""
    return subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True, check=True).stdout.split()[0]


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) if path.is_dir() \
        else path.stat().st_size


def largest_entries(site: Path, count: int = 8) -> list[tuple[str, int]]:
    sizes = [(p.name, tree_bytes(p)) for p in site.iterdir() if not p.name.endswith((".dist-info", ".pth"))]
    return sorted(sizes, key=lambda item: -item[1])[:count]


def check(work: Path) -> dict:
    env = clean_env()
    result: dict = {}
    src = work / "src"
    src.mkdir()
    copy_sources(src)

    # 1. sdist, then the wheel built from the unpacked sdist.
    _, result["build_seconds"] = run("build", [sys.executable, "-m", "build", "--outdir", str(work / "dist"), str(src)],
                                     cwd=work, env=env)
    wheels = sorted((work / "dist").glob("placeviz-*.whl"))
    sdists = sorted((work / "dist").glob("placeviz-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise CheckFailed(f"build: expected one wheel and one sdist in {work / 'dist'}, got {wheels + sdists}")
    wheel = wheels[0]
    result.update(wheel=wheel.name, wheel_bytes=wheel.stat().st_size, sdist_bytes=sdists[0].stat().st_size)
    with zipfile.ZipFile(wheel) as z:
        members = z.namelist()
    result["wheel_kernels"] = sorted(m for m in KERNEL_MODULES
                                     if any(n.startswith(f"placeviz/{m}.") and n.endswith((".so", ".pyd")) for n in members))
    if f"placeviz/{SHIPPED_GRAPH}" not in members:
        raise CheckFailed(f"build: the wheel does not hold placeviz/{SHIPPED_GRAPH}")

    # 2. A fresh virtualenv, the wheel and its declared dependencies from the index.
    venv = work / "venv"
    _, result["venv_seconds"] = run("venv", [sys.executable, "-m", "venv", str(venv)], cwd=work, env=env)
    python = venv / "bin" / "python"
    _, result["install_seconds"] = run("install", [str(python), "-m", "pip", "install", "--no-cache-dir", "--quiet",
                                                   str(wheel)], cwd=work, env=env)

    # 3. No TensorFlow there: neither a distribution nor an importable module.
    proc, _ = run("pip list", [str(python), "-m", "pip", "list", "--format", "json"], cwd=work, env=env)
    dists = {d["name"].lower(): d["version"] for d in json.loads(proc.stdout)}
    result["distributions"] = dists
    if [name for name in dists if name.startswith("tensorflow")]:
        raise CheckFailed(f"install: TensorFlow came with the wheel: {sorted(dists)}")
    proc, _ = run("import tensorflow", [str(python), "-c", "import tensorflow"], cwd=work, env=env, ok=(1,))
    if "ModuleNotFoundError" not in proc.stderr:
        raise CheckFailed(f"import tensorflow: failed otherwise than by absence:\n{proc.stderr[-2000:]}")

    # 4. The installed placeviz (not this checkout's) and its kernels.
    probe = ("import json, placeviz, placeviz.native as n; from importlib import resources\n"
             "print(json.dumps({'file': placeviz.__file__, 'missing_kernels': [m for m in n.MODULES if n.kernels(m) is None],"
             f" 'graph': str(resources.files('placeviz') / {SHIPPED_GRAPH!r})}}))")
    proc, _ = run("probe", [str(python), "-c", probe], cwd=work, env=env)
    facts = json.loads(proc.stdout)
    if not Path(facts["file"]).resolve().is_relative_to(venv.resolve()):
        raise CheckFailed(f"probe: placeviz was imported from {facts['file']}, not from the fresh venv")
    result["missing_kernels"] = facts["missing_kernels"]

    # 5. placeviz lint on the shipped graph: the known findings, exit 1, nothing on stderr but its summary.
    proc, result["lint_seconds"] = run("lint", [str(venv / "bin" / "placeviz"), "lint", facts["graph"], "--format", "json"],
                                       cwd=work, env=env, ok=(EXPECTED_EXIT,))
    doc = json.loads(proc.stdout)
    rules = sorted({f["rule"] for f in doc["findings"]})
    result["lint_rules"] = rules
    result["lint_exit"] = proc.returncode
    if rules != sorted(EXPECTED_RULES) or doc["errors"]:
        raise CheckFailed(f"lint: expected findings {sorted(EXPECTED_RULES)}, got {rules}; errors {doc['errors']}")

    site = next((venv / "lib").glob("python*/site-packages"))
    result["site_packages"] = du(site)
    result["site_packages_bytes"] = tree_bytes(site)
    result["largest"] = largest_entries(site)
    result["cpu_seconds"] = dict(CPU_SECONDS)
    return result


def report(result: dict) -> str:
    mib = 1024 * 1024
    cpu = result["cpu_seconds"]
    lines = [
        f"sdist {result['sdist_bytes'] / 1024:.0f} KiB, wheel {result['wheel']} {result['wheel_bytes'] / 1024:.0f} KiB "
        f"(built in {result['build_seconds']:.1f} s, {cpu['build']:.1f} s CPU; C kernels in the wheel: "
        f"{len(result['wheel_kernels'])} of {len(KERNEL_MODULES)})",
        f"fresh venv {result['venv_seconds']:.1f} s ({cpu['venv']:.1f} s CPU); pip install of the wheel and its "
        f"dependencies {result['install_seconds']:.1f} s ({cpu['install']:.1f} s CPU; "
        f"{len(result['distributions'])} distributions, no TensorFlow)",
        f"site-packages: {result['site_packages']} (du -sh), {result['site_packages_bytes'] / mib:.1f} MiB of files; largest: "
        + ", ".join(f"{name} {size / mib:.1f} MiB" for name, size in result["largest"]),
        f"placeviz lint {SHIPPED_GRAPH}: exit {result['lint_exit']}, rules {', '.join(result['lint_rules'])} "
        f"({result['lint_seconds']:.2f} s, kernels not loaded: {result['missing_kernels'] or 'none'})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the measurements to this JSON file")
    parser.add_argument("--keep", type=Path, help="work in this (new or empty) directory and keep it")
    args = parser.parse_args(argv)
    try:
        import build  # noqa: F401 - only to say clearly what is missing
    except ImportError:
        print("check_install: the `build` package is not installed (it is in the dev extra: pip install -e '.[dev]')",
              file=sys.stderr)
        return 2
    if args.keep and args.keep.exists() and any(args.keep.iterdir()):
        print(f"check_install: {args.keep}: not empty", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="placeviz-install-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = check(work.resolve())
    except CheckFailed as e:
        print(f"check_install: FAILED at {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
