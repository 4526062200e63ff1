"""``orandcar diff`` and the card's Versions section: two builds of the sample pool whose recorded
engine answers differ in three items (one flips to rejected, one to accepted, one changes its
wording and stays accepted), compared as local folders and as tags on the local Hub server."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Optional

import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.dataset.cardfile import BUILD_KEY, VERSIONS_KEY, card_versions, split_card
from orandcar_builder.diff import DiffError, diff, format_diff, open_side, settings_changes
from orandcar_builder.pipeline import build
from orandcar_builder.publish import push
from orandcar_builder.release import VERSIONS_END, VERSIONS_START, versions_section, with_versions
from tests.hubserver import HubServer

from .conftest import SAMPLES

REPO = "orandcar-org/OrandCar-diff"


def _alnum(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory, ocr_engine):
    """(old folder, new folder, what was changed): both built with --engine replay."""
    root = tmp_path_factory.mktemp("diff")
    recorded = root / "recorded.jsonl"
    build(SAMPLES / "pool.jsonl", root / "first", work=root / "w0", engine=ocr_engine, progress=False,
          export_generations=recorded)
    pool = {json.loads(line)["id"]: json.loads(line) for line in (SAMPLES / "pool.jsonl").read_text().splitlines()}
    gens = [json.loads(line) for line in recorded.read_text().splitlines()]
    scene = [g for g in gens if pool[g["id"]]["family"] == "scene_text"]
    right = [g for g in scene if _alnum(g["text"]) == _alnum(pool[g["id"]]["answer"])]
    wrong = [g for g in scene if _alnum(g["text"]) != _alnum(pool[g["id"]]["answer"])]
    to_rejected, reworded, to_accepted = right[0], right[1], wrong[0]
    changes = {"to_rejected": to_rejected["id"], "reworded": reworded["id"], "to_accepted": to_accepted["id"]}
    old_replay, new_replay = root / "old.jsonl", root / "new.jsonl"
    old_replay.write_text(recorded.read_text())
    edited = []
    for g in gens:
        g = dict(g)
        if g["id"] == to_rejected["id"]:
            g["text"] = g["text"] + "X"
        elif g["id"] == reworded["id"]:
            g["text"] = g["text"].swapcase() + "!"
        elif g["id"] == to_accepted["id"]:
            g["text"] = pool[g["id"]]["answer"]
        edited.append(json.dumps(g) + "\n")
    new_replay.write_text("".join(edited))
    from orandcar_builder.engines import create_engine

    old = build(SAMPLES / "pool.jsonl", root / "old", work=root / "w1", progress=False,
                engine=create_engine("replay", replay=old_replay))
    new = build(SAMPLES / "pool.jsonl", root / "new", work=root / "w2", progress=False,
                engine=create_engine("replay", replay=new_replay))
    assert old.ok and new.ok
    return old.out, new.out, changes, pool


def test_diff_of_two_local_builds(two_builds):
    old, new, changes, pool = two_builds
    result = diff(str(old), str(new))
    data = result.to_dict()
    assert not result.identical and data["identical"] is False

    def ids(items):
        return sorted(f"{i['dataset']}/{i['split']}/{i['id']}" for i in items)

    def ref(item_id):
        source = pool[item_id]["source"]
        return f"{source['dataset']}/{source['split']}/{source['id']}"

    flips = data["flipped"]
    assert ids(flips["accepted_to_rejected"]) == [ref(changes["to_rejected"])]
    assert ids(flips["rejected_to_accepted"]) == [ref(changes["to_accepted"])]
    down, up = flips["accepted_to_rejected"][0], flips["rejected_to_accepted"][0]
    assert down["new"]["wrong_vlm"] == down["old"]["answer"] + "X" and down["new"]["reason"] == "wrong_answer"
    assert up["new"]["answer"] == pool[changes["to_accepted"]]["answer"] and up["old"]["reason"] == "wrong_answer"
    assert down["question"].startswith(pool[changes["to_rejected"]]["question"]) and down["family"] == "scene_text"

    accepted, rejected = data["configs"]["RS_nothink"]["qa"], data["configs"]["rejected"]["qa"]
    assert (accepted["old"], accepted["new"]) == (30, 30)
    assert ids(accepted["added_keys"]) == [ref(changes["to_accepted"])]
    assert ids(accepted["removed_keys"]) == [ref(changes["to_rejected"])]
    assert ids(accepted["changed_keys"]) == [ref(changes["reworded"])]  # reworded, still accepted
    assert ids(rejected["added_keys"]) == [ref(changes["to_rejected"])]
    assert ids(rejected["removed_keys"]) == [ref(changes["to_accepted"])]
    assert rejected["changed"] == 0
    assert data["qa"]["changed_keys"] == accepted["changed_keys"] and data["qa"]["added"] == data["qa"]["removed"] == 0
    assert data["configs"]["RS_think"]["qa"]["changed"] == 1
    assert data["acceptance"]["scene_text"]["old"] == data["acceptance"]["scene_text"]["new"]  # one each way
    assert data["acceptance"]["multiple_choice"]["old"] == {"accepted": 3, "rejected": 1, "qa": 4, "share": 0.75}

    # the replay file is part of the engine fingerprint; nothing else in the settings moved
    assert [c["key"] for c in data["settings"]["changed"]] == ["engine.sha256"]
    assert data["summary"] == {
        "qa": {"old": 46, "new": 46, "added": 0, "removed": 0, "changed": 1},  # the flips are counted apart
        "flipped": {"accepted_to_rejected": 1, "rejected_to_accepted": 1},
        "accepted_share": {"old": round(30 / 46, 6), "new": round(30 / 46, 6)},
        "settings_changed": ["engine"],
    }


def test_diff_human_output_and_exit_status(two_builds):
    old, new, changes, pool = two_builds
    run = CliRunner().invoke(main, ["diff", str(old), str(new)])
    assert run.exit_code == 1, run.output
    text = run.output
    assert f"old: {old} (local folder)" in text
    assert re.search(r"^RS_nothink +28 → 29 \(\+1 -0 ~2\) +30 → 30 \(\+1 -1 ~1\)$", text, re.MULTILINE), text
    assert "decisions flipped: 1 rejected → accepted, 1 accepted → rejected" in text
    answer = pool[changes["to_accepted"]]["answer"]
    assert f"→ {answer!r} (by alnum)" in text and "(wrong_answer) →" in text
    assert "settings changed: 1" in text and "engine.sha256:" in text
    assert text.rstrip().endswith("the versions differ")
    same = CliRunner().invoke(main, ["diff", str(old), str(old)])
    assert same.exit_code == 0 and same.output.rstrip().endswith("identical")
    as_json = CliRunner().invoke(main, ["diff", str(old), str(new), "--json"])
    assert as_json.exit_code == 1 and json.loads(as_json.output)["summary"]["qa"]["changed"] == 1


def test_diff_reads_the_settings_the_card_records(two_builds, tmp_path):
    old, _, _, _ = two_builds
    header, _ = split_card((old / "README.md").read_text(encoding="utf-8"))
    block = header[BUILD_KEY]
    assert block["engine"]["kind"] == "replay" and block["rules"]["alnum"] == "1"
    assert block["extraction_version"] and block["cleaning_policy"] and block["judge"] is None
    changed = settings_changes(block, {**block, "rules": {**block["rules"], "alnum": "2"}, "cleaning_policy": "p/9"})
    assert changed == [{"key": "rules.alnum", "old": "1", "new": "2"},
                       {"key": "cleaning_policy", "old": block["cleaning_policy"], "new": "p/9"}]


@pytest.mark.parametrize("spec,message", [
    ("no/such/folder/here", "no such folder, and not ORG/NAME@REV"),
    ("does-not-exist", "no such folder, and not ORG/NAME@REV"),
])
def test_diff_refuses_a_side_it_cannot_read(two_builds, spec, message):
    old = two_builds[0]
    run = CliRunner().invoke(main, ["diff", str(old), spec])
    assert run.exit_code == 2 and message in run.output
    assert len([line for line in run.output.splitlines() if line.startswith("error:")]) == 1


def test_diff_refuses_a_folder_that_is_not_a_dataset(tmp_path):
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n# x\n")
    with pytest.raises(DiffError, match="holds no shards"):
        open_side(str(tmp_path))
    with pytest.raises(DiffError, match="cannot read the dataset card"):
        open_side(str(tmp_path.parent))  # a folder without README.md


def test_versions_section_replaces_only_its_own_part(two_builds):
    old = two_builds[0]
    text = (old / "README.md").read_text(encoding="utf-8")
    assert VERSIONS_START + "\n" + VERSIONS_END + "\n" in text  # a fresh build has none yet
    entry = {"tag": "v1.1", "previous": "v1.0", "qa": {"old": 4, "new": 5, "added": 1, "removed": 0, "changed": 2},
             "flipped": {"accepted_to_rejected": 0, "rejected_to_accepted": 1},
             "accepted_share": {"old": 0.5, "new": 0.6}, "settings_changed": ["engine"]}
    first = {"tag": "v1.0", "previous": None, "qa": {"new": 4}, "accepted_share": {"new": 0.5}}
    updated = with_versions(text, [first, entry])
    header, body = split_card(updated)
    assert card_versions(header) == [first, entry] and header[BUILD_KEY] == split_card(text)[0][BUILD_KEY]
    assert "| `v1.1` | `v1.0` | 5 | 1 | 0 | 2 | 1 | 0 | 50.0% → 60.0% | `engine` |" in body
    assert body.index("| `v1.1`") < body.index("| `v1.0` | – | 4 |")  # newest first
    # everything outside the header and the markers is kept, and setting the same versions again is stable
    assert updated.split(VERSIONS_END, 1)[1] == text.split(VERSIONS_END, 1)[1]
    assert with_versions(updated, [first, entry]) == updated
    assert with_versions(updated, []) == text
    # the contents list the new section where it is
    assert "- [Examples](#examples)\n- [Versions](#versions)\n- [How the data was produced]" in updated
    assert "- [Versions](#versions)" not in text
    assert versions_section([]) == VERSIONS_START + "\n" + VERSIONS_END + "\n"


# -- the Hub side ------------------------------------------------------------------------------------

@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    with HubServer(tmp_path / "hub") as server:
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
        monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
        monkeypatch.setenv("HF_TOKEN", server.token)
        yield server


@pytest.fixture
def released(hub, two_builds, tmp_path):
    """The old build pushed as v1.0, the new one as v1.1 (copies: a tagged push writes the card)."""
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(two_builds[0], old)
    shutil.copytree(two_builds[1], new)
    first = push(old, REPO, tag="v1.0", progress=False)
    second = push(new, REPO, tag="v1.1", progress=False)
    return old, new, first, second


def test_diff_of_two_tags_on_the_hub_equals_the_local_diff(released, two_builds):
    local = diff(str(two_builds[0]), str(two_builds[1])).to_dict()
    remote = diff(f"{REPO}@v1.0", f"{REPO}@v1.1").to_dict()
    assert remote["old"]["kind"] == "hub" and remote["old"]["revision"] == released[2].head
    for key in ("configs", "flipped", "acceptance", "summary"):
        assert remote[key] == local[key], key
    assert remote["settings"]["changed"] == local["settings"]["changed"]
    # a local folder against a tag, and a branch name
    assert diff(str(two_builds[1]), f"{REPO}@main").identical
    assert diff(str(two_builds[0]), REPO).to_dict()["summary"] == local["summary"]


def test_diff_reads_only_the_columns_it_compares(released, hub, monkeypatch):
    import orandcar_builder.diff as diffing

    monkeypatch.setattr(diffing, "HUB_READ_BLOCK", 16 * 1024)  # the sample shards are small; real ones are not
    hub.clear_log()
    diff(f"{REPO}@v1.0", f"{REPO}@v1.1")
    shard_bytes = 2 * sum(p.stat().st_size for p in released[0].glob("*/train-*.parquet"))
    gets = [r for r in hub.calls("resolve", "GET") if r.summary["path"].endswith(".parquet")]
    assert gets and all(r.summary["range"] for r in gets)
    sent = 0
    for r in gets:
        start, end = re.fullmatch(r"bytes=(\d+)-(\d+)", r.summary["range"]).groups()
        sent += int(end) - int(start) + 1
    assert sent < shard_bytes / 3, (sent, shard_bytes)  # the image bytes stay on the Hub


def test_unknown_revision_is_one_error_line(released):
    run = CliRunner().invoke(main, ["diff", f"{REPO}@v1.0", f"{REPO}@v9.9"])
    assert run.exit_code == 2
    assert run.output.strip().splitlines() == [f"error: {REPO}@v9.9: {REPO} has no tag, branch or commit 'v9.9'"]


def test_tagged_pushes_write_the_versions_section(released, hub):
    old, new, first, second = released
    card = hub.read(REPO, "README.md", revision="v1.1").decode("utf-8")
    assert card == (new / "README.md").read_text(encoding="utf-8")  # the folder holds what was published
    header, body = split_card(card)
    versions = header[VERSIONS_KEY]
    assert [v["tag"] for v in versions] == ["v1.0", "v1.1"]
    assert versions[0]["previous"] is None and versions[0]["qa"]["new"] == 46
    assert versions[1]["previous"] == "v1.0"
    assert versions[1]["qa"] == {"old": 46, "new": 46, "added": 0, "removed": 0, "changed": 1}
    assert versions[1]["flipped"] == {"accepted_to_rejected": 1, "rejected_to_accepted": 1}
    assert versions[1]["settings_changed"] == ["engine"]
    section = body.split(VERSIONS_START, 1)[1].split(VERSIONS_END, 1)[0]
    assert "## Versions" in section and "| `v1.1` | `v1.0` | 46 | 0 | 0 | 1 | 1 | 1 | 65.2% → 65.2% | `engine` |" in section
    assert "| `v1.0` | – | 46 |" in section and "first version" in section
    # the v1.0 card itself records only v1.0
    assert card_versions(split_card(hub.read(REPO, "README.md", revision="v1.0").decode())[0])[-1]["tag"] == "v1.0"
    assert "Versions section: v1.1 against v1.0" == second.versions_note


def test_an_untagged_push_keeps_the_versions_of_the_hub(released, hub, two_builds, tmp_path):
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(two_builds[1], rebuilt)  # a fresh card without versions
    result = push(rebuilt, REPO, progress=False)
    card = hub.read(REPO, "README.md").decode("utf-8")
    assert [v["tag"] for v in card_versions(split_card(card)[0])] == ["v1.0", "v1.1"]
    assert result.versions_note and "carried over" in result.versions_note


def test_an_existing_tag_is_refused_with_one_error_line(released, hub):
    old, new, first, second = released
    hub.clear_log()
    run = CliRunner().invoke(main, ["push", str(new), "--repo", REPO, "--tag", "v1.0", "--no-progress"])
    assert run.exit_code == 2
    lines = run.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: tag v1.0 already exists at commit ")
    assert "never moved or overwritten" in lines[0]
    assert hub.repo(REPO).tags == {"v1.0": first.head, "v1.1": second.head}
    assert not [r for r in hub.log if r.method in ("POST", "PUT", "DELETE") and r.route not in ("paths-info",)]


def test_a_third_tag_is_compared_with_the_second(released, two_builds, tmp_path, hub):
    third = tmp_path / "third"
    shutil.copytree(two_builds[0], third)  # back to the old answers
    result = push(third, REPO, tag="v1.2", progress=False)
    versions = card_versions(split_card(hub.read(REPO, "README.md", revision="v1.2").decode())[0])
    assert [v["tag"] for v in versions] == ["v1.0", "v1.1", "v1.2"] and versions[-1]["previous"] == "v1.1"
    assert versions[-1]["flipped"] == {"accepted_to_rejected": 1, "rejected_to_accepted": 1}
    assert result.tag_created


def test_cli_diff_of_two_tags_as_a_user_runs_it(released, hub, tmp_path):
    """The command in a subprocess whose client is configured by HF_ENDPOINT and HF_TOKEN alone,
    allowed to reach only the loopback interface."""
    import subprocess
    import sys

    env = hub.client_env(tmp_path / "hf-home")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    script = ("from tests import hubserver; hubserver.forbid_network()\n"
              "import sys; from orandcar_builder.cli import main; sys.argv[0] = 'orandcar'; main()")
    proc = subprocess.run([sys.executable, "-c", script, "diff", f"{REPO}@v1.0", f"{REPO}@v1.1", "--json"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["old"]["revision"] == released[2].head and data["new"]["revision"] == released[3].head
    assert data["summary"]["flipped"] == {"accepted_to_rejected": 1, "rejected_to_accepted": 1}
    assert hub.token not in proc.stdout + proc.stderr
    # without a token the gated repo cannot be read: one error line that says what to do
    env.pop("HF_TOKEN")
    proc = subprocess.run([sys.executable, "-c", script, "diff", f"{REPO}@v1.0", f"{REPO}@v1.1"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("error:") == 1, proc.stderr[-3000:]
    assert "the dataset is gated" in proc.stderr and "HF_TOKEN" in proc.stderr


def test_rendering_the_card_again_keeps_its_versions(released, two_builds, tmp_path):
    from orandcar_builder.card import rewrite_card

    new = released[1]
    before = card_versions(split_card((new / "README.md").read_text(encoding="utf-8"))[0])
    assert [v["tag"] for v in before] == ["v1.0", "v1.1"]
    rewrite_card(new, two_builds[1].parent / "w2" / "report.json", repo_id=REPO)
    text = (new / "README.md").read_text(encoding="utf-8")
    assert card_versions(split_card(text)[0]) == before and "## Versions" in text
    assert f'load_dataset("{REPO}"' in text


def test_a_dry_run_with_a_tag_plans_the_card_and_writes_nothing(released, two_builds, tmp_path, hub):
    from orandcar_builder.publish import format_push_result

    third = tmp_path / "third"
    shutil.copytree(two_builds[0], third)
    before = (third / "README.md").read_bytes()
    hub.clear_log()
    result = push(third, REPO, tag="v1.2", dry_run=True, progress=False)
    assert (third / "README.md").read_bytes() == before
    assert "README.md" in [c.path for c in result.uploads] and result.tag_created
    assert "card's Versions section: v1.2 against v1.1 (dry run: not written)" in format_push_result(result)
    assert not [r for r in hub.log if r.method in ("POST", "PUT", "DELETE") and r.route != "paths-info"]
    assert "v1.2" not in hub.repo(REPO).tags


def test_items_of_a_longer_pool_are_added_and_none_flips(two_builds, tmp_path):
    from orandcar_builder.engines import create_engine

    old = two_builds[0]
    replay = old.parent / "old.jsonl"
    shorter = build(SAMPLES / "pool.jsonl", tmp_path / "short", work=tmp_path / "w", progress=False, limit=40,
                    engine=create_engine("replay", replay=replay))
    data = diff(str(shorter.out), str(old)).to_dict()
    assert (data["qa"]["old"], data["qa"]["new"], data["qa"]["added"], data["qa"]["removed"]) == (40, 46, 6, 0)
    assert data["qa"]["changed"] == 0 and data["flipped"] == {"accepted_to_rejected": [], "rejected_to_accepted": []}
    assert data["settings"]["changed"] == []  # same engine, rules, extraction, policy and recipe
    back = diff(str(old), str(shorter.out)).summary()
    assert back["qa"]["removed"] == 6 and back["qa"]["added"] == 0


# -- whitespace shown, items matched across a changed instruction -------------------------------------

@pytest.mark.parametrize("value", ["\n", " ", "\t", "\r\n", "\xa0", "\u200b", "\u2028", "", "a'b\"c", "é\n",
                                   None, 0, 1.5, True, ["x\n", " "], {"k": "\xa0\u2028"}])
def test_values_are_shown_with_their_whitespace_and_read_back_exactly(value):
    import ast

    from orandcar_builder.diff import _short

    shown = _short(value)
    assert shown.isprintable() and shown.strip() == shown and shown  # one line, nothing invisible
    read = ast.literal_eval(shown) if isinstance(value, str) else json.loads(shown)
    assert read == value and type(read) is type(value)


def test_distinct_whitespace_is_shown_distinctly_and_a_cut_is_marked_outside_the_quotes():
    import ast

    from orandcar_builder.diff import _short

    spaces = ["\n", " ", "  ", "\t", "\xa0", "\u2009", "\u200b", ""]
    assert len({_short(s) for s in spaces}) == len(spaces)
    assert _short(None) != _short("null") and _short(1) != _short("1")
    long = "word\n" * 30
    shown = _short(long, 12)
    assert shown.endswith("…") and ast.literal_eval(shown[:-1]) == long[:12]


def _instruction_recipe(text: str):
    from orandcar_builder.recipe import parse_recipe, resolve

    return resolve(parse_recipe(text, source="test recipe"))


@pytest.fixture(scope="module")
def reinstructed(tmp_path_factory, ocr_engine):
    """The sample pool built twice with the same engine: the code's families, then a recipe that
    puts a space instead of "\\n" before the scene-text instruction and rewords the multiple-choice
    one (the engine reads only the image, so the answers stay)."""
    root = tmp_path_factory.mktemp("reinstructed")
    old = build(SAMPLES / "pool.jsonl", root / "old", work=root / "w1", engine=ocr_engine, progress=False)
    recipe = _instruction_recipe('format = 1\n[families.scene_text]\nseparator = " "\n'
                                 '[families.multiple_choice]\ninstruction = "Pick one letter.\\tNothing else."\n')
    new = build(SAMPLES / "pool.jsonl", root / "new", work=root / "w2", engine=ocr_engine, progress=False,
                recipe=recipe)
    assert old.ok and new.ok
    return old.out, new.out


def test_a_changed_instruction_changes_the_question_of_each_item_not_its_identity(reinstructed):
    old, new = reinstructed
    pool = [json.loads(line) for line in (SAMPLES / "pool.jsonl").read_text().splitlines()]
    touched = [p for p in pool if p["family"] in ("scene_text", "multiple_choice")]
    data = diff(str(old), str(new)).to_dict()
    assert (data["qa"]["added"], data["qa"]["removed"]) == (0, 0)
    assert data["qa"]["changed"] == len(touched) and data["summary"]["qa"]["changed"] == len(touched)
    assert all(c["added"] == c["removed"] == 0 for config in data["configs"].values() for c in config.values())
    assert data["flipped"] == {"accepted_to_rejected": [], "rejected_to_accepted": []}
    for entry in data["qa"]["changed_keys"]:
        assert entry["changed"] == ["question"], entry
        assert entry["family"] in ("scene_text", "multiple_choice")
        if entry["family"] == "scene_text":
            assert entry["old_question"].replace("\nReply with only", " Reply with only") == entry["question"]
        else:
            assert entry["question"].endswith("\nPick one letter.\tNothing else.")
    # the two questions asked about one image under one source id stay two items
    assert sorted(e["id"] for e in data["qa"]["changed_keys"]).count("0") == 2
    # the settings: exact in --json, whitespace visible in the text
    changed = {c["key"]: (c["old"], c["new"]) for c in data["settings"]["changed"]}
    assert changed["recipe.families.scene_text.separator"] == ("\n", " ")
    text = CliRunner().invoke(main, ["diff", str(old), str(new)]).output
    assert "recipe.families.scene_text.separator: '\\n' → ' '" in text, text
    assert "'Pick one letter.\\tNothing else.'" in text
    assert f"QA items changed: {len(touched)} (by part: question {len(touched)})" in text
    assert re.search(r"^  changed \(question changed\)  scene_text  orandcar-samples/test/\d+  'What is written", text,
                     re.MULTILINE), text
    assert re.search(r"^      question: …'.*\?\\nReply with only.*'… → …'.*\? Reply with only.*'…$", text, re.MULTILINE)


# Small dataset folders written directly: the cases a real pool rarely shows.

def _qa_folder(path: Path, rows: dict, families: Optional[dict] = None) -> Path:
    """A dataset folder: ``rows`` is config -> list of (image sha, [(source, qa item)]); the card
    records ``families`` (name -> (separator, instruction)) when given."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    header = {"license": "other"}
    if families is not None:
        header[BUILD_KEY] = {"recipe": {"format": 1, "families": {
            name: {"rule": "exact", "instruction": instruction, "separator": separator}
            for name, (separator, instruction) in families.items()}}}
    path.mkdir(parents=True)
    (path / "README.md").write_text("---\n" + yaml.safe_dump(header) + "---\n# test\n", encoding="utf-8")
    for config, config_rows in rows.items():
        if not config_rows:
            continue
        table = pa.Table.from_pylist([{"image_sha256": sha, "qa": [item for _, item in items],
                                       "clean_meta": {"policy": "p/1", "sources": [source for source, _ in items]}}
                                      for sha, items in config_rows])
        (path / config).mkdir()
        pq.write_table(table, path / config / "train-00000-of-00001.parquet")
    return path


