"""``explain`` / ``format_explanation``: what ``orandcar check-answer`` prints."""

import pytest

from orandcar_builder.errors import UnknownNameError
from orandcar_builder.verify import EXTRACTION_VERSION, verify
from orandcar_builder.verify.explain import explain, format_explanation


def test_every_candidate_is_listed_and_the_decision_is_verifys():
    result = explain("vqa", "Two dogs.\nThere are two of them.", ["2 dogs"] * 3 + ["3"] * 7, None)
    assert (result["family"], result["rule"]) == ("vqa", "vqa")
    assert [(c["candidate"], c["passed"]) for c in result["candidates"]] == [("full", False), ("first_line", True)]
    assert result["candidates"][1]["score"] == pytest.approx(0.9)
    decision = verify("vqa", "Two dogs.\nThere are two of them.", ["2 dogs"] * 3 + ["3"] * 7)
    assert result["decision"] == {
        "rule": "vqa", "rule_version": decision.rule_version, "candidate": "first_line", "text": "Two dogs.",
        "score": decision.score, "passed": True, "extraction": "", "extraction_version": EXTRACTION_VERSION,
        "reject_kind": "",
    }
    assert result["extraction"] == {"version": EXTRACTION_VERSION, "pattern": "", "span": None}


def test_format_explanation_exact_text():
    result = explain("multiple_choice", "B\n\nIt barks.", ["B"], ["cat", "dog"])
    assert format_explanation(result) == "\n".join([
        "family:     multiple_choice",
        "rule:       choice (version 3)",
        "references: 'B'",
        "options:    A. cat  B. dog",
        "extraction: no explicit final-answer statement (version 2)",
        "  full              PASS   score 1.0000  'B\\n\\nIt barks.'",
        "                    extracted B; reference B",
        "  first_line        PASS   score 1.0000  'B'",
        "                    extracted B; reference B",
        "decision:   PASS (candidate full, score 1.0000)",
    ])


def test_format_explanation_shows_the_statement_and_its_pattern():
    answer = "The area of the rectangle ABEF is 4 x 2 = 8 cm^2.\nSo the ratio is 0.6.\n\n\\boxed{0.6}"
    result = explain("math", answer, ["8"], None)
    assert result["extraction"] == {"version": "2", "pattern": "boxed", "span": "0.6"}
    assert [c["candidate"] for c in result["candidates"]] == ["statement"]
    text = format_explanation(result)
    assert "extraction: boxed -> '0.6' (version 2); the statement alone is checked" in text
    assert text.endswith("decision:   REJECT (candidate statement, pattern boxed, score 0.0000, wrong_pick)")


def test_a_sentence_of_reasoning_is_said_to_be_not_searched():
    result = explain("math", "The area of the rectangle ABEF is 4 x 2 = 8 cm^2.\nI am not sure of the rest.", ["8"])
    first = result["candidates"][1]
    assert first["candidate"] == "first_line" and not first["passed"]
    assert first["detail"] == "a sentence (4 words or more): not searched for a value"


def test_rejected_and_empty_answers():
    text = format_explanation(explain("chart_qa", "<think>about 40</think>", ["41"], []))
    assert "candidates: none" in text and text.endswith("decision:   REJECT (candidate full, score 0.0000, no_pick)")
    text = format_explanation(explain("doc_vqa", "Invoice 1235", ["invoice 1234"], None))
    assert "REJECT score 0.9167" in text
    assert "distance 1 / length 12" in text


def test_unknown_family_is_named():
    with pytest.raises(UnknownNameError, match="did you mean 'doc_vqa'"):
        explain("docvqa", "x", ["x"], None)
