"""The review page's part of the decisions prepared by a child process (``review.ahead``): the
page is the same byte for byte whether the part came from the child or was made in the page's
process; the child's answer is used only for the same file and samples; a child that fails or
never answers costs nothing but time; a build that stops leaves no child behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from orandcar_builder.pipeline import build
from orandcar_builder.pipeline.stages import card as card_stage
from orandcar_builder.review import ahead as ahead_module
from orandcar_builder.review import page as page_module
from orandcar_builder.review.ahead import PageAhead
from orandcar_builder.review.collect import read_figures
from orandcar_builder.review.page import render_review
from orandcar_builder.workdir import WorkDir

from .test_review import judged_build  # noqa: F401 (a fixture: a replayed build with a judge and a calibration)
from .test_write_apart import _pool


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    """The child is started on two cores or more: say there are two, whatever runs the tests."""
    monkeypatch.setattr(ahead_module, "usable_cpus", lambda: 2)


@pytest.fixture
def made_here(monkeypatch):
    """The calls of ``page.decisions_part`` in this process (the child's are not counted)."""
    calls = []
    original = page_module.decisions_part
    monkeypatch.setattr(page_module, "decisions_part", lambda *args: calls.append(args) or original(*args))
    return calls


def _started(build_result, per_kind: int = 3) -> PageAhead:
    ahead = PageAhead(min_decisions=0)
    assert ahead.start(build_result.work, read_figures(WorkDir(build_result.work).report), per_kind=per_kind)
    return ahead


def test_the_part_made_apart_gives_the_page_made_here(judged_build, made_here):  # noqa: F811
    alone = render_review(judged_build.out, judged_build.work)
    assert len(made_here) == 1
    wanted = made_here[0][1]
    assert wanted == {"s4"}  # the calibration's disagreement is shown by name, so the child must read it too
    with _started(judged_build) as ahead:
        page = render_review(judged_build.out, judged_build.work, ahead=ahead)
        assert not ahead.started  # taken
    assert len(made_here) == 1  # the child's part was used
    assert page == alone
    assert "s4" in page[0] and page[0].count("data:image/svg+xml;base64,") == 3


@pytest.mark.parametrize("change", ["samples", "decisions"])
def test_a_part_for_other_samples_or_another_file_is_not_used(judged_build, made_here, change):  # noqa: F811
    decisions = WorkDir(judged_build.work).decisions
    with _started(judged_build, per_kind=3 if change == "decisions" else 2) as ahead:
        if change == "decisions":  # the same bytes in a new file: another file for the page's purpose
            copy = decisions.with_name("decisions.copy")
            shutil.copyfile(decisions, copy)
            os.replace(copy, decisions)
        page = render_review(judged_build.out, judged_build.work, ahead=ahead)
    assert len(made_here) == 1  # made here again
    assert page == render_review(judged_build.out, judged_build.work)


def test_a_part_for_other_ids_is_not_used_nor_waited_for(judged_build, monkeypatch):  # noqa: F811
    children = _spied_children(monkeypatch)
    decisions = WorkDir(judged_build.work).decisions
    with _started(judged_build) as ahead:
        assert ahead.take(decisions, frozenset({"s5"}), 3) is None
        assert children[0].poll() is not None and not ahead.started
    with _started(judged_build) as ahead:
        assert ahead.take(decisions, frozenset({"s4"}), 3) is not None


# A child that answers right, then fails: its answer is not used either.
_ANSWER_THEN_FAIL = (
    "import sys, json, pickle; from pathlib import Path; from orandcar_builder.review.page import decisions_part; "
    "t = json.loads(sys.stdin.readline()); "
    "sys.stdout.buffer.write(pickle.dumps(decisions_part(Path(t['decisions']), frozenset(t['wanted']), t['per_kind']))); "
    "sys.stdout.flush(); sys.exit(1)")


@pytest.mark.parametrize("program", ["import sys; sys.exit(3)", "import sys; sys.stdout.write('not a pickle')",
                                     "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", _ANSWER_THEN_FAIL])
def test_a_child_that_fails_leaves_the_page_to_this_process(judged_build, made_here, monkeypatch, program):  # noqa: F811
    monkeypatch.setattr(ahead_module, "_CHILD", program)
    with _started(judged_build) as ahead:
        page = render_review(judged_build.out, judged_build.work, ahead=ahead)
    assert len(made_here) == 1
    assert page == render_review(judged_build.out, judged_build.work)


def test_a_child_that_fails_says_why_in_one_line(judged_build, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(ahead_module, "_CHILD", "import sys; sys.stderr.write('Traceback...\\nOSError: no luck\\n'); "
                                                "sys.exit(1)")
    with _started(judged_build) as ahead:
        render_review(judged_build.out, judged_build.work, ahead=ahead)
    assert capsys.readouterr().err == ("warning: the review page's second process failed (exit code 1: OSError: no "
                                       "luck); the page is made in the build's process\n")
    monkeypatch.setattr(ahead_module, "_CHILD", "import sys; sys.exit(1)")  # quiet: interrupted, say
    with _started(judged_build) as ahead:
        render_review(judged_build.out, judged_build.work, ahead=ahead)
    assert capsys.readouterr().err == ""


def test_the_child_runs_this_package_not_the_current_folders(judged_build, made_here, monkeypatch, tmp_path):  # noqa: F811
    """``python -c`` puts the current folder first on sys.path: a module there must not be run."""
    fake = tmp_path / "orandcar_builder" / "review"
    fake.mkdir(parents=True)
    (tmp_path / "orandcar_builder" / "__init__.py").write_text("raise SystemExit(5)\n")
    (fake / "__init__.py").write_text("")
    (tmp_path / "json.py").write_text("raise SystemExit(6)\n")
    monkeypatch.chdir(tmp_path)
    with _started(judged_build) as ahead:
        page = render_review(judged_build.out, judged_build.work, ahead=ahead)
    assert made_here == [], "the child ran the current folder's code, not this package's"
    assert page == render_review(judged_build.out, judged_build.work)


def _spied_children(monkeypatch) -> list:
    """The processes ``ahead`` starts, as they start."""
    children = []
    original = subprocess.Popen
    monkeypatch.setattr(ahead_module.subprocess, "Popen", lambda *a, **k: children.append(original(*a, **k))
                        or children[-1])
    return children


def test_stop_ends_a_child_still_running(judged_build, monkeypatch):  # noqa: F811
    children = _spied_children(monkeypatch)
    monkeypatch.setattr(ahead_module, "_CHILD", "import time; time.sleep(60)")
    t0 = time.perf_counter()
    with _started(judged_build):
        pass
    assert children and children[0].poll() is not None
    assert time.perf_counter() - t0 < 30


def test_small_builds_and_one_core_make_the_part_here(judged_build, monkeypatch):  # noqa: F811
    figures = read_figures(WorkDir(judged_build.work).report)
    assert not PageAhead().start(judged_build.work, figures)  # far fewer decisions than AHEAD_MIN_DECISIONS
    monkeypatch.setattr(ahead_module, "usable_cpus", lambda: 1)
    assert not PageAhead(min_decisions=0).start(judged_build.work, figures)
    monkeypatch.undo()
    missing = judged_build.work.parent / "no-such-work"
    assert not PageAhead(min_decisions=0).start(missing, figures)  # the page says why, later


def _build(pool, replay, root):
    return build(pool, root / "out", work=root / "work", engine_name="replay", engine_options={"replay": str(replay)},
                 progress=False)


def test_a_build_uses_the_part_made_apart_and_writes_the_same_page(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    monkeypatch.setattr(ahead_module, "AHEAD_MIN_DECISIONS", 0)
    taken = []
    original = PageAhead.take
    monkeypatch.setattr(PageAhead, "take", lambda self, *a: taken.append(original(self, *a)) or taken[-1])
    result = _build(pool, replay, tmp_path / "b")
    assert result.ok and len(taken) == 1 and taken[0] is not None
    written = WorkDir(result.work).review.read_text(encoding="utf-8")
    assert written == render_review(result.out, result.work)[0]


def test_a_calibration_file_the_child_cannot_use_does_not_stop_the_build(tmp_path, monkeypatch):
    """The child only saves time: a work/calibration.json the page cannot read costs the page
    (a warning, as before), never the build."""
    pool, replay = _pool(tmp_path / "pool")
    monkeypatch.setattr(ahead_module, "AHEAD_MIN_DECISIONS", 0)
    started = []
    original = PageAhead.start
    monkeypatch.setattr(PageAhead, "start", lambda self, *a, **k: started.append(original(self, *a, **k))
                        or started[-1])
    work = tmp_path / "b" / "work"
    work.mkdir(parents=True)
    (work / "calibration.json").write_text('{"disagreements": [1]}')
    result = _build(pool, replay, tmp_path / "b")
    assert result.ok and started == [False]


def test_a_build_that_stops_leaves_no_child(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    monkeypatch.setattr(ahead_module, "AHEAD_MIN_DECISIONS", 0)
    monkeypatch.setattr(ahead_module, "_CHILD", "import time; time.sleep(60)")
    children = _spied_children(monkeypatch)

    def interrupted(self, *args):
        raise KeyboardInterrupt

    monkeypatch.setattr(card_stage.CardStage, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _build(pool, replay, tmp_path / "b")
    assert len(children) == 1 and children[0].poll() is not None
    assert not (tmp_path / "b" / "out").exists()


def test_the_package_root_goes_on_pythonpath_only_outside_the_site_folders(monkeypatch, tmp_path):
    import site

    from orandcar_builder import childproc

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(childproc, "_PACKAGE_ROOT", str(tmp_path))  # a source checkout
    assert childproc.child_env()["PYTHONPATH"] == os.pathsep.join((str(tmp_path), "/elsewhere"))
    monkeypatch.setattr(childproc, "_PACKAGE_ROOT", site.getsitepackages()[0])  # an installed package
    assert childproc.child_env()["PYTHONPATH"] == "/elsewhere"
