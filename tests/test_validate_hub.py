"""``orandcar validate ORG/NAME@REV`` and ``push``'s read-back, against the local Hub server.

The sample build is pushed once (tag v1.0); each corruption of tests/test_validate.py is then
applied to a copy of the folder and committed, as it is, to a branch of its own (bypassing
``push``'s validation, as a hand edit or another tool would), and the branch is validated on the
Hub: with ``--exhaustive`` the problems equal the local folder's, line for line; with footers
only they are a part of them (those a footer, the listing and the card show).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.dataset.hubcard import hub_card_problems
from orandcar_builder.dataset.layout import MARKER
from orandcar_builder.dataset.validate import SCHEMA_DIR, json_schema, validate_folder
from orandcar_builder.publish import push
from orandcar_builder.remote import FOOTER_BLOCK, HubReadError, validate_hub
from orandcar_builder.vocab import CONFIGS
from tests import test_validate
from tests.hubserver import HubServer, silent_endpoint

REPO = "orandcar-org/OrandCar-ci"
TESTS = Path(__file__).resolve().parent

# Row-level corruptions: only --exhaustive reads rows (their footers and the card still show the
# changed file sizes).
ROW_CASES = {"corrupt_sha", "corrupt_image_bytes", "misalign_sources", "bad_reason", "empty_question",
             "unknown_verifier", "duplicate_image_row"}


def remove_example(folder):
    (folder / "examples" / "rejected-1.png").unlink()


def stale_num_examples(folder):
    readme = folder / "README.md"
    text = readme.read_text()
    readme.write_text(re.sub(r"(- name: train\n\s+num_bytes: \d+\n\s+num_examples: )(\d+)",
                             lambda m: m.group(1) + str(int(m.group(2)) + 1), text, count=1))


def nested_shard(folder):
    shard = test_validate._shard(folder, "rejected")
    (folder / "rejected" / "old").mkdir()
    shutil.copy(shard, folder / "rejected" / "old" / shard.name)


CASES = {**{f: expected for f, expected in test_validate.CORRUPTIONS.items()},
         test_validate.duplicate_image_row:
             "rejected/train-00000-of-00001.parquet row 13 field image_sha256: image already",
         remove_example: "README.md: links to examples/rejected-1.png, which the folder does not hold",
         stale_num_examples: "README.md: dataset_info of RS_think: num_examples",
         nested_shard: "rejected/old/: unexpected file"}


# -- the Hub, with the sample build published -----------------------------------------------------

@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The test hub, the in-process client pointed at it (module-wide) and HF_TOKEN set."""
    import huggingface_hub.constants as constants

    root = tmp_path_factory.mktemp("hub")
    with HubServer(root / "hub") as server, pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "ENDPOINT", server.url)
        patch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
        patch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        patch.setattr(constants, "HF_TOKEN_PATH", str(root / "hf-home" / "token"))
        patch.setattr(constants, "HF_STORED_TOKENS_PATH", str(root / "hf-home" / "stored_tokens"))
        patch.setenv("HF_TOKEN", server.token)
        yield server


@pytest.fixture(scope="module")
def published(hub, built_sample, tmp_path_factory):
    """The sample build pushed as v1.0 (a copy: a tagged push writes the card's Versions section)."""
    folder = tmp_path_factory.mktemp("published") / "OrandCar"
    shutil.copytree(built_sample, folder)
    result = push(folder, REPO, tag="v1.0", progress=False)
    assert result.problems == (), result.problems
    return folder, result


def _files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file() and p.name != MARKER}


