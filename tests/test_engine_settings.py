"""Each engine says its own generation settings (``generation_settings()``) and its secret options
(``SECRET_OPTIONS``): the report and the card read the settings, never the fingerprint's layout,
and an option an engine declares secret never reaches a file the build writes, whatever it is
called."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from orandcar_builder.engines import ENGINES, create_engine, engine_class
from orandcar_builder.engines.base import (
    NO_REASONING,
    EngineContractError,
    GenerationSettings,
    settings_of,
)
from orandcar_builder.records import Generation, Request
from orandcar_builder.redact import HIDDEN, SET, redact

from .conftest import write_png, write_pool

SIG = "q7Zk2mXw"  # a secret with no secret-looking shape, in an option with an innocent name
ODD = "odd_layout"


class OddLayoutEngine:
    """An engine whose fingerprint has a layout of its own: no ``sampling``, no
    ``chat_template_kwargs``, its model under ``weights``. It answers each question with the word
    after "sign " and records its model; ``sig`` signs its requests, so it is secret."""

    kind = ODD
    can_judge = False
    SECRET_OPTIONS = ("sig",)

    def __init__(self, model: str, sig: str = "", endpoint: str = "", heat: float = 0.25, budget: int = 777,
                 think: bool = False):
        self.model, self.sig, self.endpoint, self.heat, self.budget, self.think = model, sig, endpoint, heat, budget, think

    def fingerprint(self) -> dict:
        # A careless engine: its secret is in here three ways; the build must hide all of them.
        return {"kind": self.kind, "weights": {"name": self.model, "rev": "rev-odd"},
                "decoding": {"heat": self.heat, "budget": self.budget, "think": self.think},
                "transport": {"sig": self.sig, "endpoint": self.endpoint}, "note": f"signed with {self.sig}"}

    def generation_settings(self) -> GenerationSettings:
        return GenerationSettings(engine=self.kind, model=self.model, revision="rev-odd", temperature=self.heat,
                                  max_tokens=self.budget, reasoning=self.think)

    def generate(self, requests):
        return [Generation(item_id=r.item_id, text=r.question.split("sign ")[1].split("?")[0], think="",
                           final_answer=r.question.split("sign ")[1].split("?")[0], finish_reason="stop",
                           model=self.model, revision="rev-odd") for r in requests]


class OddJudge(OddLayoutEngine):
    """The same layout as a judge: every verdict CORRECT."""

    kind = "odd_judge"
    can_judge = True

    def generate(self, requests):
        return [Generation(item_id=r.item_id, text="CORRECT", think="", final_answer="CORRECT", finish_reason="stop",
                           model=self.model) for r in requests]


@pytest.fixture
def odd_engine(monkeypatch):
    monkeypatch.setitem(ENGINES, ODD, f"{__name__}:OddLayoutEngine")
    monkeypatch.setitem(ENGINES, "odd_judge", f"{__name__}:OddJudge")


def _pool(root: Path) -> Path:
    lines = []
    for i in range(3):
        write_png(root / "img" / f"{i}.png", colour=(60 * i, 80, 120))
        lines.append({"id": f"q{i}", "image": f"img/{i}.png", "question": f"What is written on sign w{i}?",
                      "answer": f"w{i}", "family": "scene_text"})
    return write_pool(root / "pool.jsonl", lines)


def _files_holding(folder: Path, secret: str) -> list[str]:
    return [str(p.relative_to(folder)) for p in sorted(folder.rglob("*")) if p.is_file() and secret.encode() in p.read_bytes()]


def test_every_registered_engine_declares_its_settings_and_secrets():
    for name in ENGINES:
        cls = engine_class(name)
        assert isinstance(cls.SECRET_OPTIONS, tuple) and all(isinstance(n, str) for n in cls.SECRET_OPTIONS), name
        assert callable(getattr(cls, "generation_settings", None)), name


def test_a_fingerprint_of_another_layout_still_reaches_report_and_card_and_its_secret_no_file(tmp_path, odd_engine):
    from orandcar_builder.pipeline import build

    pool = _pool(tmp_path / "pool")
    endpoint = f"https://signer.example/v1?sig={SIG}&region=eu"
    result = build(pool, tmp_path / "b" / "OrandCar", work=tmp_path / "b" / "work", engine_name=ODD,
                   engine_options={"model": "Org/Odd-VLM-2B", "sig": SIG, "endpoint": endpoint}, progress=False)
    assert result.ok, result.problems
    report = json.loads((result.work / "report.json").read_text(encoding="utf-8"))
    assert report["generation"] == {"engine": ODD, "model": "Org/Odd-VLM-2B", "revision": "rev-odd",
                                    "temperature": 0.25, "max_tokens": 777, "reasoning": False}
    card = (result.out / "README.md").read_text(encoding="utf-8")
    for row in ("| model | `Org/Odd-VLM-2B` |", "| model revision | `rev-odd` |", f"| engine | `{ODD}` |",
                "| temperature | 0.25 |", "| reasoning | disabled |", "| max new tokens | 777 |"):
        assert row in card, row
    # The secret: used by the engine, in no file of the dataset or the work dir (report, manifest,
    # cache, card, the recipe that ran), and said to be set.
    assert not _files_holding(tmp_path / "b", SIG), _files_holding(tmp_path / "b", SIG)
    assert f'sig = "{SET}"' in card
    manifest = json.loads((result.work / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["recipe"]["engine"]["sig"] == SET and report["recipe"]["engine"]["sig"] == SET
    assert manifest["recipe"]["engine"]["endpoint"] == f"https://signer.example/v1?sig={HIDDEN}&region=eu"
    assert manifest["engine"]["transport"]["sig"] == SET and manifest["engine"]["note"] == f"signed with {HIDDEN}"


def test_the_judge_declared_secret_reaches_no_file(tmp_path, odd_engine):
    from orandcar_builder.pipeline import build

    judge_sig = "Jd8wQp3v"
    pool = write_pool(tmp_path / "pool" / "pool.jsonl", [
        {"id": "q0", "image": "img/0.png", "question": "What is written on sign w0?", "answer": "other",
         "family": "scene_text"}])  # answered "w0": rejected by the rule, then judged
    write_png(tmp_path / "pool" / "img" / "0.png")
    result = build(pool, tmp_path / "b" / "OrandCar", work=tmp_path / "b" / "work", engine_name=ODD,
                   engine_options={"model": "m", "sig": SIG}, judge="odd_judge",
                   judge_options={"model": "j", "sig": judge_sig, "endpoint": f"https://j.example/?sig={judge_sig}"},
                   progress=False)
    assert result.ok, result.problems
    assert result.report["judge"]["judged"] == 1 and result.report["judge"]["promoted"] == 1
    for secret in (SIG, judge_sig):
        assert not _files_holding(tmp_path / "b", secret), (secret, _files_holding(tmp_path / "b", secret))
    manifest = json.loads((result.work / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["recipe"]["judge"]["sig"] == SET and manifest["judge_engine"]["transport"]["sig"] == SET


def test_an_engine_object_given_declares_its_secrets_to_the_recipe_that_ran(tmp_path):
    """The registry does not know the engine's name: the object's own SECRET_OPTIONS hide it."""
    from orandcar_builder.pipeline.config import BuildConfig
    from orandcar_builder.pipeline.report import recipe_ran, without_secrets

    engine = OddLayoutEngine("m", sig=SIG)
    config = BuildConfig(pool=tmp_path / "pool.jsonl", out=tmp_path / "out", work=tmp_path / "work", engine=ODD,
                         engine_options={"model": "m", "sig": SIG})
    ran = recipe_ran(config, engine, None)
    assert ran.engine == {"name": ODD, "model": "m", "sig": SET}
    assert SIG not in json.dumps(without_secrets(ran.to_dict()))


def test_a_build_reads_no_fingerprint_key_for_the_settings(tmp_path):
    """An engine without ``sampling`` in its fingerprint but with ``temperature`` elsewhere: the
    report says what the settings say, and an engine that says nothing is "not recorded"."""
    from orandcar_builder.pipeline.report import generation_settings
    from orandcar_builder.pipeline.work import GenerationFacts

    class Silent:
        kind = "silent"

        def fingerprint(self):
            return {"kind": "silent", "sampling": {"temperature": 0.9}, "chat_template_kwargs": {"enable_thinking": True},
                    "model": "from-the-fingerprint"}

    facts = GenerationFacts(models={"seen-model"}, revisions={"r1", "r2"})
    assert generation_settings(Silent(), facts) == {"engine": "silent", "model": "seen-model", "revision": ["r1", "r2"],
                                                    "temperature": None, "max_tokens": None, "reasoning": None}


def test_settings_of_checks_the_contract():
    class Wrong:
        kind = "wrong"

        def generation_settings(self):
            return {"temperature": 0}

    with pytest.raises(EngineContractError, match="GenerationSettings"):
        settings_of(Wrong())


def test_the_settings_hide_credentials_they_carry():
    from orandcar_builder.pipeline.report import generation_settings
    from orandcar_builder.pipeline.work import GenerationFacts

    engine = OddLayoutEngine("https://user:pw-123456@models.example/m")
    shown = generation_settings(engine, GenerationFacts())
    assert shown["model"] == f"https://{HIDDEN}@models.example/m"


@pytest.mark.parametrize("data, expected", [
    ({"engine": "vllm", "model": "M", "revision": "abc", "temperature": 0.0, "max_tokens": 8, "reasoning": True},
     GenerationSettings("vllm", "M", "abc", 0.0, 8, True)),
    ({"engine": "replay", "model": ["a", "b"], "revision": None, "reasoning": None},
     GenerationSettings("replay", "a, b")),
    ({"engine": "x", "temperature": "hot", "max_tokens": True, "reasoning": {"x": 1}, "model": {"n": 1}},
     GenerationSettings("x")),
    (None, GenerationSettings("")),
    ("not a mapping", GenerationSettings("")),
])
def test_settings_read_back_defensively(data, expected):
    assert GenerationSettings.from_json(data) == expected


def test_settings_round_trip():
    settings = GenerationSettings("rapidocr", "rec.onnx", "6f32", None, None, NO_REASONING)
    assert list(settings.to_json()) == ["engine", "model", "revision", "temperature", "max_tokens", "reasoning"]
    assert GenerationSettings.from_json(json.loads(json.dumps(settings.to_json()))) == settings


def test_rapidocr_says_its_model_file_and_that_it_does_not_reason(ocr_engine, tmp_path):
    settings = ocr_engine.generation_settings()
    assert settings.engine == "rapidocr" and settings.reasoning == NO_REASONING
    assert settings.model.endswith(".onnx") and settings.temperature is None and settings.max_tokens is None
    write_png(tmp_path / "a.png")
    from orandcar_builder.images import ImageRef

    generation = ocr_engine.generate([Request("a", "Q", "scene_text", ImageRef.from_file(tmp_path / "a.png"))])[0]
    assert settings.revision == generation.revision and len(settings.revision) == 12


def test_replay_says_only_its_kind(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "x"}) + "\n")
    assert create_engine("replay", replay=str(path)).generation_settings() == GenerationSettings("replay")


@pytest.mark.parametrize("options, temperature, max_tokens, reasoning", [
    ({}, 0.0, 16384, True),
    ({"chat_template_kwargs": {"enable_thinking": False}, "max_tokens": 64}, 0.0, 64, False),
    ({"chat_template_kwargs": {}}, 0.0, 16384, None),
    ({"chat_template_kwargs": {"enable_thinking": "yes"}}, 0.0, 16384, None),
    # extra_body is sent over the engine's own settings: the settings say what the server got
    ({"extra_body": {"temperature": 0.6, "max_completion_tokens": 99,
                     "chat_template_kwargs": {"enable_thinking": False}}}, 0.6, 99, False),
])
def test_openai_compat_settings_are_what_each_request_carries(options, temperature, max_tokens, reasoning):
    engine = create_engine("openai_compat", model="served-m", revision="abc", **options)
    settings = engine.generation_settings()
    assert settings == GenerationSettings("openai_compat", "served-m", "abc", temperature, max_tokens, reasoning)
    body = engine.request_body(Request("a", "Q", "vqa"))
    assert body["temperature"] == temperature and body.get("max_completion_tokens", body["max_tokens"]) == max_tokens
    assert body["messages"] == [{"role": "user", "content": "Q"}]


def test_vllm_settings(monkeypatch, tmp_path):
    from .test_engine_vllm import StubLLM, StubSamplingParams

    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams, module.__version__ = StubLLM, StubSamplingParams, "0.0-stub"
    monkeypatch.setitem(sys.modules, "vllm", module)
    folder = tmp_path / "tiny-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    engine = create_engine("vllm", model=str(folder), revision="", max_tokens=321,
                           chat_template_kwargs={"enable_thinking": False})
    assert engine.generation_settings() == GenerationSettings("vllm", str(folder), None, 0.0, 321, False)
    assert engine.sampling_params().kwargs["temperature"] == engine.generation_settings().temperature


def test_declared_names_are_hidden_at_any_depth_and_by_value():
    shown = redact({"outer": {"sig": SIG, "list": [f"x {SIG} y"]}, "url": f"http://h/?sig={SIG}"}, ("sig",))
    assert shown == {"outer": {"sig": SET, "list": [f"x {HIDDEN} y"]}, "url": f"http://h/?sig={HIDDEN}"}
    # undeclared, an innocent name is no secret
    assert redact({"sig": SIG}) == {"sig": SIG}


def test_one_secret_option_named_as_a_string_is_that_name():
    from orandcar_builder.engines.base import public_fingerprint

    class Careless(OddLayoutEngine):
        SECRET_OPTIONS = "sig"  # not a tuple

    shown = public_fingerprint(Careless("m", sig=SIG))
    assert SIG not in json.dumps(shown) and shown["transport"]["sig"] == SET
