"""Secrets (an engine's API key, the judge's, credentials in a base URL) never reach a file the build
writes (card, manifest, report, cache, review page, replay export, failed items) nor a message; the
card says "set"; changing a key regenerates nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.redact import HIDDEN, SET, is_secret_name, redact, redact_url, scrub, secret_values
from tests.fake_openai_server import FakeOpenAIServer

from .conftest import write_png, write_pool

ENGINE_KEY = "engine-key-0f3a9c1d"
JUDGE_KEY = "judge-key-77be21aa"
URL_USER = "alice-7c1e"
URL_PASSWORD = "url-pass-5d2b8e"
SECRETS = (ENGINE_KEY, JUDGE_KEY, URL_USER, URL_PASSWORD)


def _pool(root: Path) -> Path:
    lines = []
    for i in range(4):
        write_png(root / "img" / f"{i}.png", colour=(40 * i, 90, 200 - 30 * i))
        lines.append({"id": f"q{i}", "image": f"img/{i}.png", "question": f"What is written on sign {i}?",
                      "answer": f"word{i}", "family": "scene_text"})
    return write_pool(root / "pool.jsonl", lines)


def _credentialed(url: str, password: str = URL_PASSWORD) -> str:
    return url.replace("http://", f"http://{URL_USER}:{password}@", 1)


def _build(pool: Path, out: Path, work: Path, url: str, *, engine_key: str = ENGINE_KEY, judge_key: str = JUDGE_KEY,
           password: str = URL_PASSWORD, extra: tuple = ()):
    args = ["build", pool, "-o", out, "--work", work, "--no-progress", "--admit-workers", "1",
            "--engine", "openai_compat", "--engine-option", "model=fake-vlm",
            "--engine-option", f"base_urls={_credentialed(url, password)}", "--engine-option", f"api_key={engine_key}",
            "--judge", "openai_compat", "--judge-option", "model=fake-vlm", "--judge-option", f"base_urls={url}",
            "--judge-option", f"api_key={judge_key}", "--export-generations", work / "replay.jsonl", *extra]
    return CliRunner().invoke(main, [str(a) for a in args])


def _leaks(folder: Path, secrets=SECRETS) -> list[str]:
    """Every file under ``folder`` (any depth, binary too: sqlite, parquet, png) holding a secret."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(folder)}: {s}" for s in secrets if s.encode() in data]
    return found


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def test_no_secret_in_any_file_and_the_card_says_set(tmp_path, server):
    pool = _pool(tmp_path / "pool")
    out, work = tmp_path / "build" / "OrandCar", tmp_path / "build" / "work"
    result = _build(pool, out, work, server.url)
    assert result.exit_code == 0, result.output
    # the secrets were used: the server saw the keys
    assert f"Bearer {JUDGE_KEY}" in server.authorizations
    assert not _leaks(tmp_path / "build"), _leaks(tmp_path / "build")
    assert not [s for s in SECRETS if s in result.output]
    assert (work / "cache" / "generations.sqlite").is_file() and (work / "report.html").is_file()
    assert (work / "replay.jsonl").is_file() and (out / "README.md").is_file()

    card = (out / "README.md").read_text(encoding="utf-8")
    assert f'api_key = "{SET}"' in card  # the "How to reproduce" recipe
    assert f"{HIDDEN}@127.0.0.1" in card
    manifest = json.loads((work / "manifest.json").read_text())
    assert manifest["recipe"]["engine"]["api_key"] == SET and manifest["recipe"]["judge"]["api_key"] == SET
    assert manifest["recipe"]["engine"]["base_urls"].startswith(f"http://{HIDDEN}@127.0.0.1:")


