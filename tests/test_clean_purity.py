"""Task purity: the off-task criterion per family and the family-level policy."""

from __future__ import annotations

import math

import pytest
from PIL import Image

from orandcar_builder.clean import clean
from orandcar_builder.clean.purity import PURITY_THRESHOLD, REASON, TASK_SIGNATURES, off_task
from orandcar_builder.families import DEFAULT_FAMILIES as FAMILIES
from orandcar_builder.images import ImageRef
from orandcar_builder.records import Admitted, Dropped, PoolItem, Source

ON_TASK = {
    "scene_text": ["What is written in this image?", "What text appears in this image?", "What does the sign say?",
                   "Read the word in the picture.", "Transcribe the characters.", "What is the word shown?"],
    "doc_vqa": ["What is the date of the memo?", "Who signed the letter?", "Total amount due?",
                "According to the form, what is the zip code?"],
    "chart_qa": ["Which year has the highest value?", "What is the sum of the two smallest bars?"],
    "vqa": ["What colour is the bus?", "How many people are there?", "Is the door open?", "Count the apples."],
    "math": ["Find x if 2x + 3 = 7.", "What is the area of the triangle?", "Evaluate $\\frac{1}{2}$.",
             "How many degrees is angle ABC?"],
    "multiple_choice": ["Which animal is shown?\nA. cat\nB. dog", "Which of the following is true?",
                        "What is it? Options: cat, dog", "Choose the best answer."],
}
OFF_TASK = {
    "scene_text": ["Describe the image.", "What colour is the car?", "What is happening in this scene?",
                   "Write a short story about this picture.", "Describe the text in the image in detail."],
    "doc_vqa": ["Describe this document.", "Provide a detailed caption.", "A nice photo of a dog."],
    "chart_qa": ["Summarize the chart.", "Give a detailed description of the figure."],
    "vqa": ["Describe the image in detail.", "Write a poem about the scene.", "A cat on a mat."],
    "math": ["Describe the figure.", "What is the man wearing?"],
    "multiple_choice": ["Describe the image.", "What is the man wearing?"],
}


@pytest.mark.parametrize("family, question", [(f, q) for f, qs in ON_TASK.items() for q in qs])
def test_on_task_questions_match_their_family_signature(family, question):
    assert off_task(family, question) is False


@pytest.mark.parametrize("family, question", [(f, q) for f, qs in OFF_TASK.items() for q in qs])
def test_off_task_questions_do_not(family, question):
    assert off_task(family, question) is True


def test_structured_options_count_as_the_posed_question():
    assert off_task("multiple_choice", "What is the man wearing?", ("a hat", "a coat")) is False


def test_a_family_without_signature_is_not_checked():
    assert off_task("generic", "Describe the image.") is None
    assert off_task("no_such_family", "anything") is None


def test_signatures_name_registered_families_only():
    assert set(TASK_SIGNATURES) <= set(FAMILIES)


def test_threshold_is_a_share():
    assert 0 < PURITY_THRESHOLD < 1


# --- the policy over a mixed pool ------------------------------------------------------------


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> ImageRef:
    path = tmp_path_factory.mktemp("img") / "a.png"
    Image.new("RGB", (4, 4), "red").save(path, "PNG")
    return ImageRef.from_file(path)


def pool(image: ImageRef, benchmark: int, mixed_on: int, mixed_off: int, family: str = "scene_text") -> list[PoolItem]:
    """Benchmark items first, then mixed-collection items: on-task, then off-task ones."""
    specs = ([("benchmark", f"What text appears in image {i}?") for i in range(benchmark)]
             + [("InfinityMM", f"What does sign {i} say?") for i in range(mixed_on)]
             + [("InfinityMM", f"Describe picture {i}.") for i in range(mixed_off)])
    return [PoolItem(id=f"i{n}", image=image, question=q, reference=f"W{n}", family=family,
                     source=Source(dataset="d", origin=origin), where=f"pool.jsonl:{n + 1}")
            for n, (origin, q) in enumerate(specs)]


def just_over(mixed: int) -> int:
    """The smallest off-task count whose share of ``mixed`` exceeds the threshold."""
    return math.floor(PURITY_THRESHOLD * mixed) + 1


