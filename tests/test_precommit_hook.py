"""The pre-commit hooks of .pre-commit-hooks.yaml, run by pre-commit itself (``pre-commit try-repo``)
in a scratch git repo that holds the sample build as a clone of the Hub repo would (with the
Hub's ``.gitattributes``), and ``validate --tracked`` they run.

``orandcar-validate-system`` runs the ``orandcar`` of this checkout (a few seconds, no network).
``orandcar-validate`` is the hook adopters use (``language: python``): pre-commit installs this
project and its dependencies from the package registry into an environment of its own first,
about 100 s on the quiet 2-core machine (280 s measured while other tests ran); it is marked slow.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orandcar_builder.cli import main
from tests import test_validate

PROJECT = Path(__file__).resolve().parents[1]
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
GITATTRIBUTES = "*.parquet filter=lfs diff=lfs merge=lfs -text\n*.png filter=lfs diff=lfs merge=lfs -text\n"

needs_pre_commit = pytest.mark.skipif(not PRE_COMMIT.exists(), reason="pre-commit is not installed (the test extra)")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=test@example.com", "-c", "user.name=test", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def clone(built_sample, tmp_path) -> Path:
    """A git repo holding the sample build at its root, committed, as a clone of the Hub repo."""
    repo = tmp_path / "OrandCar"
    shutil.copytree(built_sample, repo)
    (repo / ".gitattributes").write_text(GITATTRIBUTES)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the dataset")
    return repo


def try_hook(repo: Path, hook: str, home: Path, *, installed: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRE_COMMIT", "PYTHONPATH"))}
    env["PRE_COMMIT_HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if installed:  # the system hook runs this checkout's code
        env["PYTHONPATH"] = str(PROJECT)
    return subprocess.run([str(PRE_COMMIT), "try-repo", str(PROJECT), hook, "--all-files", "--color", "never"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=900)


def test_the_hooks_file_names_the_hooks():
    hooks = {hook["id"]: hook for hook in yaml.safe_load((PROJECT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"orandcar-validate", "orandcar-validate-system"}
    for hook in hooks.values():
        assert hook["entry"] == "orandcar validate --tracked" and hook["pass_filenames"] is False
        assert hook["args"] == ["."]
    assert hooks["orandcar-validate"]["language"] == "python"
    assert hooks["orandcar-validate-system"]["language"] == "system"


@needs_pre_commit
def test_the_hook_passes_a_clean_clone_and_stops_a_broken_commit(clone, tmp_path):
    home = tmp_path / "pre-commit-home"
    run = try_hook(clone, "orandcar-validate-system", home, installed=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Passed" in run.stdout

    test_validate.corrupt_sha(clone)  # a changed shard, staged for the commit
    git(clone, "add", "-A")
    run = try_hook(clone, "orandcar-validate-system", home, installed=True)
    assert run.returncode == 1 and "Failed" in run.stdout, run.stdout + run.stderr
    assert "rejected/train-00000-of-00001.parquet row 0 field image_sha256" in run.stdout


@needs_pre_commit
def test_the_hook_checks_what_is_committed_not_what_lies_beside_it(clone, tmp_path):
    home = tmp_path / "pre-commit-home"
    (clone / "secrets.txt").write_text("not for the Hub\n")  # untracked: never committed or pushed
    run = try_hook(clone, "orandcar-validate-system", home, installed=True)
    assert run.returncode == 0, run.stdout + run.stderr
    git(clone, "add", "secrets.txt")
    run = try_hook(clone, "orandcar-validate-system", home, installed=True)
    assert run.returncode == 1 and "secrets.txt: unexpected file, not part of the dataset layout" in run.stdout


@pytest.mark.slow
@needs_pre_commit
def test_the_python_hook_installs_and_runs_as_adopters_get_it(clone, tmp_path):
    """100-280 s: pre-commit installs the project from the registry into its own environment."""
    home = tmp_path / "pre-commit-home"
    run = try_hook(clone, "orandcar-validate", home, installed=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "Passed" in run.stdout
    test_validate.bad_reason(clone)
    git(clone, "add", "-A")
    run = try_hook(clone, "orandcar-validate", home, installed=False)  # the environment is reused
    assert run.returncode == 1 and "rejected/train-00000-of-00001.parquet row 0 field qa.0.reason" in run.stdout


# -- validate --tracked, as the hooks run it ----------------------------------------------------------

def test_tracked_checks_the_commit_of_a_folder_inside_a_repo(built_sample, tmp_path):
    repo = tmp_path / "team-repo"
    repo.mkdir()
    shutil.copytree(built_sample, repo / "OrandCar")
    (repo / "recipe.toml").write_text("# the build recipe, beside the dataset\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    runner = CliRunner()
    run = runner.invoke(main, ["validate", "--tracked", str(repo / "OrandCar")])
    assert run.exit_code == 0, run.output
    # a file removed from the index is not part of the commit any more, though it lies on disk
    git(repo, "rm", "-q", "--cached", "OrandCar/README.md")
    run = runner.invoke(main, ["validate", "--tracked", str(repo / "OrandCar")])
    assert run.exit_code == 1 and "README.md: missing" in run.output
    git(repo, "add", "OrandCar/README.md")
    (repo / "OrandCar" / "RS_think" / "notes.txt").write_text("x")
    git(repo, "add", "OrandCar/RS_think/notes.txt")
    run = runner.invoke(main, ["validate", "--tracked", str(repo / "OrandCar")])
    assert run.exit_code == 1 and "RS_think/notes.txt: unexpected file" in run.output


def test_tracked_refuses_a_tracked_symbolic_link(clone):
    (clone / "examples" / "extra.png").symlink_to(clone / "examples" / "rejected-1.png")
    git(clone, "add", "-A")
    run = CliRunner().invoke(main, ["validate", "--tracked", str(clone)])
    assert run.exit_code == 1 and "examples/extra.png (symbolic link): unexpected file" in run.output


def test_tracked_names_a_shard_git_lfs_did_not_fetch(clone):
    shard = clone / "RS_think" / "train-00000-of-00001.parquet"
    shard.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 380521\n")
    run = CliRunner().invoke(main, ["validate", "--tracked", str(clone)])
    assert run.exit_code == 1
    assert "RS_think/train-00000-of-00001.parquet: a Git LFS pointer, not the file's content (run `git lfs pull`)" \
        in run.output


def test_tracked_outside_a_git_checkout_is_one_error_line(built_sample, tmp_path):
    folder = tmp_path / "OrandCar"
    shutil.copytree(built_sample, folder)
    run = CliRunner().invoke(main, ["validate", "--tracked", str(folder)],
                             env={"GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert run.exit_code == 2 and run.output.count("error:") == 1 and "not in a git checkout" in run.output
