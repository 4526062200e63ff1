"""``checked_fields`` decides the common pool line by a fast path; any other line goes through
``_checked_fields``, the check spelled out rule by rule. Both must give the same answer for every
value: the same fields, or the same PoolLineError (reason and words). Also ``parse_pool_line``
still returns its dict with a ``Source``."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from orandcar_builder import families as code_families
from orandcar_builder.pool import jsonl
from orandcar_builder.pool.jsonl import PoolLineError, checked_fields, parse_pool_line
from orandcar_builder.records import Source

TEXTS = st.one_of(st.sampled_from(["", " ", "\t\n", "x", " a ", "\u2003", "\u00a0b", "é"]), st.text(max_size=6))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, width=16), TEXTS)
FAMILY = st.one_of(st.sampled_from(["scene_text", "vqa", "multiple_choice", "generic", "poetry", "VQA", ""]), SCALARS)
ANSWER = st.one_of(SCALARS, st.lists(st.one_of(TEXTS, SCALARS), max_size=3))
OPTIONS = st.one_of(st.none(), SCALARS, st.lists(st.one_of(TEXTS, st.integers()), max_size=4),
                    st.lists(st.just("o"), min_size=25, max_size=28))
SOURCE = st.one_of(st.none(), SCALARS, st.lists(SCALARS, max_size=2),
                   st.dictionaries(st.sampled_from(["dataset", "split", "id", "origin", "image", "image_sha256",
                                                    "colour"]), SCALARS, max_size=4))
LINE = st.fixed_dictionaries({}, optional={
    "id": st.one_of(TEXTS, SCALARS), "image": st.one_of(TEXTS, SCALARS), "question": st.one_of(TEXTS, SCALARS),
    "answer": ANSWER, "family": FAMILY, "options": OPTIONS, "source": SOURCE, "extra": SCALARS})


# Mutations of a good line: each replaces or removes one field (the fast path's own ground).
_VALUES = ["", " ", "\u2003", "x", " x ", "é", None, 0, 1.5, True, [], ["a"], ["a", ""], ["a", " b"], ["a", 2],
           ["a", "b"], [f"o{i}" for i in range(26)], [f"o{i}" for i in range(27)], {}, {"origin": "InfinityMM"},
           {"origin": None}, {"origin": ""}, {"colour": "red"}, {"split": 3}, {"image": "a.png", "id": None},
           "poetry", "scene_text", "multiple_choice", "Vqa", np.str_("x")]
_FIELDS = ["id", "image", "question", "answer", "family", "options", "source"]


def _near_good_lines(n: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(n):
        line = {"id": "q1", "image": "img/a.png", "question": "What is written?", "answer": "STOP", "family": "vqa"}
        if rng.random() < 0.5:
            line["options"] = ["STOP", "GO"]
        if rng.random() < 0.5:
            line["source"] = {"origin": "InfinityMM", "dataset": "d", "image": None}
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            key = rng.choice(_FIELDS)
            if rng.random() < 0.15:
                line.pop(key, None)
            else:
                line[key] = rng.choice(_VALUES)
        yield line


def _answer(check, obj):
    try:
        return ("fields", check(obj))
    except PoolLineError as exc:
        return ("error", exc.reason, exc.detail)


def _slow(obj):
    return jsonl._checked_fields(obj, code_families.DEFAULT_FAMILIES)


@settings(max_examples=1500, deadline=None)
@given(LINE)
def test_fast_path_answers_as_the_rule_by_rule_check(obj):
    assert _answer(checked_fields, obj) == _answer(_slow, obj)


def test_fast_path_answers_as_the_rule_by_rule_check_near_good_lines():
    answers = [(_answer(checked_fields, obj), _answer(_slow, obj)) for obj in _near_good_lines(5000)]
    assert all(fast == slow for fast, slow in answers)
    passed = sum(fast[0] == "fields" for fast, _ in answers)
    assert 1000 < passed < 4000  # both outcomes are well exercised


@settings(max_examples=300, deadline=None)
@given(st.one_of(SCALARS, st.lists(SCALARS, max_size=2)))
def test_a_line_that_is_no_object_is_refused_alike(obj):
    assert _answer(checked_fields, obj) == _answer(_slow, obj)


def test_a_good_line_takes_the_fast_path_and_others_fall_back(monkeypatch):
    good = {"id": "q1", "image": "a.png", "question": "What?", "answer": ["A", "b"], "family": "vqa",
            "options": ["x", "y"], "source": {"origin": "InfinityMM", "split": None}}
    expected = ("q1", "a.png", "What?", ("A", "b"), "vqa", ("x", "y"), {"origin": "InfinityMM"})
    calls = []
    slow = jsonl._checked_fields
    monkeypatch.setattr(jsonl, "_checked_fields", lambda obj, registry: calls.append(obj) or slow(obj, registry))
    assert checked_fields(good) == expected and calls == []
    # A str subclass (numpy's, as an importer may hand over) is not decided fast, but passes.
    odd = dict(good, question=np.str_("What?"))
    assert checked_fields(odd) == expected and calls == [odd]


def test_parse_pool_line_keeps_its_dict_and_source():
    fields = parse_pool_line({"id": "q", "image": "a.png", "question": "Q?", "answer": "A", "family": "vqa"})
    assert fields == {"id": "q", "image": "a.png", "question": "Q?", "answer": "A", "family": "vqa",
                      "options": None, "source": Source()}
    fields = parse_pool_line({"id": "q", "image": "a.png", "question": "Q?", "answer": "A", "family": "vqa",
                              "source": {"origin": "", "image": None}})
    assert fields["source"] == Source(origin="")
