"""``rapidocr``: the embedded default engine, a PP-OCR recognition model run on the CPU.

It reads the word in a scene-text crop and nothing else. Recognition-only mode (no text
detection, no angle classifier) is used on purpose: the crops of scene-text benchmarks are already
single words, and running the detector first loses most of them (measured on CUTE80/SVT crops:
about 95% word accuracy recognition-only against 26-61% with detection). The engine does not do
whole-image OCR for the other families: reading a chart or a document is not answering a question
about it, so for any family other than ``scene_text`` it answers ``unsupported`` with the reason,
and the build rejects those items as ``no_answer`` instead of feeding OCR noise to a verifier.

It produces no reasoning: ``think`` is always empty.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Optional, Sequence

from ..images import ImageError
from ..records import Generation, Request
from .base import EngineUnavailable

SUPPORTED_FAMILIES = ("scene_text",)
# Recognition scores below this are still returned: a low-confidence reading is still the
# model's answer, and the verifier (not the engine) decides whether it is right.
TEXT_SCORE = 0.0


class RapidOCREngine:
    kind = "rapidocr"
    can_judge = False

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
        self._model_sha256 = _sha256(self._model_path) if self._model_path else ""
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

    @property
    def model_id(self) -> str:
        return f"rapidocr/{self._model_path.stem if self._model_path else 'rec'}"

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        return [self._one(r) for r in requests]

    def _one(self, request: Request) -> Generation:
        base = dict(item_id=request.item_id, think="", finish_reason="stop", model=self.model_id,
                    revision=self._model_sha256[:12])
        if request.family not in SUPPORTED_FAMILIES:
            return Generation(text="", answer="", unsupported=(
                f"the rapidocr engine only reads words in scene-text crops; it cannot answer a "
                f"{request.family!r} question"), **base)
        if request.image is None:
            return Generation(text="", answer="", unsupported="the rapidocr engine needs an image", **base)
        try:
            image = request.image.open()
        except ImageError as exc:
            raise ImageError(f"item {request.item_id}: {exc}") from None
        result = self._ocr(image)
        text = "".join(result.txts or ()) if getattr(result, "txts", None) else ""
        return Generation(text=text, answer=text, **base)


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