def commit_folder(hub: HubServer, folder: Path, branch: str) -> str:
    """Make ``branch`` (from main) hold exactly ``folder``'s files, whatever they are: the commit id."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    api = HfApi()
    api.create_branch(REPO, repo_type="dataset", branch=branch)
    remote = set(hub.files(REPO, branch)) - {".gitattributes"}
    local = _files(folder)
    operations = [CommitOperationAdd(path, str(source)) for path, source in sorted(local.items())
                  if path not in hub.files(REPO, branch)
                  or hub.read(REPO, path, branch) != source.read_bytes()]
    operations += [CommitOperationDelete(path) for path in sorted(remote - set(local))]
    return api.create_commit(REPO, operations, commit_message=f"{branch}: edited by hand", repo_type="dataset",
                             revision=branch).oid


# -- each form of REV ---------------------------------------------------------------------------------

def test_each_form_of_revision_validates(published, hub):
    from huggingface_hub import CommitOperationAdd, HfApi

    folder, result = published
    api = HfApi()
    api.create_branch(REPO, repo_type="dataset", branch="dev", revision=result.head)
    card = (folder / "README.md").read_text(encoding="utf-8") + "\nA contributor's note.\n"
    pr = api.create_commit(REPO, [CommitOperationAdd("README.md", card.encode())], commit_message="note",
                           repo_type="dataset", create_pr=True)
    assert pr.pr_revision == "refs/pr/1"
    pr_head = hub.repo(REPO).pulls["refs/pr/1"]
    forms = {REPO: result.head, f"{REPO}@main": result.head, f"{REPO}@v1.0": result.head,
             f"{REPO}@dev": result.head, f"{REPO}@{result.head}": result.head, f"{REPO}@refs/pr/1": pr_head}
    for spec, commit in forms.items():
        run = CliRunner().invoke(main, ["validate", spec])
        assert run.exit_code == 0, (spec, run.output)
        assert run.stdout.strip() == f"{spec} (commit {commit[:12]}): ok"
        assert "read the footers of 3 shard(s), not their rows" in run.stderr  # three configs, one shard each
    assert pr_head != result.head and hub.read(REPO, "README.md", "refs/pr/1") == card.encode()


def test_a_pull_request_that_breaks_the_card_fails(published, hub):
    from huggingface_hub import CommitOperationAdd, HfApi

    folder, _ = published
    card = (folder / "README.md").read_text(encoding="utf-8").replace("num_examples:", "num_examples: 1 #", 1)
    HfApi().create_commit(REPO, [CommitOperationAdd("README.md", card.encode())], commit_message="edit",
                          repo_type="dataset", create_pr=True)
    number = max(int(name.rsplit("/", 1)[1]) for name in hub.repo(REPO).pulls)
    run = CliRunner().invoke(main, ["validate", f"{REPO}@refs/pr/{number}"])
    assert run.exit_code == 1, run.output
    assert "README.md: dataset_info of RS_think: num_examples 1" in run.stdout
    assert f"problem(s) in {REPO}@refs/pr/{number} (commit " in run.stderr


@pytest.mark.parametrize("spec,message", [
    (f"{REPO}@v9.9", f"{REPO}@v9.9: {REPO} has no tag, branch or commit 'v9.9'"),
    (f"{REPO}@refs/pr/99", f"{REPO}@refs/pr/99: {REPO} has no tag, branch or commit 'refs/pr/99'"),
    ("orandcar-org/no-such-repo@main", "no dataset repo orandcar-org/no-such-repo"),
    ("not a folder or a repo", "not a folder"),
])
def test_a_revision_that_cannot_be_read_is_one_error_line(published, spec, message):
    run = CliRunner().invoke(main, ["validate", spec])
    assert run.exit_code == 2, run.output
    lines = run.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_a_card_too_large_to_be_one_is_not_read(published, hub, monkeypatch):
    import orandcar_builder.remote as remote

    monkeypatch.setattr(remote, "MAX_CARD_BYTES", 1000)
    hub.clear_log()
    checked = validate_hub(f"{REPO}@v1.0")
    assert checked.problems[0].startswith("README.md: ")
    assert "more than a card holds (1,000); not read" in checked.problems[0]
    assert not [r for r in hub.calls("resolve") if r.summary["path"] == "README.md"]
    run = CliRunner().invoke(main, ["validate", f"{REPO}@v1.0", "--tracked"])
    assert run.exit_code == 2 and "--tracked checks a folder in a git checkout" in run.output


def test_a_wrong_token_is_refused_and_never_printed(published, hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_validate_token_0123456789")
    run = CliRunner().invoke(main, ["validate", f"{REPO}@v1.0"])
    assert run.exit_code == 2 and "HTTP 401" in run.output
    assert "hf_wrong_validate_token_0123456789" not in run.output and hub.token not in run.output


# -- the same checks as a folder ------------------------------------------------------------------

@pytest.mark.parametrize("corrupt", list(CASES), ids=lambda f: f.__name__)
def test_a_repo_broken_on_the_hub_reads_as_the_broken_folder(published, hub, tmp_path, corrupt):
    folder = tmp_path / "OrandCar"
    shutil.copytree(published[0], folder)
    corrupt(folder)
    local = validate_folder(folder)
    assert any(p.startswith(CASES[corrupt]) for p in local), local
    commit = commit_folder(hub, folder, f"broken-{corrupt.__name__}")
    spec = f"{REPO}@broken-{corrupt.__name__}"

    full = validate_hub(spec, exhaustive=True)
    assert full.commit == commit and full.problems == local

    # footers only: every problem but those of rows and of their in-memory size (num_bytes), which
    # only rows give (a config without shards holds 0 bytes of rows: that much the listing says)
    with_rows = "|".join(c for c in CONFIGS if (folder / c).is_dir() and any((folder / c).glob("train-*")))
    footers = validate_hub(spec)
    assert footers.problems == [p for p in local if " row " not in p and not re.search(
        rf"dataset_info of ({with_rows}): (num_bytes|dataset_size) ", p)]
    if corrupt.__name__ not in ROW_CASES:
        assert any(p.startswith(CASES[corrupt]) for p in footers.problems), footers.problems

    run = CliRunner().invoke(main, ["validate", spec, "--exhaustive"])
    assert run.exit_code == 1 and run.stdout.splitlines() == local


def test_an_oversized_shard_on_the_hub_is_refused_as_a_folders_is(published, hub, tmp_path, monkeypatch):
    """A row group that would decode past the bound (issue 22 item 7) is one problem, its rows
    unread, with --exhaustive as in a local folder."""
    from orandcar_builder import parquetio
    from tests.test_shard_bounds import BOUND, VARIANTS, hostile

    monkeypatch.setattr(parquetio, "MAX_ROW_GROUP_BYTES", BOUND)
    folder = tmp_path / "OrandCar"
    shutil.copytree(published[0], folder)
    path, value, options = VARIANTS[0]
    shard = hostile(folder, path, value, options)
    local = [p for p in validate_folder(folder) if p.startswith(f"RS_nothink/{shard.name}")]
    assert len(local) == 1 and "decodes to" in local[0], local
    commit_folder(hub, folder, "oversized")
    on_hub = [p for p in validate_hub(f"{REPO}@oversized", exhaustive=True).problems
              if p.startswith(f"RS_nothink/{shard.name}")]
    assert on_hub == local


@pytest.mark.parametrize("replacement,footers_say", [
    (r"\g<1>1",
     "README.md: dataset_info of RS_think: dataset_size {size} differs from the num_bytes 1 of its one split"),
    (r"\g<1>lots", "README.md: dataset_info of RS_think: num_bytes 'lots' is not a byte count"),
], ids=["num_bytes-1", "num_bytes-text"])
def test_num_bytes_without_the_rows(published, hub, tmp_path, replacement, footers_say):
    """Footers do not give the rows' in-memory size: the card's num_bytes is checked against its
    own dataset_size; --exhaustive measures it, as a folder's validation does."""
    folder = tmp_path / "OrandCar"
    shutil.copytree(published[0], folder)
    readme = folder / "README.md"
    text = readme.read_text(encoding="utf-8")
    size = re.search(r"- name: train\n\s+num_bytes: (\d+)", text).group(1)
    readme.write_text(re.sub(r"(- name: train\n\s+num_bytes: )\d+", replacement, text, count=1), encoding="utf-8")
    branch = f"num-bytes-{len(hub.repo(REPO).branches)}"
    commit_folder(hub, folder, branch)
    assert validate_hub(f"{REPO}@{branch}").problems == [footers_say.format(size=size)]
    assert validate_hub(f"{REPO}@{branch}", exhaustive=True).problems == validate_folder(folder)


