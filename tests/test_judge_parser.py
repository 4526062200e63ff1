"""The judge's verdict parser on realistic replies: what promotes, what never does."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orandcar_builder.judge import parse_verdict
from orandcar_builder.vocab import VERDICT_CORRECT as CORRECT
from orandcar_builder.vocab import VERDICT_LABELS as LABELS
from orandcar_builder.vocab import VERDICT_UNSURE as UNSURE
from orandcar_builder.vocab import VERDICT_WRONG as WRONG

U = (UNSURE, False)  # unparseable

# (judge reply, expected (label, parseable))
REPLIES = [
    # the requested format
    ("Verdict: CORRECT", (CORRECT, True)),
    ("Verdict: WRONG", (WRONG, True)),
    ("Verdict: UNSURE", (UNSURE, True)),
    ("The candidate writes 0.5 and the reference is 1/2; same value.\nVerdict: CORRECT", (CORRECT, True)),
    ("The reference is 12, the candidate says 12.5.\n\nVerdict: WRONG", (WRONG, True)),
    ("The reference reads 'N/A ???' and cannot be compared.\nVerdict: UNSURE", (UNSURE, True)),
    # reasoning blocks, closed or stray
    ("<think>\nThe candidate says 7, the reference 7. Verdict: WRONG? no, same.\n</think>\n\nVerdict: CORRECT",
     (CORRECT, True)),
    ("Compare 3 and 4, they differ, so it is wrong... wait the reference is 3.\n</think>\nVerdict: CORRECT",
     (CORRECT, True)),
    ("<think>They match, CORRECT.</think>", U),  # nothing after the reasoning
    ("<think>Reference 5, candidate 5, so Verdict: CORRECT", U),  # thinking never ended
    ("<think>first</think>\n<think>second</think>\nVerdict: WRONG", (WRONG, True)),
    # markdown, case, punctuation
    ("**Verdict: CORRECT**", (CORRECT, True)),
    ("**Verdict:** **WRONG**", (WRONG, True)),
    ("**Final answer: WRONG**", (WRONG, True)),
    ("Final Verdict: *correct*.", (CORRECT, True)),
    ("verdict: wrong!", (WRONG, True)),
    ("VERDICT - UNSURE", (UNSURE, True)),
    ("### Verdict\nCORRECT", (CORRECT, True)),
    ("## Final verdict\n\nThe candidate is incorrect.", (WRONG, True)),
    ("`Verdict: CORRECT`", (CORRECT, True)),
    ("> **Judgment:** Correct", (CORRECT, True)),
    ("- Verdict: WRONG", (WRONG, True)),
    ("So the verdict is: **UNSURE**.", (UNSURE, True)),
    ("Verdict: CORRECT (units do not matter)", (CORRECT, True)),
    ("$\\boxed{CORRECT}$", (CORRECT, True)),
    ("Final answer: \\boxed{\\text{WRONG}}", (WRONG, True)),
    # negation and incorrect
    ("Verdict: NOT CORRECT", (WRONG, True)),
    ("Verdict: not correct.", (WRONG, True)),
    ("Verdict: INCORRECT", (WRONG, True)),
    ("Incorrect.", (WRONG, True)),
    ("The candidate gives Paris, the reference Lyon, so the candidate is not correct.", (WRONG, True)),
    ("The candidate isn't correct.", (WRONG, True)),
    ("The candidate is not the correct answer.", U),  # the negation is elsewhere: never CORRECT
    ("The candidate's 8 does not match the reference 7, which is correct.", U),
    ("Verdict: the candidate does not match; the reference is correct", U),
    ("Verdict: not wrong", U),
    ("Verdict: partially correct", U),
    ("Verdict: not entirely correct", U),
    ("The answer is mostly correct but misses the unit.", U),
    # a standalone verdict word, a trailing verdict word
    ("Both say 'bridgestone'; only the case differs.\n\nCORRECT", (CORRECT, True)),
    ("The reference is 'cat' and the candidate 'dog'.\nWrong.", (WRONG, True)),
    ("[UNSURE]", (UNSURE, True)),
    ("Same number, written as 1,000 versus 1000, so the candidate is correct.", (CORRECT, True)),
    ("CORRECT\n\nThe candidate matches the reference apart from spacing.", (CORRECT, True)),
    ("Reference 5 km, candidate 5000 m: the same distance. Hence, CORRECT.", (CORRECT, True)),
    # two verdicts
    ("Verdict: CORRECT or WRONG", U),
    ("Verdict: CORRECT / WRONG / UNSURE", U),
    ("Verdict: CORRECT\nVerdict: WRONG\nVerdict: UNSURE", U),
    ("CORRECT\nWRONG", U),
    ("The reference is correct but the candidate is wrong.", U),
    ("Verdict: WRONG\n\nOn second thought the reference 1/2 equals 0.5.\n\nVerdict: CORRECT", (CORRECT, True)),
    # no verdict at all
    ("", U),
    ("   \n\n  ", U),
    ("The answer to the question is 42.", U),
    ("Final answer: 42", U),
    ("I cannot see the image, so I cannot tell.", U),
    ("The question asks for the total area.", U),
    ("Is the candidate correct? Yes.", U),
    ("I think it is correct, but not sure", U),
    ("Verdict:", U),
    ("Correctness depends on the reference.", U),
]


def test_the_table_is_large_enough():
    assert len(REPLIES) >= 25


@pytest.mark.parametrize("reply, expected", REPLIES, ids=range(len(REPLIES)))
def test_parse_verdict(reply, expected):
    assert parse_verdict(reply) == expected


_NEGATED_CORRECT = re.compile(r"(?:\bnot|n't)\s+(?:\w+\s+){0,2}correct", re.IGNORECASE)


@pytest.mark.parametrize("reply", [r for r, _ in REPLIES if _NEGATED_CORRECT.search(r)])
def test_a_negated_correct_never_reads_correct(reply):
    assert parse_verdict(reply)[0] != CORRECT
    assert parse_verdict(reply.replace("\n", " ")) != (CORRECT, True)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_never_raises_and_unparseable_is_unsure(reply):
    label, parseable = parse_verdict(reply)
    assert label in LABELS
    assert parseable or label == UNSURE


# No vowels: the filler can never spell a verdict word or a verdict key such as "answer".
_FILLER = st.text(alphabet="bhkmpqxyz0123456789 .,;()\n", max_size=200)


@settings(max_examples=200, deadline=None)
@given(_FILLER, st.sampled_from(LABELS))
def test_a_final_verdict_line_after_any_prose_decides(prose, label):
    assert parse_verdict(f"{prose}\nVerdict: {label}") == (label, True)
