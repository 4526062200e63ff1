"""A wheel of the project, installed in a fresh virtualenv, builds the sample pool outside the checkout.

The card templates (``dataset_card/``) and the loading definition (``loading_script/``) live at
the top level of the repository; the wheel must carry them, or an installed package (a Ray node,
a user's ``pip install``) cannot build. The fresh virtualenv gets the wheel and nothing of the
checkout; the project's dependencies come from the test environment's site-packages as a plain
path entry (no network in tests), which does not bring in the editable install of the checkout.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO, SAMPLES, dataset_files

pytestmark = pytest.mark.slow

# What a wheel is built from: the files setup.py and pyproject.toml read.
SOURCES = ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "README.md", "orandcar_builder",
           "dataset_card", "loading_script", "recipes")


def _run(args, cwd, env=None):
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("wheel_src")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_shipped"))
        else:
            shutil.copy2(path, src / name)
    if shutil.which("git"):  # a checkout: the wheel records the commit it was built from
        for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "wheel source"]):
            _run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=src)
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          "-w", str(out), str(src)], cwd=src)
    (found,) = out.glob("orandcar_builder-*.whl")
    return found


def test_the_wheel_carries_the_card_templates_the_loading_definition_and_the_recipe(wheel):
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    for folder in ("dataset_card", "loading_script", "recipes"):
        expected = {f"orandcar_builder/_shipped/{folder}/{p.relative_to(REPO / folder).as_posix()}": p
                    for p in (REPO / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
        assert expected and set(expected) <= names, sorted(set(expected) - names)
        for name, source in expected.items():  # the copies are the repository's files, byte for byte
            assert archive.read(name) == source.read_bytes(), name
    assert "orandcar_builder/dataset/schemas/rejected.json" in names


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_wheel_records_the_commit_it_was_built_from(wheel):
    import json

    src = next(wheel.parent.parent.glob("wheel_src*"))
    head = _run(["git", "rev-parse", "HEAD"], cwd=src).stdout.strip()
    recorded = json.loads(zipfile.ZipFile(wheel).read("orandcar_builder/pipeline/_build_info.json"))
    assert recorded == {"commit": head, "modified": False}


def test_an_installed_wheel_builds_the_sample_outside_the_checkout(wheel, tmp_path, sample_build):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
          str(wheel)], cwd=tmp_path)
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=tmp_path).stdout.strip())
    (site / "_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    where = tmp_path / "elsewhere"
    shutil.copytree(SAMPLES, where / "samples")
    env = _clean_env()
    located = _run([str(python), "-c", "import orandcar_builder; print(orandcar_builder.__file__)"],
                   cwd=where, env=env).stdout.strip()
    assert Path(located).is_relative_to(venv), located  # the wheel's copy, not the checkout's

    done = _run([str(venv / "bin" / "orandcar"), "build", "samples/pool.jsonl", "-o", "OrandCar", "--work", "work"],
                cwd=where, env=env)
    assert "warning" not in done.stderr, done.stderr  # e.g. the review page's templates missing
    assert (where / "work" / "report.html").is_file()
    shipped = _run([str(python), "-c", "from orandcar_builder.recipe import read_recipe, shipped_recipe_path; "
                    "p = shipped_recipe_path(); r = read_recipe(p); print(p); print(r.families['scene_text'].separator == ' ')"],
                   cwd=where, env=env).stdout.split()
    assert Path(shipped[0]).is_relative_to(venv) and shipped[1] == "True"  # the recipe ships with the wheel
    if "orandcar_builder/pipeline/_build_info.json" in zipfile.ZipFile(wheel).namelist():  # a card would name its commit
        bare = {k: v for k, v in env.items() if k != "ORANDCAR_SOURCE_COMMIT"}
        named = _run([str(python), "-c", "from orandcar_builder.pipeline.provenance import source_info; "
                      "print(source_info()['commit'])"], cwd=where, env=bare).stdout.strip()
        assert len(named) == 40 and named in zipfile.ZipFile(wheel).read("orandcar_builder/pipeline/_build_info.json").decode()

    # The same bytes as the checkout's own build of the sample pool.
    result, _ = sample_build
    mine, theirs = where / "OrandCar", result.out
    files = dataset_files(theirs)  # the local marker remembers each build's own work dir
    assert dataset_files(mine) == files
    match, mismatch, errors = filecmp.cmpfiles(theirs, mine, [str(f) for f in files], shallow=False)
    assert not mismatch and not errors, (mismatch, errors)