def _source(item_id: str, family: str = "generic") -> dict:
    return {"dataset": "d", "split": "test", "id": item_id, "family": family}


def _accepted(question: str, answer: str = "a") -> dict:
    return {"question": question, "answer": answer, "org_answer": answer, "verifier": "exact"}


def _rejected(question: str, wrong: str = "b") -> dict:
    return {"question": question, "answer": "a", "wrong_vlm": wrong, "reason": "wrong_answer"}


def test_an_item_whose_instruction_changed_and_decision_flipped_is_one_flip(tmp_path):
    families = {"generic": ("\n", "Say it.")}
    old = _qa_folder(tmp_path / "old", {"RS_nothink": [("s1", [(_source("1"), _accepted("Q?\nSay it."))])],
                                        "rejected": []}, families)
    new = _qa_folder(tmp_path / "new", {"RS_nothink": [],
                                        "rejected": [("s1", [(_source("1"), _rejected("Q? Say it briefly."))])]},
                     {"generic": (" ", "Say it briefly.")})
    data = diff(str(old), str(new)).to_dict()
    (flip,) = data["flipped"]["accepted_to_rejected"]
    assert flip["question"] == "Q? Say it briefly." and flip["old_question"] == "Q?\nSay it."
    assert data["qa"]["added"] == data["qa"]["removed"] == 0
    text = format_diff(diff(str(old), str(new)))
    assert "accepted → rejected  generic  d/test/1  'Q? Say it briefly.'  (question changed)" in text


