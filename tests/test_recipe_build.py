"""Builds from a recipe: the published scene-text prompt byte for byte, the command line over the
recipe, the recipe recorded in the manifest and the card, the card's "How to reproduce" section
giving the same bytes again, a family added by a recipe alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orandcar_builder.card import code_blocks
from orandcar_builder.cli import main
from orandcar_builder.dataset.cardfile import BUILD_KEY, split_card
from orandcar_builder.dataset.recheck import recheck
from orandcar_builder.dataset.validate import validate_folder
from orandcar_builder.families import DEFAULT_FAMILIES as FAMILIES
from orandcar_builder.recipe import parse_recipe, resolve, shipped_recipe_path, tomllib

from .conftest import REPO, SAMPLES, dataset_files

PUBLISHED_QUESTION = ("What is written in the image? Answer this question using the text in the image directly "
                      "without any other context. Answer in short without any other content.")


def _pool(folder: Path, items: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for item in items:
        shutil.copy(SAMPLES / "images" / item["image"], folder / item["image"])
    path = folder / "pool.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def _item(item_id: str, image: str, question: str, answer: str, family: str = "scene_text") -> dict:
    return {"id": item_id, "image": image, "question": question, "answer": answer, "family": family,
            "options": None, "source": {"dataset": "recipe-test", "split": "test", "id": item_id,
                                        "origin": "benchmark"}}


def _questions(folder: Path) -> list[str]:
    out = []
    for config in ("RS_nothink", "rejected"):
        for shard in sorted((folder / config).glob("train-*.parquet")):
            for row in pq.read_table(shard, columns=["qa"]).to_pylist():
                out += [qa["question"] for qa in row["qa"]]
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {p.as_posix(): (folder / p).read_bytes() for p in dataset_files(folder)}


def test_the_shipped_recipe_gives_the_published_scene_text_question(tmp_path):
    pool = _pool(tmp_path / "pool", [_item("w1", "scene_00.png", "What is written in the image?", "HARBOR")])
    run = CliRunner().invoke(main, ["build", str(pool), "-o", str(tmp_path / "OrandCar"), "--work",
                                    str(tmp_path / "work"), "--no-progress", "--recipe", str(shipped_recipe_path()),
                                    "--engine", "rapidocr", "--judge", "none", "--repo", "my-org/OrandCar"])
    assert run.exit_code == 0, run.output
    assert _questions(tmp_path / "OrandCar") == [PUBLISHED_QUESTION]
    prompt = json.loads((tmp_path / "work" / "prompts.jsonl").read_text().splitlines()[0])
    assert prompt["question"] == PUBLISHED_QUESTION  # the text the engine was given is the stored one

    manifest = json.loads((tmp_path / "work" / "manifest.json").read_text())
    assert manifest["recipe_file"] == str(shipped_recipe_path())
    recipe = manifest["recipe"]
    # --engine replaced the recipe's whole engine section (no vllm model left over); --judge none
    # turned the recipe's judge off, and with it the calibration
    assert recipe["engine"] == {"name": "rapidocr"} and recipe["judge"] == {"name": "none"}
    assert recipe["calibration"] == {"size": 0} and recipe["dataset"]["repo"] == "my-org/OrandCar"
    assert recipe["families"]["scene_text"]["separator"] == " "

    card = (tmp_path / "OrandCar" / "README.md").read_text(encoding="utf-8")
    assert 'load_dataset("my-org/OrandCar", "RS_think"' in card  # the real repo from the start
    header, body = split_card(card)
    assert header[BUILD_KEY]["recipe"] == recipe
    section = body.split("## How to reproduce", 1)[1].split("\n## ", 1)[0]
    assert "(a recipe file with the command line applied over it)" in " ".join(section.split())
    toml_blocks = [text for info, text in code_blocks(section) if info == "toml"]
    assert len(toml_blocks) == 1 and tomllib.loads(toml_blocks[0]) == recipe
    assert "orandcar build pool.jsonl -o OrandCar --recipe recipe.toml" in section
    assert '| `orandcar-builder` | `' in section


def test_the_command_line_over_a_recipe():
    base = parse_recipe('[engine]\nname = "vllm"\nmodel = "m"\nmax_tokens = 9\n[judge]\nname = "same"\n'
                        '[calibration]\nsize = 60\n[dataset]\nrepo = "a/b"\n')
    same = resolve(base)
    assert same.engine == {"name": "vllm", "model": "m", "max_tokens": 9} and same.calibration == 60
    assert same.judge == {"name": "same"} and same.repo == "a/b"
    # options alone are merged over the recipe's engine
    merged = resolve(base, engine_options={"max_tokens": 5, "seed": 1})
    assert merged.engine == {"name": "vllm", "model": "m", "max_tokens": 5, "seed": 1}
    # a named engine replaces the whole section
    assert resolve(base, engine="replay", engine_options={"replay": "g.jsonl"}).engine == {"name": "replay",
                                                                                          "replay": "g.jsonl"}
    assert resolve(base, judge="none").calibration == 0
    assert resolve(base, judge="none", calibration=3).calibration == 3
    assert resolve(base, repo="c/d").repo == "c/d" and base.repo == "a/b"
    # no recipe: the defaults the command line always had
    plain = resolve(None)
    assert plain.engine == {"name": "rapidocr"} and plain.judge == {"name": "none"} and plain.calibration == 0
    assert {n: f.instruction for n, f in plain.families.items()} == {n: f.instruction for n, f in FAMILIES.items()}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, ocr_engine) -> tuple[Path, Path]:
    """The sample pool and a replay file of the rapidocr engine's answers to it, in one folder."""
    from orandcar_builder.pipeline import build

    root = tmp_path_factory.mktemp("recipe_recorded")
    pool = root / "pool.jsonl"
    shutil.copy(SAMPLES / "pool.jsonl", pool)
    shutil.copytree(SAMPLES / "images", root / "images")
    build(pool, root / "first", work=root / "w0", engine=ocr_engine, progress=False,
          export_generations=root / "gens.jsonl")
    return pool, root / "gens.jsonl"