def test_a_changed_key_regenerates_nothing(tmp_path, server):
    pool = _pool(tmp_path / "pool")
    out, work = tmp_path / "OrandCar", tmp_path / "work"
    assert _build(pool, out, work, server.url).exit_code == 0
    first = (out / "README.md").read_bytes()
    asked = len(server.received)
    result = _build(pool, out, work, server.url, engine_key="another-engine-key-1", judge_key="another-judge-key-2",
                    password="another-password-3")
    assert result.exit_code == 0, result.output
    assert len(server.received) == asked, "a changed key must not ask the engine again"
    cache = json.loads((work / "report.json").read_text())["cache"]
    assert cache["generate"]["hits"] == cache["generate"]["total"] == 4 and cache["generate"]["asked"] == 0
    assert cache["judge"]["asked"] == 0
    assert (out / "README.md").read_bytes() == first


def test_a_refused_key_is_not_repeated_in_messages_or_files(tmp_path):
    """A server that echoes the key it refused (HTTP 401): the failed items and the error line
    hold no key."""
    pool = _pool(tmp_path / "pool")
    with FakeOpenAIServer(api_key="the-right-key-9") as srv:
        result = _build(pool, tmp_path / "OrandCar", tmp_path / "work", srv.url)
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "401" in result.output
    assert not [s for s in SECRETS if s in result.output], result.output
    assert not _leaks(tmp_path)
    failed = (tmp_path / "work" / "failed.jsonl").read_text()
    assert "Incorrect API key provided" in failed and ENGINE_KEY not in failed


def test_a_bad_setting_message_hides_the_url_credentials(tmp_path):
    pool = _pool(tmp_path / "pool")
    result = CliRunner().invoke(main, ["build", str(pool), "-o", str(tmp_path / "out"), "--work", str(tmp_path / "w"),
                                       "--engine", "openai_compat", "--engine-option", "model=m",
                                       "--engine-option", f"base_urls=ftp://{URL_USER}:{URL_PASSWORD}@host/v1"])
    assert result.exit_code == 2 and "must start with http" in result.output
    assert URL_PASSWORD not in result.output and URL_USER not in result.output


@pytest.mark.parametrize("name, secret", [
    ("api_key", True), ("apiKey", True), ("hf_token", True), ("X-Api-Key", True), ("Authorization", True),
    ("extra_headers", True), ("client_secret", True), ("password", True), ("auth", True),
    ("max_tokens", False), ("stop_token_ids", False), ("tokenizer", False), ("model", False),
    ("chat_template_kwargs", False), ("skip_special_tokens", False), ("keyword", False),
])
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_redact_hides_by_what_the_value_is():
    options = {"model": "m", "max_tokens": 8, "token": "t0ps3cret", "base_urls": ["https://u:pw12345@h/v1", "http://h2"],
               "extra_body": {"headers": {"X-Api-Key": "abcdefgh"}, "top_k": 5}, "note": "Bearer abcdef123456",
               "other": "sk-abcdefghijklmnop", "plain": "https://h/v1?api_key=zzzzzz&x=1", "use_auth": False}
    shown = redact(options, declared=("other",))
    assert shown == {"model": "m", "max_tokens": 8, "token": SET, "base_urls": [f"https://{HIDDEN}@h/v1", "http://h2"],
                     "extra_body": {"headers": SET, "top_k": 5}, "note": SET, "other": SET,
                     "plain": f"https://h/v1?api_key={HIDDEN}&x=1", "use_auth": False}
    values = secret_values(options, declared=("other",))
    assert {"t0ps3cret", "pw12345", "abcdefgh", "sk-abcdefghijklmnop"} <= values
    text = "failed: https://u:pw12345@h/v1 said abcdefgh; Authorization: Bearer abcdef123456"
    cleaned = scrub(text, values)
    assert "pw12345" not in cleaned and "abcdefgh" not in cleaned and "abcdef123456" not in cleaned
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize("value, hidden", [
    ("sk-proj-" + "a1B2" * 6, True), ("hf_" + "Ab3" * 12, True), ("ghp_" + "x9" * 18, True), ("Bearer abcdef123456", True),
    ("hf-internal-testing-tiny-model", False), ("sk-learn-model", False), ("Qwen/Qwen3-VL-8B-Thinking", False),
    ("/models/hf_cache_of_some_model_folder", False),
])
def test_credential_shapes_are_not_model_names(value, hidden):
    assert (redact({"model": value})["model"] == SET) is hidden
