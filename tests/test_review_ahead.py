"""The review page's part of the decisions prepared by a child process (``review.ahead``): the
page is the same byte for byte whether the part came from the child or was made in the page's
process; the child's answer is used only for the same file and samples; a child that fails or
never answers costs nothing but time; a build that stops leaves no child behind."""

from __future__ import annotations

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
        if change == "decisions":  # the same bytes written again: another file for the page's purpose
            data = decisions.read_bytes()
            time.sleep(0.01)
            decisions.write_bytes(data)
        page = render_review(judged_build.out, judged_build.work, ahead=ahead)
    assert len(made_here) == 1  # made here again
    assert page == render_review(judged_build.out, judged_build.work)


@pytest.mark.parametrize("program", ["import sys; sys.exit(3)", "import sys; sys.stdout.write('not a pickle')",
                                     "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
def test_a_child_that_fails_leaves_the_page_to_this_process(judged_build, made_here, monkeypatch, program):  # noqa: F811
    monkeypatch.setattr(ahead_module, "_CHILD", program)
    with _started(judged_build) as ahead:
        page = render_review(judged_build.out, judged_build.work, ahead=ahead)
    assert len(made_here) == 1
    assert page == render_review(judged_build.out, judged_build.work)


def test_stop_ends_a_child_still_running(judged_build, monkeypatch):  # noqa: F811
    children = []
    original = subprocess.Popen
    monkeypatch.setattr(ahead_module, "_CHILD", "import time; time.sleep(60)")
    monkeypatch.setattr(ahead_module.subprocess, "Popen", lambda *a, **k: children.append(original(*a, **k))
                        or children[-1])
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


def test_a_build_that_stops_leaves_no_child(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    monkeypatch.setattr(ahead_module, "AHEAD_MIN_DECISIONS", 0)
    monkeypatch.setattr(ahead_module, "_CHILD", "import time; time.sleep(60)")
    children = []
    original = subprocess.Popen
    monkeypatch.setattr(ahead_module.subprocess, "Popen", lambda *a, **k: children.append(original(*a, **k))
                        or children[-1])

    def interrupted(self, *args):
        raise KeyboardInterrupt

    monkeypatch.setattr(card_stage.CardStage, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _build(pool, replay, tmp_path / "b")
    assert len(children) == 1 and children[0].poll() is not None
    assert not (tmp_path / "b" / "out").exists()