def test_planted_share_over_the_threshold_keeps_only_benchmark_qa(image):
    mixed = 40
    off = just_over(mixed)
    items = pool(image, benchmark=5, mixed_on=mixed - off, mixed_off=off)
    report: dict = {}
    records = list(clean(items, report))
    assert [r.id if isinstance(r, Dropped) else r.item.id for r in records] == [i.id for i in items]
    kept = [r for r in records if isinstance(r, Admitted)]
    assert [r.item.source.origin for r in kept] == ["benchmark"] * 5
    dropped = [r for r in records if isinstance(r, Dropped)]
    assert len(dropped) == mixed and {r.reason for r in dropped} == {REASON}
    assert "scene_text" in dropped[0].detail and f"{off} of {mixed}" in dropped[0].detail
    family = report["purity"]["families"]["scene_text"]
    assert family["mixed"] == mixed and family["mixed_off_task"] == off and family["over_threshold"] is True
    assert family["off_task_share"] == pytest.approx(off / mixed, abs=1e-6) and family["dropped"] == mixed
    assert family["benchmark"] == 5 and family["benchmark_off_task"] == 0
    assert report["purity"]["threshold"] == PURITY_THRESHOLD


def test_planted_share_under_the_threshold_keeps_everything(image):
    mixed = 40
    off = just_over(mixed) - 1
    items = pool(image, benchmark=5, mixed_on=mixed - off, mixed_off=off)
    report: dict = {}
    records = list(clean(items, report))
    assert all(isinstance(r, Admitted) for r in records) and len(records) == 45
    family = report["purity"]["families"]["scene_text"]
    assert family["over_threshold"] is False and family["mixed_off_task"] == off and family["dropped"] == 0


def test_share_is_per_family(image):
    contaminated = pool(image, benchmark=2, mixed_on=0, mixed_off=3, family="scene_text")
    clean_family = [PoolItem(**{**i.__dict__, "id": f"v{n}", "family": "vqa", "question": "What colour is it?"})
                    for n, i in enumerate(pool(image, benchmark=0, mixed_on=3, mixed_off=0))]
    report: dict = {}
    records = list(clean(contaminated + clean_family, report))
    assert [isinstance(r, Admitted) for r in records] == [True, True, False, False, False, True, True, True]
    assert report["purity"]["families"]["vqa"]["off_task_share"] == 0.0


def test_a_family_of_benchmark_items_only_has_no_share(image):
    report: dict = {}
    list(clean(pool(image, benchmark=3, mixed_on=0, mixed_off=0), report))
    family = report["purity"]["families"]["scene_text"]
    assert family["off_task_share"] is None and family["over_threshold"] is False


def test_false_alarms_on_benchmark_items_are_reported_not_acted_on(image):
    items = pool(image, benchmark=2, mixed_on=0, mixed_off=0)
    items.append(PoolItem(id="odd", image=image, question="Describe it.", reference="X", family="scene_text",
                          source=Source(origin="benchmark"), where="pool.jsonl:3"))
    report: dict = {}
    assert all(isinstance(r, Admitted) for r in clean(items, report))
    assert report["purity"]["families"]["scene_text"]["benchmark_off_task"] == 1


def test_one_alternation_per_pattern_list_answers_as_the_patterns_one_by_one():
    """is_on_task searches each signature's pattern list as one regex (purity._compiled): it must
    match exactly where one of the patterns, searched alone, does (a pattern with a top-level
    flag or a numbered backreference would break that)."""
    import re

    from orandcar_builder.clean.purity import is_on_task

    questions = [q for qs in (*ON_TASK.values(), *OFF_TASK.values()) for q in qs] + [
        "", "?", "A) x\nB) y", "(c) x", "How many? 3 + 4 = 7", "Describe", "DESCRIBE THE SCENE", "in  detail",
        "tell me more", "what's going on", "List the words.\nLine two ends with a question?", "√2 × π",
        "\\frac{1}{2}", "pick one", "which one of the following", "Options : a", "according to the map"]
    for family, signature in TASK_SIGNATURES.items():
        def one_by_one(q, patterns):
            return any(re.search(p, q, re.IGNORECASE | re.MULTILINE) for p in patterns)

        for q in questions:
            expected = one_by_one(q, signature.requires) and not one_by_one(q, signature.excludes)
            assert is_on_task(q, signature) == expected, (family, q)
