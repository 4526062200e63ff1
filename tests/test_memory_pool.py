"""The builder asks for Arrow's jemalloc pool (orandcar_builder/__init__.py), leaves a user's
choice alone, and writes the same bytes whichever pool allocates."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = ("import json, orandcar_builder, pyarrow as pa, os; "
         "print(json.dumps([pa.default_memory_pool().backend_name, os.environ.get('ARROW_DEFAULT_MEMORY_POOL')]))")


def _probe(code: str, **env_changes: str | None) -> list:
    env = dict(os.environ)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stderr == ""  # no allocator warning
    return json.loads(out.stdout)


def _has_jemalloc() -> bool:
    import pyarrow as pa
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the builder asks for jemalloc on Linux only")
def test_importing_the_builder_first_selects_jemalloc_for_this_process_and_its_children():
    if not _has_jemalloc():
        pytest.skip("this pyarrow has no jemalloc")
    assert _probe(PROBE, ARROW_DEFAULT_MEMORY_POOL=None) == ["jemalloc", "jemalloc"]


def test_a_pool_the_user_chose_is_kept():
    assert _probe(PROBE, ARROW_DEFAULT_MEMORY_POOL="system") == ["system", "system"]


def test_pyarrow_imported_before_the_builder_keeps_its_pool_and_the_environment_is_left_alone():
    code = "import pyarrow, " + PROBE.removeprefix("import ")
    _backend, chosen = _probe(code, ARROW_DEFAULT_MEMORY_POOL=None)
    assert chosen is None  # nothing set that this process's pyarrow would not use


def test_the_same_rows_give_the_same_shard_bytes_under_every_pool(tmp_path):
    """Each pool in its own process writes one config's shards; the files are byte-identical."""
    code = (
        "import hashlib, sys, pyarrow as pa\n"
        "from pathlib import Path\n"
        "from orandcar_builder.dataset import writer as writer_module\n"
        "from orandcar_builder.dataset.writer import ConfigWriter\n"
        "def row(i):\n"
        "    data = hashlib.sha256(str(i).encode()).digest() * (1 + i % 50)\n"
        "    return {'image': {'bytes': data, 'path': f'{i}.png'}, 'image_sha256': hashlib.sha256(data).hexdigest(),\n"
        "            'qa': [{'question': 'q' * (i % 7), 'answer': str(i), 'wrong_vlm': 'w', 'reason': 'wrong_answer'}],\n"
        "            'clean_meta': {'policy': 'p', 'sources': [{'dataset': 'd', 'split': 's', 'id': str(i),\n"
        "                           'origin': 'benchmark', 'family': 'scene_text', 'references': ['a'], 'options': []}],\n"
        "                           'actions': []}}\n"
        "writer_module.ROW_GROUP_MAX_BYTES = 60_000  # 3-4 row groups in each of 11 shards\n"
        "with ConfigWriter(Path(sys.argv[1]), 'rejected', max_shard_bytes=200_000) as w:\n"
        "    for i in range(2000): w.write(row(i))\n"
        "    w.finalize()\n"
        "print(pa.default_memory_pool().backend_name)\n"
    )
    pools = ["system", "mimalloc"] + (["jemalloc"] if _has_jemalloc() else [])
    contents = {}
    for pool in pools:
        folder = tmp_path / pool
        env = dict(os.environ, ARROW_DEFAULT_MEMORY_POOL=pool)
        out = subprocess.run([sys.executable, "-c", code, str(folder)], env=env, capture_output=True, text=True,
                             check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert out.stdout.strip() == pool
        contents[pool] = {p.name: p.read_bytes() for p in sorted((folder / "rejected").glob("*.parquet"))}
    assert len(contents["system"]) > 1  # several shards
    for pool in pools[1:]:
        assert contents[pool] == contents["system"], pool
