"""``rapidocr``: the embedded default engine, a PP-OCR recognition model run on the CPU.

It reads the word in a scene-text crop and nothing else. Recognition-only mode (no text
detection, no angle classifier) is used on purpose: the crops of scene-text benchmarks are already
single words, and running the detector first loses most of them (measured on CUTE80/SVT crops:
about 95% word accuracy recognition-only against 26-61% with detection). The engine does not do
whole-image OCR for the other families: reading a chart or a document is not answering a question
about it, so for any family other than ``scene_text`` it answers ``unsupported`` with the reason,
and the build rejects those items as ``no_answer`` instead of feeding OCR noise to a verifier.

For ``multiple_choice`` items whose options are words (a sign showing one of them), it reads the
word and answers the letter of the one option whose letters and digits match what it read; if
none or several match it answers what it read, which the ``choice`` rule then rejects.

It produces no reasoning: ``think`` is always empty.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

from ..files import sha256_of_file
from ..images import ImageError
from ..records import Generation, Request
from ..vocab import FINISH_STOP
from .base import NO_REASONING, Completion, EngineUnavailable, GenerationSettings, stream_batches

SUPPORTED_FAMILIES = ("scene_text", "multiple_choice")
_OPTION_LINE = re.compile(r"^([A-Z])\. (.+)$", re.MULTILINE)  # the block prompts.option_block renders
# Recognition scores below this are still returned: a low-confidence reading is still the
# model's answer, and the verifier (not the engine) decides whether it is right.
TEXT_SCORE = 0.0


class RapidOCREngine:
    kind = "rapidocr"
    can_judge = False
    SECRET_OPTIONS: tuple[str, ...] = ()  # it takes none

    def __init__(self, threads: Optional[int] = None):
        try:
            from rapidocr import RapidOCR
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise EngineUnavailable(
                f"the rapidocr engine needs the 'ocr' extra: pip install 'orandcar-builder[ocr]' ({exc})"
            ) from None
        params = {
            "Global.use_det": False,
            "Global.use_cls": False,
            "Global.use_rec": True,
            "Global.text_score": TEXT_SCORE,
            "Global.log_level": "warning",
        }
        if threads:
            params["EngineConfig.onnxruntime.intra_op_num_threads"] = int(threads)
            params["EngineConfig.onnxruntime.inter_op_num_threads"] = 1
        self._ocr = RapidOCR(params=params)
        logging.getLogger("RapidOCR").setLevel(logging.WARNING)
        self._version = _package_version("rapidocr")
        self._model_path = self._find_rec_model()
        self._model_sha256 = sha256_of_file(self._model_path) if self._model_path else ""
        self.threads = threads

    def _find_rec_model(self) -> Optional[Path]:
        rec = getattr(getattr(self._ocr, "text_rec", None), "session", None)
        for attr in ("model_path", "_model_path"):
            path = getattr(rec, attr, None)
            if path:
                return Path(path)
        models = sorted((Path(__import__("rapidocr").__file__).parent / "models").glob("*rec*.onnx"))
        return models[0] if models else None

    def fingerprint(self) -> dict:
        return {
            "kind": self.kind,
            "model": self._model_path.name if self._model_path else "unknown",
            "model_sha256": self._model_sha256,
            "rapidocr": self._version,
            "mode": "recognition-only",
            "text_score": TEXT_SCORE,
        }

    def generation_settings(self) -> GenerationSettings:
        """The recognition model's file and the start of its sha256; it neither samples nor reasons."""
        return GenerationSettings(engine=self.kind, model=self._model_path.name if self._model_path else "unknown",
                                  revision=self.revision or None, reasoning=NO_REASONING)

    @property
    def model_id(self) -> str:
        return f"rapidocr/{self._model_path.stem if self._model_path else 'rec'}"

    @property
    def revision(self) -> str:
        """What each generation records as its revision: the start of the model file's sha256."""
        return self._model_sha256[:12]

    def stream(self, requests: Iterable[Request]) -> Iterator[Completion]:
        """One request at a time (the model runs here, synchronously); an image that cannot be
        read is a failed Completion for that item only."""
        return stream_batches(self.generate, requests, batch_size=1, kind=self.kind)

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        return [self._one(r) for r in requests]

    def _one(self, request: Request) -> Generation:
        base = dict(item_id=request.item_id, think="", finish_reason=FINISH_STOP, model=self.model_id,
                    revision=self.revision)
        options = _options(request.question) if request.family == "multiple_choice" else {}
        if request.family not in SUPPORTED_FAMILIES or (request.family == "multiple_choice" and not options):
            return Generation(text="", final_answer="", unsupported=(
                f"the rapidocr engine only reads words in scene-text crops (and picks the option whose "
                f"word it read); it cannot answer a {request.family!r} question"), **base)
        if request.image is None:
            return Generation(text="", final_answer="", unsupported="the rapidocr engine needs an image", **base)
        try:
            image = request.image.open()
        except ImageError as exc:
            raise ImageError(f"item {request.item_id}: {exc}") from None
        result = self._ocr(image)
        text = "".join(result.txts or ()) if getattr(result, "txts", None) else ""
        if options:
            read = _alnum(text)
            letters = [letter for letter, option in options.items() if read and _alnum(option) == read]
            answer = letters[0] if len(letters) == 1 else text
            return Generation(text=answer, final_answer=answer, **base)
        return Generation(text=text, final_answer=text, **base)


def _alnum(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _options(question: str) -> dict[str, str]:
    """The lettered options of a question (``A. word`` lines), when they run A, B, C... in order."""
    found = _OPTION_LINE.findall(question)
    letters = [letter for letter, _ in found]
    if len(found) < 2 or letters != [chr(ord("A") + i) for i in range(len(found))]:
        return {}
    return dict(found)


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"