def test_the_card_says_how_to_reproduce_it_and_that_gives_the_same_bytes(recorded, tmp_path):
    pool, recorded_gens = recorded
    gens = pool.parent / "answers.jsonl"  # the recordings without the question they were made for
    gens.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "question"}) + "\n"
                            for line in recorded_gens.read_text().splitlines()))
    recipe = tmp_path / "mine.toml"
    recipe.write_text(f'[dataset]\nrepo = "my-org/OrandCar"\n[engine]\nname = "replay"\nreplay = "{gens}"\n'
                      '[families.vqa]\ninstruction = "One word."\nseparator = " "\n')
    first = CliRunner().invoke(main, ["build", str(pool), "-o", str(tmp_path / "A"), "--work", str(tmp_path / "wa"),
                                      "--no-progress", "--recipe", str(recipe)])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(main, ["build", str(pool), "-o", str(tmp_path / "B"), "--work", str(tmp_path / "wb"),
                                      "--no-progress", "--recipe", str(recipe)])
    assert again.exit_code == 0 and _files(tmp_path / "A") == _files(tmp_path / "B")  # same recipe, same bytes
    assert "What colour is the circle? One word." in _questions(tmp_path / "A")

    # follow the card: its recipe saved as recipe.toml beside the pool, its command run there
    card = (tmp_path / "A" / "README.md").read_text(encoding="utf-8")
    section = card.split("## How to reproduce", 1)[1].split("\n## ", 1)[0]
    blocks = dict((info, text) for info, text in code_blocks(section))
    where = pool.parent
    (where / "recipe.toml").write_text(blocks["toml"], encoding="utf-8")
    command = blocks["sh"].strip().splitlines()[-1].split()
    assert command[:2] == ["orandcar", "build"] and "replay = \"answers.jsonl\"" in blocks["toml"]  # no path of this machine
    env = {k: v for k, v in __import__("os").environ.items()}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-m", "orandcar_builder.cli", *command[1:], "--work", "w-card",
                           "--no-progress"], cwd=where, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _files(where / "OrandCar") == _files(tmp_path / "A")


