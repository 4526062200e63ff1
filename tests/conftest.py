"""Shared fixtures: the sample build (built once per session) and small pool factories."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from PIL import Image

# load_dataset caches what it reads: keep that out of the user's ~/.cache (set before datasets is
# imported by any test module).
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="orandcar-test-datasets-cache-")
# The import seal's key (pool/seal.py) likewise stays out of the user's config folder.
os.environ["ORANDCAR_CONFIG_DIR"] = tempfile.mkdtemp(prefix="orandcar-test-config-")
# Cards name the git commit of the code that built them (pipeline/provenance.py); the tests compare cards
# byte for byte (the golden card, a wheel's build against the checkout's), so they name none.
os.environ["ORANDCAR_SOURCE_COMMIT"] = "none"

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
# ../shared/data beside the checkout: real scene-text crops (present in CI, optional locally).
SHARED_DATA = REPO.parent / "shared" / "data"


class RecordingEngine:
    """Wraps an engine and records every request it was given, in order."""

    def __init__(self, inner):
        self.inner = inner
        self.kind = inner.kind
        self.can_judge = inner.can_judge
        self.SECRET_OPTIONS = inner.SECRET_OPTIONS
        self.requests = []

    def fingerprint(self):
        return self.inner.fingerprint()

    def generation_settings(self):
        return self.inner.generation_settings()

    def generate(self, requests):
        self.requests.extend(requests)
        return self.inner.generate(requests)


@pytest.fixture(scope="session")
def ocr_engine():
    from orandcar_builder.engines import create_engine

    return create_engine("rapidocr", threads=1)


@pytest.fixture(scope="session")
def sample_build(tmp_path_factory, ocr_engine):
    """The sample pool built once with the default engine: (result, recording engine)."""
    from orandcar_builder.pipeline import build

    root = tmp_path_factory.mktemp("sample_build")
    engine = RecordingEngine(ocr_engine)
    result = build(SAMPLES / "pool.jsonl", root / "OrandCar", work=root / "work", engine=engine, progress=False)
    assert result.ok, result.problems
    return result, engine


@pytest.fixture(scope="session")
def built_sample(sample_build):
    """Path of the built sample dataset folder (read-only: copy it before changing anything)."""
    return sample_build[0].out


@pytest.fixture
def sample_copy(built_sample, tmp_path):
    target = tmp_path / "OrandCar"
    shutil.copytree(built_sample, target)
    return target


def dataset_files(folder: Path) -> list[Path]:
    """Every file of a dataset folder, relative and sorted, but its marker: local (it remembers the
    work dir, which differs from build to build) and never published, it is not the dataset's."""
    from orandcar_builder.dataset.layout import MARKER

    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file() and p.name != MARKER)


def write_png(path: Path, colour=(200, 30, 30), size=(24, 16)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


def write_pool(path: Path, lines) -> Path:
    """Write pool lines: dicts are JSON-encoded, str and bytes are written as they are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        for line in lines:
            if isinstance(line, (dict, list)):
                line = json.dumps(line)
            if isinstance(line, str):
                line = line.encode("utf-8")
            fh.write(line.rstrip(b"\n") + b"\n")
    return path


def wait_until_idle(pid: int, quiet_s: float = 0.5, within_s: float = 30.0) -> None:
    """Until process ``pid`` has spent no CPU for ``quiet_s`` (started, imported, waiting on a
    pipe); AssertionError past ``within_s``. Reads its CPU time from /proc (Linux)."""
    import time

    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    deadline = time.monotonic() + within_s
    last, since = cpu(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = cpu()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
    raise AssertionError(f"process {pid} kept working for {within_s} s")


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads a process's CPU time from /proc")
