"""Where the running code came from (pipeline/provenance.py): the commit of a git checkout and whether the
files that shape a build differ from it; the environment's word over it; a wheel's record."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from orandcar_builder.pipeline import provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "repo"
    (root / "orandcar_builder").mkdir(parents=True)
    (root / "orandcar_builder" / "rules.py").write_text("X = 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    return root


def test_a_clean_checkout_names_its_commit(checkout):
    head = _git(checkout, "rev-parse", "HEAD").strip()
    assert provenance.git_source(checkout) == {"commit": head, "modified": False}
    (checkout / "tests" / "test_x.py").write_text("changed = True\n")  # not a file a build reads
    (checkout / "notes.txt").write_text("new, outside the package\n")
    assert provenance.git_source(checkout) == {"commit": head, "modified": False}


@pytest.mark.parametrize("change", [
    lambda root: (root / "orandcar_builder" / "rules.py").write_text("X = 2\n"),  # changed
    lambda root: (root / "orandcar_builder" / "new.py").write_text(""),  # new, not yet added
    lambda root: (root / "orandcar_builder" / "rules.py").unlink(),  # removed
    lambda root: (root / "recipes").mkdir() or (root / "recipes" / "x.toml").write_text("format = 1\n"),
])
def test_changes_to_what_shapes_a_build_are_noted(checkout, change):
    change(checkout)
    assert provenance.git_source(checkout)["modified"] is True


def test_no_commit_outside_a_checkout(tmp_path, monkeypatch):
    assert provenance.git_source(tmp_path) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    _git(empty, "init", "-q")  # a repository without a commit
    assert provenance.git_source(empty) is None
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    assert provenance.git_source(tmp_path) is None


def test_the_environment_and_a_wheels_record(tmp_path, monkeypatch):
    monkeypatch.setenv(provenance.SOURCE_COMMIT_ENV, " ABCDEF1 ")
    assert provenance.source_info() == {"commit": "abcdef1", "modified": False}
    monkeypatch.setenv(provenance.SOURCE_COMMIT_ENV, "none")
    assert provenance.source_info() is None
    for bad in ("", "HEAD", "abc", "g" * 40, "a" * 65):
        monkeypatch.setenv(provenance.SOURCE_COMMIT_ENV, bad)
        with pytest.raises(ValueError, match=provenance.SOURCE_COMMIT_ENV):
            provenance.source_info()
    # without the variable: the record a wheel carries comes before git
    monkeypatch.delenv(provenance.SOURCE_COMMIT_ENV)
    monkeypatch.setattr(provenance, "_HERE", tmp_path)
    monkeypatch.setattr(provenance, "_CHECKOUT", tmp_path)
    (tmp_path / provenance.BUILD_INFO).write_text(json.dumps({"commit": "1234567", "modified": True}))
    assert provenance.source_info() == {"commit": "1234567", "modified": True}
    (tmp_path / provenance.BUILD_INFO).write_text("{not json")
    assert provenance.source_info() is None  # and tmp_path is no checkout


def test_this_checkout_is_found_where_the_package_is(monkeypatch):
    """The folder above the package, where a checkout has its .git (site-packages has none)."""
    from pathlib import Path

    import orandcar_builder

    assert provenance._CHECKOUT == Path(orandcar_builder.__file__).resolve().parents[1]
    monkeypatch.delenv(provenance.SOURCE_COMMIT_ENV)
    found = provenance.source_info()
    if (provenance._CHECKOUT / ".git").exists():
        assert found["commit"] == _git(provenance._CHECKOUT, "rev-parse", "HEAD").strip()