def test_a_family_added_by_a_recipe_alone(tmp_path, recorded):
    pool = _pool(tmp_path / "pool", [_item("r1", "scene_00.png", "What is the shop's name?", "HARBOR",
                                           family="shop_sign"),
                                     _item("r2", "scene_01.png", "What is the shop's name?", "nothing",
                                           family="shop_sign")])
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps({"id": i, "text": t, "finish_reason": "stop"}) + "\n"
                            for i, t in (("r1", "HARBOR"), ("r2", "Bakery"))))
    recipe = tmp_path / "signs.toml"
    recipe.write_text('[engine]\nname = "replay"\nreplay = "' + str(gens) + '"\n'
                      '[families.shop_sign]\ninstruction = "Name the shop."\nseparator = " "\nrule = "exact"\n')
    run = CliRunner().invoke(main, ["build", str(pool), "-o", str(tmp_path / "Signs"), "--work", str(tmp_path / "w"),
                                    "--no-progress", "--recipe", str(recipe)])
    assert run.exit_code == 0, run.output
    assert "shop_sign" not in FAMILIES  # the code's registry is a value no build changes
    assert _questions(tmp_path / "Signs") == ["What is the shop's name? Name the shop."] * 2
    report = json.loads((tmp_path / "w" / "report.json").read_text())
    assert report["rules_by_family"]["shop_sign"] == ["exact"]
    assert report["families"]["shop_sign"]["accepted"] == 1 and report["families"]["shop_sign"]["rejected"] == 1
    # validate and recheck, later and without the recipe, know the family from the card
    assert validate_folder(tmp_path / "Signs") == []
    assert recheck(tmp_path / "Signs").ok
    assert recheck(tmp_path / "Signs", workers=2).ok  # the card's families reach the worker processes
    validated = CliRunner().invoke(main, ["validate", str(tmp_path / "Signs")])
    assert validated.exit_code == 0, validated.output


def test_a_build_refuses_a_bad_recipe_with_one_error_line(tmp_path):
    recipe = tmp_path / "bad.toml"
    recipe.write_text('[engine]\nname = "rapidocr"\n\n[families.scene_text]\nseparatr = " "\n')
    run = CliRunner().invoke(main, ["build", str(SAMPLES / "pool.jsonl"), "-o", str(tmp_path / "out"),
                                    "--work", str(tmp_path / "w"), "--recipe", str(recipe)])
    assert run.exit_code == 2
    assert run.output.strip().splitlines() == [
        f"error: {recipe}: 1 problem(s): line 5: unknown key 'separatr' in [families.scene_text]; did you mean "
        "'separator'? (known: instruction, separator, rule, description)"]
    assert not (tmp_path / "out").exists()
    bad_repo = CliRunner().invoke(main, ["build", str(SAMPLES / "pool.jsonl"), "-o", str(tmp_path / "out"),
                                         "--work", str(tmp_path / "w"), "--repo", "OrandCar"])
    assert bad_repo.exit_code == 2 and "repo id 'OrandCar' is not ORG/NAME" in bad_repo.output


# -- the CPU recipe, and what the card says about the code that built it ------------------------------

def _reproduce_section(folder: Path) -> str:
    card = (folder / "README.md").read_text(encoding="utf-8")
    return card.split("## How to reproduce", 1)[1].split("\n## ", 1)[0]


