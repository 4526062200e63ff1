"""The card's schema tables: every field of each config, its type and what it holds."""

from __future__ import annotations

from typing import Any, Iterator

from ..dataset.features import features
from ..vocab import ACCEPTED_CONFIGS, CONFIG_REJECTED, CONFIGS, JUDGE_VERIFIER, REJECT_REASONS


def _one_of(names: tuple[str, ...]) -> str:
    """``a``, ``b`` or ``c``, each as inline code."""
    quoted = [f"`{name}`" for name in names]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else "".join(quoted)


FIELD_NOTES = {
    "image": "the original encoded image file, byte for byte (`bytes`, and `path`: its file name)",
    "image_sha256": "hex sha256 of the image bytes; one row per distinct image in each config",
    "qa": "the row's QA items, in pool order",
    "qa[].question": "the exact text the model received, appended instruction included",
    "qa[].think": "the model's reasoning before its final answer",
    "qa[].org_answer": "the reference answer from the source dataset",
    "qa[].verifier": f"the rule that accepted the answer, or `{JUDGE_VERIFIER}`",
    "qa[].wrong_vlm": "what the model answered instead",
    "qa[].reason": f"why it was rejected: {_one_of(REJECT_REASONS)}",
    "clean_meta": "provenance and the cleaning that admitted the row",
    "clean_meta.policy": "id of the cleaning policy",
    "clean_meta.sources": "one source per QA item, aligned with `qa`",
    "clean_meta.sources[].dataset": "the source dataset",
    "clean_meta.sources[].split": "its split",
    "clean_meta.sources[].id": "the item's id in the source",
    "clean_meta.sources[].origin": "`benchmark`, or the mixed pool the item came through",
    "clean_meta.sources[].family": "the task family, which chose the rule and the instruction",
    "clean_meta.sources[].references": "the reference answer(s) as admitted",
    "clean_meta.sources[].options": "the options of a multiple-choice item, in letter order (else empty)",
    "clean_meta.actions": "what cleaning changed in this row, if anything",
}
_ACCEPTED_ANSWER = ("the model's own accepted answer, exactly as it wrote it: the span of its explicit "
                    "final-answer statement when it made one, else the part of its final answer that passed")
ANSWER_NOTES = {  # what ``qa[].answer`` holds, per config
    **{config: _ACCEPTED_ANSWER for config in ACCEPTED_CONFIGS},
    CONFIG_REJECTED: "the reference answer (ground truth) from the source dataset",
}


def _type_name(feature: Any) -> str:
    from datasets import Image, LargeList, List, Value

    if isinstance(feature, Value):
        return feature.dtype
    if isinstance(feature, Image):
        return "image"
    if isinstance(feature, (List, LargeList)):
        return f"list of {_type_name(feature.feature)}"
    if isinstance(feature, dict):
        return "struct"
    return type(feature).__name__


def _schema_rows(config: str, fields_: dict, prefix: str = "") -> Iterator[list[str]]:
    from datasets import LargeList, List

    for name, feature in fields_.items():
        path = f"{prefix}{name}"
        note = ANSWER_NOTES[config] if path == "qa[].answer" else FIELD_NOTES.get(path, "")
        yield [f"`{path}`", _type_name(feature), note]
        inner = feature.feature if isinstance(feature, (List, LargeList)) else feature
        if isinstance(inner, dict):
            yield from _schema_rows(config, inner, f"{path}[]." if inner is not feature else f"{path}.")


def schema_tables() -> dict[str, list[list[str]]]:
    return {config: list(_schema_rows(config, features(config))) for config in CONFIGS}