def test_footers_only_never_read_a_shard_whole(published, hub):
    folder, result = published
    hub.clear_log()
    checked = validate_hub(f"{REPO}@v1.0")
    assert checked.ok and checked.shards == 3
    reads = [r for r in hub.calls("resolve", "GET") if r.summary["path"].endswith(".parquet")]
    sizes = {path: p.stat().st_size for path, p in _files(folder).items() if path.endswith(".parquet")}
    assert sorted(r.summary["path"] for r in reads) == sorted(sizes)  # one ranged read per shard
    for r in reads:
        assert r.summary["range"] and r.summary["bytes"] <= FOOTER_BLOCK < sizes[r.summary["path"]]
    assert sum(r.summary["bytes"] for r in reads) < checked.shard_bytes / 3
    assert checked.shard_bytes == sum(sizes.values())
    # besides: the revision resolved (and again by the file system, unless it has), one recursive
    # listing (none when the file system listed this commit before), the Hub's card check
    others = Counter(r.route for r in hub.log if r.route != "resolve")
    assert set(others) <= {"repo-info", "tree", "validate-yaml"} and others["validate-yaml"] == 1, others
    assert others["repo-info"] <= 2 and others["tree"] <= 1, others
    assert len([r for r in hub.calls("resolve") if not r.summary["path"].endswith(".parquet")]) == 1  # the card

    hub.clear_log()
    assert validate_hub(f"{REPO}@v1.0", exhaustive=True).ok
    streamed = sum(r.summary["bytes"] for r in hub.calls("resolve", "GET") if r.summary["path"].endswith(".parquet"))
    assert streamed >= checked.shard_bytes  # every byte of every shard, once (plus the footers' re-reads)


