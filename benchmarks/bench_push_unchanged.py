"""``orandcar push`` of a folder the Hub holds already: who decides "unchanged, no commit", and how fast.

Writes ``--files`` files of incompressible bytes (``--gb`` GB in all, as parquet shards of photos
are) in a temporary folder, commits them once to the local Hub-protocol test server
(tests/hubserver.py), then times the decision a re-push makes, both ways, ``--repeat`` times each
in turn (the files stay in the page cache, so the figures are hashing and protocol, not the disk):

- ``own``: what ``publish.push`` does: hash every file itself (``publish._local_files``: sha256 and
  the git blob id in one read), list the branch's tree once (``list_repo_tree``), compare
  (``plan_changes``): nothing to upload, no commit request.
- ``hub``: leave it to huggingface_hub: ``create_commit`` with every file as a
  ``CommitOperationAdd``; the client hashes each file (sha256), asks ``preupload`` and the LFS
  batch endpoint, drops the files whose remote oid matches, and makes no commit.

    .venv/bin/python benchmarks/bench_push_unchanged.py --gb 2 --files 20 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.hubserver import HubServer  # noqa: E402 - huggingface_hub is imported once HF_ENDPOINT is set

REPO = "bench-org/OrandCar"
CHUNK = 16 * 1024 * 1024


def write_files(folder: Path, total_bytes: int, count: int) -> list[str]:
    """``count`` files of random bytes under ``folder/RS_think`` (shard names), ``total_bytes`` in all."""
    (folder / "RS_think").mkdir(parents=True)
    paths, each = [], total_bytes // count
    for index in range(count):
        path = f"RS_think/train-{index:05d}-of-{count:05d}.parquet"
        with open(folder / path, "wb") as out:
            left = each
            while left:
                out.write(os.urandom(min(CHUNK, left)))
                left -= min(CHUNK, left)
        paths.append(path)
    return paths


def timed(run) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return {"seconds": round(time.perf_counter() - wall, 2), "cpu_seconds": round(time.process_time() - cpu, 2),
            "result": result}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=2.0, help="GB (10**9 bytes) in the folder")
    parser.add_argument("--files", type=int, default=20, help="number of files")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each way")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    figures: dict = {"bytes": int(args.gb * 1e9), "files": args.files, "own": [], "hub": []}
    with tempfile.TemporaryDirectory(prefix="orandcar-bench-push-") as root:
        folder = Path(root) / "OrandCar"
        start = time.perf_counter()
        paths = write_files(folder, figures["bytes"], args.files)
        print(f"wrote {args.files} files, {args.gb:g} GB, in {time.perf_counter() - start:.1f} s")
        with HubServer(Path(root) / "hub") as server:
            os.environ.update(HF_ENDPOINT=server.url, HF_TOKEN=server.token, HF_HUB_DISABLE_XET="1",
                              HF_HOME=str(Path(root) / "hf-home"), HF_HUB_DISABLE_PROGRESS_BARS="1")
            from huggingface_hub import CommitOperationAdd, HfApi

            from orandcar_builder.publish import REPO_TYPE, _local_files, _remote_files, plan_changes

            api = HfApi(token=server.token)
            api.create_repo(REPO, repo_type=REPO_TYPE)
            start = time.perf_counter()
            head = api.create_commit(REPO, [CommitOperationAdd(p, str(folder / p)) for p in paths],
                                     commit_message="first", repo_type=REPO_TYPE).oid
            print(f"first upload to the test hub: {time.perf_counter() - start:.1f} s")

            def own():
                local = _local_files(folder, paths, progress=False)
                uploads, unchanged, deletions = plan_changes(local, _remote_files(api, REPO, head))
                assert not uploads and not deletions and len(unchanged) == len(paths)
                return "no commit"

            def hub():
                operations = [CommitOperationAdd(p, str(folder / p)) for p in paths]
                info = api.create_commit(REPO, operations, commit_message="again", repo_type=REPO_TYPE,
                                         parent_commit=head)
                assert info.oid == head, "huggingface_hub made a commit of unchanged files"
                return "no commit"

            for _ in range(args.repeat):
                for name, run in (("own", own), ("hub", hub)):
                    server.clear_log()
                    row = timed(run)
                    row["requests"] = len(server.log)
                    figures[name].append(row)
                    print(f"{name}: {row['seconds']} s wall, {row['cpu_seconds']} s CPU, {row['requests']} requests")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