def test_items_are_paired_by_source_and_image_when_the_card_records_no_instruction(tmp_path):
    """The old card records no families, and the new build's instruction is not the code's: the
    questions cannot be cut back to the source question, so an item is paired with the one item of
    the other side with its source and image; where that is ambiguous the items stay added and removed."""
    def rows(instruction):
        return {"RS_nothink": [
            ("s1", [(_source("1"), _accepted(f"One?{instruction}"))]),
            ("s2", [(_source("2"), _accepted(f"Two?{instruction}")), (_source("2"), _accepted(f"Again?{instruction}"))]),
            ("s3", [(_source(""), _accepted(f"No id?{instruction}", answer="x"))]),
        ], "rejected": []}

    old = _qa_folder(tmp_path / "old", rows("\nOld words."))
    new = _qa_folder(tmp_path / "new", rows(" New words."), {"generic": (" ", "New words.")})
    data = diff(str(old), str(new)).to_dict()
    changed = {(e["id"], e["question"]): e for e in data["qa"]["changed_keys"]}
    assert set(changed) == {("1", "One? New words."), ("", "No id? New words.")}
    assert changed[("1", "One? New words.")]["old_question"] == "One?\nOld words."
    assert sorted(e["question"] for e in data["qa"]["added_keys"]) == ["Again? New words.", "Two? New words."]
    assert sorted(e["question"] for e in data["qa"]["removed_keys"]) == ["Again?\nOld words.", "Two?\nOld words."]


def test_a_changed_answer_and_image_are_named_as_parts(tmp_path):
    families = {"generic": ("\n", "Say it.")}
    old = _qa_folder(tmp_path / "old", {"RS_nothink": [("s1", [(_source("1"), _accepted("Q?\nSay it.", "a"))]),
                                                       ("s2", [(_source("2"), _accepted("R?\nSay it."))])]}, families)
    new = _qa_folder(tmp_path / "new", {"RS_nothink": [("s1", [(_source("1"), _accepted("Q?\nSay it.", "a "))]),
                                                       ("s9", [(_source("2"), _accepted("R?\nSay it."))])]}, families)
    data = diff(str(old), str(new)).to_dict()
    parts = {e["id"]: e["changed"] for e in data["qa"]["changed_keys"]}
    assert parts == {"1": ["answer", "org_answer"], "2": ["image"]}
    assert all("old_question" not in e for e in data["qa"]["changed_keys"])
    text = format_diff(diff(str(old), str(new)))
    assert "changed (answer changed, org_answer changed)  generic  d/test/1" in text