def test_the_hubs_own_card_check_is_asked(published, hub):
    hub.fail_next("validate-yaml", 400, "dataset card: license is not a known identifier")
    checked = validate_hub(f"{REPO}@v1.0")
    assert len(checked.problems) == 1, checked.problems
    assert checked.problems[0].startswith("README.md: the Hub refuses the card (")
    assert "license is not a known identifier" in checked.problems[0]
    hub.fail_next("validate-yaml", 404, "no such endpoint")  # a mirror without the check: nothing to ask
    assert validate_hub(f"{REPO}@v1.0").ok
    hub.fail_next("validate-yaml", 500, "down")  # the Hub failing is not the card's problem
    with pytest.raises(HubReadError, match="HTTP 500"):
        validate_hub(f"{REPO}@v1.0")


def test_a_silent_endpoint_times_out(monkeypatch):
    import time

    start = time.monotonic()
    with silent_endpoint(monkeypatch, "hf_timeout_validate_token") as accepted:
        run = CliRunner().invoke(main, ["validate", f"{REPO}@v1.0", "--timeout", "0.5"])
    assert run.exit_code == 2 and "did not answer within 0.5 s" in run.output, run.output
    assert "hf_timeout_validate_token" not in run.output and accepted and time.monotonic() - start < 30
    with pytest.raises(HubReadError, match="timeout must be a positive number"):
        validate_hub(REPO, timeout=0)


