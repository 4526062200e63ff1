"""The Ray executor against the local one on one machine: wall time, stage times and the memory of
the whole process tree (the driver, and for Ray its raylet, GCS and worker processes).

Writes ``bench_build.py``'s synthetic pool of N QA items (its replayed answers), then builds it
with ``orandcar build --engine replay --executor X`` for each executor asked, each in a child
process and a fresh work dir, and prints per run: wall seconds, the report's stage timings, the
peak of the summed RSS of the child and all its descendants and that of the child alone (the
driver; sampled every 0.2 s from /proc), the CPU seconds of the whole tree (user + system: every
process seen below the child, at its last sample, or what ``wait4`` reports for the child and the
descendants it reaped, whichever is more), and whether the Ray folder's shards are byte-identical
to the local one's. ``--repeat N`` alternates the executors N times (local, ray, local, ray, ...),
so each Ray run has a local run of the same minutes as its yardstick on a shared machine.
``--two-nodes`` adds a run on a two-node Ray cluster simulated on this machine
(``ray.cluster_utils.Cluster``: a head and a second raylet, one CPU each, started by this script):
the build joins it by address with two replicas, one on each node, so the blocks of the second
node's actor travel between the two object stores as they would between machines; its CPU and
memory count the cluster's processes too.

    .venv/bin/python benchmarks/bench_ray.py --items 20000 --repeat 6 --json bench_ray.json
    .venv/bin/python benchmarks/bench_ray.py --items 20000 --repeat 3 --two-nodes
    RAY_ADDRESS=127.0.0.1:6379 .venv/bin/python benchmarks/bench_ray.py --executors ray   # a running cluster
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import make_pool, warm_page_cache  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RAY_TARGET = 1.5  # issue 27: Ray on one machine within 1.5x local at 20k items
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def _tree_rss(pid: int, cpu: dict[int, float], names: dict[int, str]) -> tuple[int, int]:
    """Summed RSS (bytes) of ``pid`` and every process below it, and that of ``pid`` alone; ``cpu``
    gets each of these processes' user + system seconds so far, ``names`` its name."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            statm = Path(f"/proc/{entry}/statm").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(statm.split()[1]) * PAGE
        seconds[int(entry)] = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        if p in seconds:
            cpu[p] = seconds[p]
            if p not in names:
                names[p] = _name(p)
        todo += children.get(p, [])
    return total, rss.get(pid, 0)


def _name(pid: int) -> str:
    """A process's short name: Ray's workers and agents name themselves (``ray::...``), its Python
    daemons by their script, the others by their program."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in argv if w]
    if not words:
        return "?"
    if words[0].startswith("ray::"):
        return words[0].split()[0]
    script = next((w for w in words[1:] if w.endswith(".py")), None)
    if script:
        return Path(script).name
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1]
    if "-c" in words[:-1]:
        return "python -c"
    return Path(words[0]).name


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.parquet"))}


def run(executor: str, pool: Path, replay: Path, root: Path, cluster: Optional[str] = None) -> dict:
    """One build with ``executor``; with ``cluster`` (an address), on that Ray cluster with two
    replicas, its processes (this script's other children) counted in the CPU and the memory
    (``"local"``: a local cluster of the build's own, as without an address)."""
    name = executor if cluster in (None, "local") else f"{executor}-2-nodes"
    out, work = root / f"out-{name}", root / f"work-{name}"
    for folder in (out, work):  # a fresh build: no cache left from an earlier run
        shutil.rmtree(folder, ignore_errors=True)
    command = [sys.executable, "-m", "orandcar_builder.cli", "build", str(pool), "-o", str(out), "--work", str(work),
               "--engine", "replay", "--replay", str(replay), "--executor", executor]
    two_nodes = cluster not in (None, "local")
    if cluster is not None:
        command += ["--ray-address", cluster]
    if two_nodes:
        command += ["--engine-replicas", "2"]
    root_pid = os.getpid() if two_nodes else None  # the cluster's processes are this script's
    cluster_before: dict[int, float] = {}
    cluster_cpu: dict[int, float] = {}  # every process below this script, at its last sample
    if root_pid is not None:
        _tree_rss(root_pid, cluster_before, {})
    start = time.perf_counter()
    # stderr to a file: Ray writes much there, and a pipe nobody reads while polling would fill and stop the build
    with tempfile.TemporaryFile(mode="w+") as errors:
        proc = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                stdout=subprocess.DEVNULL, stderr=errors, text=True)
        peak = driver = 0
        cpu: dict[int, float] = {}  # pid -> its CPU seconds at its last sample
        names: dict[int, str] = {}
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            tree, own = _tree_rss(proc.pid, cpu, names)
            if root_pid is not None:  # the script, the cluster and the build
                tree = _tree_rss(root_pid, cluster_cpu, names)[0]
            peak, driver = max(peak, tree), max(driver, own)
            time.sleep(0.2)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            errors.seek(0)
            raise SystemExit(f"{executor} build failed ({proc.returncode}): {errors.read()[-3000:]}")
    report = json.loads((work / "report.json").read_text())
    # wait4: the child and the descendants it (and they) reaped, to the end; the samples: every
    # process seen, up to its last sample (Ray's daemons outlive nobody's wait when they are killed)
    cpu_s = max(usage.ru_utime + usage.ru_stime, sum(cpu.values()))
    if root_pid is not None:  # what the cluster's processes (its actors' workers too) used meanwhile
        _tree_rss(root_pid, cluster_cpu, names)
        used = {p: c - cluster_before.get(p, 0.0) for p, c in cluster_cpu.items() if p != root_pid and p not in cpu}
        cpu_s += sum(used.values())
        cpu.update({-p: c for p, c in used.items()})  # by name below; no pid is negative
        names.update({-p: names.get(p, "?") for p in used})
    by_name: dict[str, float] = {}
    for p, seconds_used in cpu.items():
        by_name[names.get(p, "?")] = by_name.get(names.get(p, "?"), 0.0) + seconds_used
    return {"executor": name, "seconds": round(seconds, 2), "cpu_s": round(cpu_s, 2),
            "peak_tree_rss_mb": round(peak / 2**20, 1), "peak_driver_rss_mb": round(driver / 2**20, 1),
            "load": round(os.getloadavg()[0], 1), "timings_s": report.get("timings_s"),
            "cpu_by_process_s": {k: round(v, 2) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])},
            "out": out}