def test_the_cpu_recipe_builds_the_samples_as_a_newcomer_runs_it(tmp_path):
    """`orandcar build samples/pool.jsonl -o OUT --recipe recipes/cpu.toml`, run from the checkout's
    root as its comment says: it builds, validates, and asks the published dataset's questions."""
    from orandcar_builder.recipe import CPU_RECIPE, read_recipe

    cpu, published = read_recipe(shipped_recipe_path(CPU_RECIPE)), read_recipe(shipped_recipe_path())
    assert shipped_recipe_path(CPU_RECIPE) == REPO / "recipes" / "cpu.toml"
    assert cpu.engine == {"name": "rapidocr"} and cpu.judge == {"name": "none"} and cpu.calibration == 0
    assert cpu.families == published.families  # every family asked as the published dataset asks it
    assert f"--recipe recipes/{CPU_RECIPE}" in shipped_recipe_path(CPU_RECIPE).read_text(encoding="utf-8")
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO)}
    out = tmp_path / "OrandCar-cpu"
    done = subprocess.run([sys.executable, "-m", "orandcar_builder.cli", "build", "samples/pool.jsonl", "-o", str(out),
                           "--work", str(tmp_path / "work"), "--recipe", f"recipes/{CPU_RECIPE}", "--no-progress"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "validation: ok" in done.stdout and validate_folder(out) == []
    questions = _questions(out)
    scene = [q for q in questions if q.endswith(published.families["scene_text"].instruction)]
    assert scene and all(" Answer this question using the text" in q for q in scene)
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert report["accepted"] > 0 and report["recipe"]["engine"] == {"name": "rapidocr"}
    section = _reproduce_section(out)
    assert 'pip install -c constraints.txt ".[ocr]"' in section and "orandcar-builder==" not in section


@pytest.fixture(scope="module")
def small_build_inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("provenance")
    pool = _pool(root / "pool", [_item("w1", "scene_00.png", "What is written in the image?", "HARBOR")])
    gens = root / "gens.jsonl"
    gens.write_text(json.dumps({"id": "w1", "text": "HARBOR", "finish_reason": "stop"}) + "\n")
    return pool, gens


def _build_with(tmp_path: Path, inputs, recipe_text: str, monkeypatch, commit: str):
    pool, gens = inputs
    monkeypatch.setenv("ORANDCAR_SOURCE_COMMIT", commit)
    recipe = tmp_path / "r.toml"
    recipe.write_text(recipe_text.replace("GENS", str(gens)))
    return CliRunner().invoke(main, ["build", str(pool), "-o", str(tmp_path / "out"), "--work", str(tmp_path / "w"),
                                     "--no-progress", "--recipe", str(recipe)])


def test_the_card_names_the_commit_and_how_to_install_it(tmp_path, small_build_inputs, monkeypatch):
    commit, extras = "0123456789abcdef0123456789abcdef01234567", ""  # the replay engine needs no extra
    run = _build_with(tmp_path, small_build_inputs, '[engine]\nname = "replay"\nreplay = "GENS"\n', monkeypatch,
                      commit.upper())
    assert run.exit_code == 0, run.output
    section = _reproduce_section(tmp_path / "out")
    from orandcar_builder import __version__

    assert f"It was built by `orandcar-builder` `{__version__}` from commit `{commit}` of its repository." in section
    assert "not yet committed" not in section and "orandcar-builder==" not in section
    (shell,) = [text for info, text in code_blocks(section) if info == "sh"]
    lines = shell.strip().splitlines()
    assert lines[0].startswith(f"git checkout {commit}")
    assert lines[1].startswith(f'pip install -c constraints.txt ".{extras}"')
    assert f"dist/orandcar_builder-{__version__}-py3-none-any.whl{extras}" in lines[2]
    assert lines[-1].startswith("orandcar build pool.jsonl -o ")
    report = json.loads((tmp_path / "w" / "report.json").read_text())
    assert report["reproduce"]["source"] == {"commit": commit, "modified": False}


def test_a_card_without_a_known_commit_says_so(tmp_path, small_build_inputs, monkeypatch):
    run = _build_with(tmp_path, small_build_inputs, '[engine]\nname = "replay"\nreplay = "GENS"\n', monkeypatch,
                      "none")
    assert run.exit_code == 0, run.output
    section = _reproduce_section(tmp_path / "out")
    assert "the commit of the code it was built from was not recorded" in " ".join(section.split())
    assert "git checkout" not in section and 'pip install -c constraints.txt "."' in section
    # a report that records changes not yet committed: the card says the commit alone may not do
    from orandcar_builder.card import rewrite_card

    report_path = tmp_path / "w" / "report.json"
    report = json.loads(report_path.read_text())
    report["reproduce"]["source"] = {"commit": "abcdef1", "modified": True}
    report_path.write_text(json.dumps(report))
    rewrite_card(tmp_path / "out", report_path)
    text = " ".join(_reproduce_section(tmp_path / "out").split())
    assert "from commit `abcdef1` of its repository, with changes to the package not yet committed" in text


def test_a_source_commit_that_is_not_one_is_one_error_line(tmp_path, small_build_inputs, monkeypatch):
    run = _build_with(tmp_path, small_build_inputs, '[engine]\nname = "replay"\nreplay = "GENS"\n', monkeypatch,
                      "main")
    assert run.exit_code == 2
    errors = [line for line in run.output.splitlines() if line.startswith("error:")]
    assert errors == ["error: ORANDCAR_SOURCE_COMMIT='main': not a git commit (7 to 64 hex digits) nor 'none'"]


@pytest.mark.parametrize("recipe,extras", [
    ({"engine": {"name": "vllm", "model": "m"}, "judge": {"name": "same"}}, ["vllm"]),
    ({"engine": {"name": "vllm"}, "judge": {"name": "rapidocr"}}, ["vllm", "ocr"]),
    ({"engine": {"name": "openai_compat"}, "judge": {"name": "none"}}, []),
    ({"engine": {"name": "rapidocr"}, "judge": {"name": "rapidocr"}}, ["ocr"]),
    ({"engine": "not a table"}, []),
])
def test_the_extras_a_recipe_needs(recipe, extras):
    from orandcar_builder.release import install_commands, recipe_extras

    assert recipe_extras(recipe) == extras
    spec = f"[{','.join(extras)}]" if extras else ""
    assert f'pip install -c constraints.txt ".{spec}"' in install_commands("9.9", None, extras)