def test_validate_as_a_user_runs_it_in_ci(published, hub, tmp_path):
    """A subprocess configured by HF_ENDPOINT and HF_TOKEN alone, reaching only the loopback."""
    env = hub.client_env(tmp_path / "hf-home")
    env["PYTHONPATH"] = str(TESTS.parent)
    script = ("from tests import hubserver; hubserver.forbid_network()\n"
              "import sys; from orandcar_builder.cli import main; sys.argv[0] = 'orandcar'; main()")
    proc = subprocess.run([sys.executable, "-c", script, "validate", f"{REPO}@v1.0"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"{REPO}@v1.0 (commit {published[1].head[:12]}): ok"
    assert hub.token not in proc.stdout + proc.stderr
    env.pop("HF_TOKEN")  # the repo is gated: no token, no read, one error line
    proc = subprocess.run([sys.executable, "-c", script, "validate", f"{REPO}@v1.0"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("error:") == 1 and "gated" in proc.stderr, proc.stderr


def test_the_hub_listing_is_sorted_into_the_layout_as_a_folder_is(tmp_path):
    from orandcar_builder.dataset.layout import scan, scan_repo

    names = ["README.md", ".orandcar-dataset", "examples/rejected-1.png", "examples/notes.txt", "examples/sub/a.png",
             "rejected/train-00000-of-00001.parquet", "rejected/old/train-00000-of-00001.parquet",
             "rejected/old/train-00001-of-00002.parquet", "RS_think/notes.txt", "work/manifest.json",
             "work/cache/x", "secrets.txt", "RS_nothink/train-00000-of-00001.parquet.tmp", "Rejected/x"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    folder, hub = scan(tmp_path), scan_repo([*names, ".gitattributes"])
    assert (hub.published, hub.unexpected, hub.marker) == (folder.published, folder.unexpected, folder.marker)
    assert "work/" in hub.unexpected and "rejected/old/" in hub.unexpected and ".gitattributes" not in hub.unexpected


# -- the card as huggingface_hub reads it ------------------------------------------------------------

def test_a_card_huggingface_hub_reads_otherwise_is_a_problem(sample_copy):
    readme = sample_copy / "README.md"
    text = readme.read_text(encoding="utf-8")
    readme.write_text(text.replace("---\n", "---\ntrain_eval_index: [{config: rejected}]\n", 1), encoding="utf-8")
    problems = validate_folder(sample_copy)
    assert any(p.startswith("README.md: huggingface_hub reads other card data than the YAML header") for p in problems)


def test_dataset_info_datasets_cannot_read_is_a_problem():
    text = "---\ndataset_info:\n  features: 5\n---\n# x\n"
    problems = hub_card_problems(text, {"dataset_info": {"features": 5}})
    assert any(p.startswith("README.md: datasets cannot read the card's dataset_info") for p in problems), problems
    assert hub_card_problems("---\nlicense: null\n---\n", {"license": None}) == []


# -- push reads back what it pushed ------------------------------------------------------------------

def test_a_push_the_hub_serves_back_differently_is_reported(hub, tmp_path):
    from tests.test_publish import write_dataset_folder

    folder = write_dataset_folder(tmp_path / "OrandCar")
    repo = "orandcar-org/OrandCar-faulty"

    def flip_last_byte(path: str, data: bytes) -> bytes:
        return data[:-1] + bytes([data[-1] ^ 1]) if path.endswith(".parquet") else data

    hub.tamper_with(flip_last_byte)
    try:
        run = CliRunner().invoke(main, ["push", str(folder), "--repo", repo, "--no-progress"])
    finally:
        hub.tamper_with(None)
    assert run.exit_code == 1, run.output
    head = hub.repo(repo).branches["main"]
    assert f"read back from the Hub at {head[:12]}:" in run.output and "not to be trusted" in run.output
    for config in CONFIGS:
        shard = f"{config}/train-00000-of-00001.parquet"
        assert f"{shard}: the Hub serves other bytes at {head[:12]} than were pushed" in run.output
        assert f"{shard}: not a readable parquet file" in run.output  # the footer's magic is gone
    assert hub.token not in run.output

    # with --no-verify nothing is read back: the push trusts the commit
    (folder / "README.md").write_text((folder / "README.md").read_text() + "\n", encoding="utf-8")
    hub.clear_log()
    hub.tamper_with(flip_last_byte)
    try:
        run = CliRunner().invoke(main, ["push", str(folder), "--repo", repo, "--no-progress", "--no-verify"])
    finally:
        hub.tamper_with(None)
    assert run.exit_code == 0 and "verified" not in run.output and "read back" not in run.output
    assert not [r for r in hub.calls("resolve") if r.summary["path"].endswith(".parquet")]


def test_a_clean_push_says_it_was_verified(hub, tmp_path):
    from tests.test_publish import write_dataset_folder

    folder = write_dataset_folder(tmp_path / "OrandCar")
    run = CliRunner().invoke(main, ["push", str(folder), "--repo", "orandcar-org/OrandCar-verified", "--no-progress"])
    assert run.exit_code == 0, run.output
    assert "verified on the Hub: the card, the shards' footers and every file's hash read back as pushed" in run.output


# -- orandcar schema --------------------------------------------------------------------------------

@pytest.mark.parametrize("config", CONFIGS)
def test_schema_prints_the_rows_json_schema(config):
    run = CliRunner().invoke(main, ["schema", config])
    assert run.exit_code == 0
    assert run.output == (SCHEMA_DIR / f"{config}.json").read_text(encoding="utf-8")
    assert json.loads(run.output) == json_schema(config)
    import jsonschema

    jsonschema.validators.validator_for(json.loads(run.output)).check_schema(json.loads(run.output))


def test_schema_of_an_unknown_config_is_refused():
    run = CliRunner().invoke(main, ["schema", "accepted"])
    assert run.exit_code == 2 and "unknown config 'accepted'" in run.output and "RS_think" in run.output


# -- the GitHub Actions workflow of docs/ci ----------------------------------------------------------

WORKFLOW = TESTS.parent / "docs" / "ci" / "validate-dataset.yml"


def test_the_ci_workflow_runs_on_pull_requests_and_tags():
    import yaml

    flow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    triggers = flow[True]  # YAML 1.1 reads the key `on` as true; GitHub reads it as `on`
    assert triggers["push"] == {"tags": ["v*"]} and "pull_request" in triggers
    runs = [step["run"] for step in flow["jobs"]["validate"]["steps"] if "run" in step]
    assert not any("${{" in run for run in runs)  # what an event brings reaches a script through env only
    assert runs[-1] == 'orandcar validate "$SPEC" $FLAGS --timeout 120'


@pytest.mark.parametrize("event,values,spec,flags", [
    ("push", {"TAG": "v1.0"}, f"{REPO}@v1.0", "--exhaustive"),
    ("pull_request", {"HEAD_BRANCH": "dev"}, f"{REPO}@dev", ""),  # the Hub has a branch of that name
    ("pull_request", {"HEAD_BRANCH": "fix-card"}, f"{REPO}@main", ""),  # it has none: main
    ("workflow_dispatch", {"INPUT": "refs/pr/1"}, f"{REPO}@refs/pr/1", ""),
])
def test_the_ci_workflow_picks_the_revision_and_validates_it(published, hub, tmp_path, event, values, spec, flags):
    """The workflow's two scripts, run by bash as the runner runs them, against the test hub."""
    import yaml
    from huggingface_hub import HfApi

    if "dev" not in hub.repo(REPO).branches:
        HfApi().create_branch(REPO, repo_type="dataset", branch="dev", revision=published[1].head)
    if "refs/pr/1" not in hub.repo(REPO).pulls:
        from huggingface_hub import CommitOperationAdd

        card = (published[0] / "README.md").read_bytes() + b"\nA note.\n"
        HfApi().create_commit(REPO, [CommitOperationAdd("README.md", card)], commit_message="note",
                              repo_type="dataset", create_pr=True)
    steps = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["validate"]["steps"]
    choose, check = steps[2], steps[3]
    env = hub.client_env(tmp_path / "hf-home")
    env.update(PYTHONPATH=str(TESTS.parent), DATASET=REPO, EVENT=event, GITHUB_OUTPUT=str(tmp_path / "out"),
               PATH=f"{Path(sys.executable).parent}:{env['PATH']}", TAG="", HEAD_BRANCH="", INPUT="")
    env.update(values)
    proc = subprocess.run(["bash", "-e", "-c", choose["run"]], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    outputs = dict(line.split("=", 1) for line in (tmp_path / "out").read_text().splitlines())
    assert outputs == {"spec": spec, "flags": flags}
    env.update(SPEC=outputs["spec"], FLAGS=outputs["flags"])
    proc = subprocess.run(["bash", "-e", "-c", check["run"]], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().startswith(f"{spec} (commit ") and proc.stdout.strip().endswith("): ok")