def _two_nodes():
    """A head and a second node on this machine, one CPU each (``ray.cluster_utils.Cluster``)."""
    from ray.cluster_utils import Cluster

    # the nodes' workers must import this tree, as every node of a cluster needs the same package
    # (without it they import the installed one, and the actors cannot be made from another version)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--executors", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--two-nodes", action="store_true",
                        help="also build on a two-node Ray cluster simulated on this machine (two replicas)")
    parser.add_argument("--repeat", type=int, default=1, help="run the executors in turn this many times")
    parser.add_argument("--workdir", type=Path, default=None, help="where to build (default: a temp dir, removed)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        pool, replay = make_pool(root, args.items)
        warm_page_cache(root)
        cluster = _two_nodes() if args.two_nodes else None
        results = []
        try:
            for turn in range(args.repeat):
                outs, seconds = {}, {}
                # while the simulated cluster runs, Ray's address file names it, and a build without an
                # address would join it: the one-machine run starts its own cluster ("local")
                own = "local" if cluster else None
                runs = [(e, own if e == "ray" else None) for e in args.executors]
                runs += [("ray", cluster.address)] if cluster else []
                for executor, address in runs:
                    result = run(executor, pool, replay, root, address)
                    outs[result["executor"]], seconds[result["executor"]] = result.pop("out"), result["seconds"]
                    result["turn"] = turn + 1
                    print(json.dumps(result), flush=True)
                    results.append(result)
                if "local" in outs:
                    for other in (name for name in outs if name != "local"):
                        same = _digests(outs[other]) == _digests(outs["local"])
                        ratio = seconds[other] / seconds["local"]
                        print(f"turn {turn + 1}: {other} / local {ratio:.2f}, {other} shards byte-identical to "
                              f"local: {same}", flush=True)
                        results.append({"turn": turn + 1, "executor": other, "over_local": round(ratio, 2),
                                        "identical_to_local": same})
        finally:
            if cluster is not None:
                cluster.shutdown()
        for other in sorted({r["executor"] for r in results if "over_local" in r}):
            ratios = sorted(r["over_local"] for r in results if r.get("executor") == other and "over_local" in r)
            within = sum(ratio <= RAY_TARGET for ratio in ratios)
            print(f"{other} / local over {len(ratios)} turns: median {statistics.median(ratios):.2f}, "
                  f"{ratios[0]:.2f}-{ratios[-1]:.2f}; {within} of {len(ratios)} within {RAY_TARGET:.2f}")
            results.append({"executor": other, "over_local_median": statistics.median(ratios),
                            "within_target": within, "turns": len(ratios), "target": RAY_TARGET})
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
