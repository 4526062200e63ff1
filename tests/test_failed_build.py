"""A failed build (every or most generations failed, nothing admitted, no row written) ends with one
``error:`` line naming the counts and the top reasons, exits 2, and leaves the old dataset
byte-identical."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.pipeline import BuildConfig, BuildError, BuildFailed, build
from orandcar_builder.recipe import RecipeError, parse_recipe, resolve
from tests.fake_openai_server import FakeOpenAIServer

from .conftest import write_png, write_pool

N = 4


def _pool(root: Path, n: int = N) -> Path:
    lines = []
    for i in range(n):
        write_png(root / "img" / f"{i}.png", colour=(50 * i, 100, 30))
        lines.append({"id": f"q{i}", "image": f"img/{i}.png", "question": f"What is written on sign {i}?",
                      "answer": f"word{i}", "family": "scene_text"})
    return write_pool(root / "pool.jsonl", lines)


def _replay(path: Path, ids) -> Path:
    """A replay file answering only ``ids``."""
    path.write_text("".join(json.dumps({"id": i, "text": f"word{i[1:]}", "finish_reason": "stop"}) + "\n"
                            for i in ids))
    return path


def _digest(folder: Path) -> dict:
    """Every file under ``folder`` (hidden ones too) and its sha256; also what the build keeps beside
    it (its staged and old copies: none may be left)."""
    files = {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(folder.rglob("*")) if p.is_file()}
    return {"files": files, "beside": sorted(p.name for p in folder.parent.glob(f".{folder.name}*"))}


def _cli(*args):
    if args and args[0] == "build":
        args = (*args, "--admit-workers", "1")
    return CliRunner().invoke(main, [str(a) for a in args])


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def test_a_rebuild_whose_engine_refuses_every_request_keeps_the_old_dataset(tmp_path):
    """An expired key: every request gets HTTP 401."""
    pool = _pool(tmp_path / "pool")
    out, work = tmp_path / "OrandCar", tmp_path / "work"
    with FakeOpenAIServer(api_key="good-key-123") as server:
        common = ["build", pool, "-o", out, "--work", work, "--no-progress", "--engine", "openai_compat",
                  "--engine-option", "model=fake-vlm", "--engine-option", f"base_urls={server.url}"]
        first = _cli(*common, "--engine-option", "api_key=good-key-123")
        assert first.exit_code == 0, first.output
        before = _digest(out)
        again = _cli(*common, "--engine-option", "api_key=expired-key-456", "--no-cache")
    assert again.exit_code == 2, again.output
    assert "validation: ok" not in again.output and "Traceback" not in again.output
    [line] = _error_lines(again.output)
    assert f"{N} of {N} admitted items got no answer" in line and "HTTP 401" in line
    assert f"{N} x " in line and "left as it was" in line
    assert _digest(out) == before
    report = json.loads((work / "report.json").read_text())
    assert report["failed"] == N and "build_failed" in report


@pytest.mark.parametrize("answered, share, fails", [
    (["q0"], None, True),  # 3 of 4 failed: more than the default half
    (["q0", "q1"], None, False),  # 2 of 4: exactly half is still a build
    (["q0"], 0.8, False),  # a share the user allows
    (["q0", "q1", "q2"], 0.0, True),  # 0: any failure fails the build
    ([], 1.0, True),  # 1 turns the share off, but a build that writes no row still fails
])
def test_the_failed_share_rule(tmp_path, answered, share, fails):
    pool = _pool(tmp_path / "pool")
    out = tmp_path / "OrandCar"
    good = build(pool, out, work=tmp_path / "good", engine_name="replay", progress=False, admit_workers=1,
                 engine_options={"replay": str(_replay(tmp_path / "all.jsonl", [f"q{i}" for i in range(N)]))})
    assert good.ok
    before = _digest(out)
    settings = {"admit_workers": 1} if share is None else {"admit_workers": 1, "max_failed_share": share}
    replay = str(_replay(tmp_path / "some.jsonl", answered))
    if not fails:
        result = build(pool, out, work=tmp_path / "work", engine_name="replay", engine_options={"replay": replay},
                       progress=False, **settings)
        assert result.ok and result.report["failed"] == N - len(answered)
        return
    with pytest.raises(BuildFailed) as caught:
        build(pool, out, work=tmp_path / "work", engine_name="replay", engine_options={"replay": replay},
              progress=False, **settings)
    message = str(caught.value)
    assert f"{N - len(answered)} of {N} admitted items got no answer" in message
    assert "ReplayMissingError" in message and "no recording for 1 request(s): <id>" in message
    assert caught.value.report["failed"] == N - len(answered)
    assert _digest(out) == before


def test_a_build_that_admits_nothing_fails_with_the_drop_reasons(tmp_path):
    pool = _pool(tmp_path / "pool")
    out = tmp_path / "OrandCar"
    assert _cli("build", pool, "-o", out, "--work", tmp_path / "w0", "--no-progress").exit_code == 0
    before = _digest(out)
    # a pool in another folder naming the same images by ../ paths: every line is outside the pool
    lines = [json.loads(x) for x in pool.read_text().splitlines()]
    lines = [{**x, "image": f"../pool/{x['image']}"} for x in lines] + ["not json", {"id": "q9"}]
    other = write_pool(tmp_path / "other" / "pool.jsonl", lines)
    result = _cli("build", other, "-o", out, "--work", tmp_path / "w1", "--no-progress")
    assert result.exit_code == 2, result.output
    [line] = _error_lines(result.output)
    assert "no pool line was admitted: 6 dropped" in line
    assert f"{N} x image_outside_pool" in line and "1 x malformed_json" in line and "--allow-outside-paths" in line
    assert "Traceback" not in result.output and "validation: ok" not in result.output
    assert _digest(out) == before


def test_an_empty_pool_is_a_failed_build(tmp_path):
    pool = write_pool(tmp_path / "pool.jsonl", [])
    result = _cli("build", pool, "-o", tmp_path / "out", "--work", tmp_path / "w", "--no-progress")
    assert result.exit_code == 2
    [line] = _error_lines(result.output)
    assert "no item to build" in line and "nothing was written" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_share_is_a_checked_setting(tmp_path):
    for bad in (-0.1, 1.5, "half", True):
        with pytest.raises(BuildError, match="max_failed_share"):
            BuildConfig(pool=tmp_path / "p", out=tmp_path / "o", max_failed_share=bad)
    recipe = parse_recipe("format = 1\n[build]\nmax_failed_share = 0.9\n")
    config = BuildConfig(pool=tmp_path / "p", out=tmp_path / "o").with_recipe(resolve(recipe))
    assert config.max_failed_share == 0.9
    assert resolve(recipe).to_dict()["build"] == {"max_failed_share": 0.9}
    with pytest.raises(RecipeError, match="line 3"):
        parse_recipe("format = 1\n[build]\nmax_failed_share = 2\n")
    with pytest.raises(RecipeError, match="unknown key 'max_failed'"):
        parse_recipe("format = 1\n[build]\nmax_failed = 0.2\n")
    result = _cli("build", tmp_path / "p", "-o", tmp_path / "o", "--max-failed-share", "3")
    assert result.exit_code == 2 and "--max-failed-share" in result.output


def test_the_flag_wins_over_the_recipe(tmp_path):
    pool = _pool(tmp_path / "pool")
    (tmp_path / "recipe.toml").write_text("format = 1\n[build]\nmax_failed_share = 0.0\n")
    replay = _replay(tmp_path / "some.jsonl", ["q0", "q1", "q2"])
    args = ["build", pool, "-o", tmp_path / "out", "--work", tmp_path / "w", "--no-progress", "--engine", "replay",
            "--replay", replay, "--recipe", tmp_path / "recipe.toml"]
    assert _cli(*args).exit_code == 2  # the recipe allows no failure
    result = _cli(*args, "--max-failed-share", "0.5")
    assert result.exit_code == 0, result.output


def test_an_import_of_nothing_usable_fails_and_keeps_the_old_pool(tmp_path):
    """Every record unusable (labels without images, an empty label): exit 2, one error line with
    the top problem reasons, and the pool an earlier import wrote is left as it was."""
    src = tmp_path / "src"
    (src / "IMG").mkdir(parents=True)
    (src / "label").mkdir()
    write_png(src / "IMG" / "1.png")
    (src / "label" / "1.txt").write_text("HELLO")
    out = tmp_path / "pool.jsonl"
    good = _cli("import", "folder", src, "-o", out, "--family", "scene_text")
    assert good.exit_code == 0 and out.read_text().count("\n") == 1, good.output
    before = out.read_bytes()
    (src / "label" / "1.txt").write_text("")  # now empty
    (src / "label" / "2.txt").write_text("WORLD")  # no image
    (src / "label" / "3.txt").write_text("AGAIN")  # no image
    result = _cli("import", "folder", src, "-o", out, "--family", "scene_text")
    assert result.exit_code == 2, result.output
    [line] = _error_lines(result.output)
    assert "no record could be imported (3 read, 3 problem(s)" in line and f"{out} was left as it was" in line
    assert out.read_bytes() == before
    fresh = _cli("import", "folder", src, "-o", tmp_path / "new.jsonl", "--family", "scene_text")
    assert fresh.exit_code == 2 and not (tmp_path / "new.jsonl").exists()
