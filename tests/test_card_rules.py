"""The code the card shows is the code that decided: every rule block of a rendered card, run on
its own, agrees with the production rule on a generated corpus of at least a thousand cases."""

from __future__ import annotations

import math
import random
import re

import pytest

from orandcar_builder.card import CANDIDATES_BLOCK_PREFIX, RULE_BLOCK_PREFIX, code_blocks, code_span, render_card
from orandcar_builder.verify import EXTRACTION_VERSION, RULE_MODULES, decide, get_rule, verify
from orandcar_builder.verify.candidates import final_answer_candidates
from orandcar_builder.verify.extract import EXAMPLES, EXTRACTION_PATTERNS, NUMBER_WORDS
from orandcar_builder.verify.shape import SENTENCE_WORDS

CORPUS_SIZE = 1000
_RULE_HEADER = re.compile(rf"^{re.escape(RULE_BLOCK_PREFIX)}(\S+) \(version (\S+)\)$")

# Texts that sit on the edges of one rule or another: case, punctuation, white space, numbers
# and percentages, number words and articles, contractions, option letters, LaTeX, non-ASCII.
VOCABULARY = (
    "HELLO", "hello", "Hello.", "Hel-lo!", "Straße", "STRASSE", "café", "cafe\u0301", "İstanbul", "ǅ", "ß",
    "the", "a", "an", "the cat", "a red car", "two", "2", "ten", "10", "none", "0", "0.0", "-0", "dont",
    "don't", "Im", "I'm", "yes", "no", "New York", "new  york", "1,000", "1000", "1,000.5", "96%", "0.96",
    "96", "0%", "5%%", "-3.5", "1e3", "nan", "inf", "$5", "3.", ".5", "3.14", "A", "B", "C", "D", "b",
    "(B)", "B.", "**C**", "[D]", "A or B", "The answer is B", "Answer: **C**", "I think C", "it says STOP",
    "STOP", "cat", "dog", "red", "blue", "x = 2", "2x", "x2", "\\frac{1}{2}", "1/2", "0.5", "\\sqrt{2}",
    "1.414214", "45^\\circ", "45", "10 cm", "\\{1, 2\\}", "{2, 1}", "π", "$\\frac{L}{n}$", "\\frac{l}{n}",
    "\\frac{L}{n-1}", "\\boxed{7}", "7", "12 and 13", "13", "a-b_c", "x.y", "e.g. this", "Mr. Smith",
    "", " ", "tab\there", "line one\nline two", "first\n\nsecond", "<think>hmm</think>B", "日本", "١٢٣",
)
_EDIT_CHARACTERS = "aAbB019 .,-%$'\n"


def _mutate(text: str, rng: random.Random) -> str:
    """A variant of ``text`` that some rules still accept and others do not."""
    kind = rng.randrange(12)
    if kind == 0:
        return text.upper()
    if kind == 1:
        return text.lower()
    if kind == 2:
        return f"  {text} "
    if kind == 3:
        return text + rng.choice(".!?")
    if kind == 4:
        return rng.choice(("(", "**", "$", "[")) + text + rng.choice((")", "**", "$", "]"))
    if kind == 5:
        return rng.choice(("The answer is ", "Answer: ", "It is ")) + text
    if kind == 6:
        return text + rng.choice(("\nBecause the sign says so.", "\n\nExplanation follows.", " or something"))
    if kind == 7 and text:
        i = rng.randrange(len(text))
        return text[:i] + text[i + 1:]
    if kind == 8:
        i = rng.randrange(len(text) + 1)
        return text[:i] + rng.choice(_EDIT_CHARACTERS) + text[i:]
    if kind == 9 and text:
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(_EDIT_CHARACTERS) + text[i + 1:]
    if kind == 10:
        return " ".join(text.split())
    return text


def corpus(rule: str, size: int = CORPUS_SIZE) -> list[tuple[str, list[str], list[str] | None]]:
    """``size`` (prediction, references, options) cases, the same for every run of one rule."""
    rng = random.Random(f"card-corpus-{rule}")
    cases = []
    while len(cases) < size:
        n_refs = rng.choice((1, 1, 1, 2, 3, 4, 10))
        if n_refs == 10:  # VQA-style: ten human answers that mostly agree
            base = rng.choice(VOCABULARY)
            references = [base if rng.random() < 0.5 else _mutate(base, rng) for _ in range(10)]
        else:
            references = [rng.choice(VOCABULARY) for _ in range(n_refs)]
        options = None
        if rng.random() < 0.35:
            options = rng.sample([v for v in VOCABULARY if v.strip()], rng.randint(2, 5))
            if rng.random() < 0.5:
                references = [rng.choice("ABCDE"[: len(options)]) if rng.random() < 0.7 else rng.choice(options)]
        roll = rng.random()
        if roll < 0.3:
            prediction = rng.choice(references)
        elif roll < 0.75:
            prediction = _mutate(rng.choice(references), rng)
        elif roll < 0.85 and options:
            prediction = _mutate(rng.choice(options), rng)
        else:
            prediction = rng.choice(VOCABULARY)
        cases.append((prediction, references, options))
    return cases


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0.0, abs_tol=1e-12)


@pytest.fixture(scope="module")
def all_rules_card(sample_build):
    """The sample card rendered as if the build had used every registered rule."""
    result, _ = sample_build
    report = {**result.report, "rules": {name: get_rule(name).VERSION for name in sorted(RULE_MODULES)}}
    return render_card(result.out, report)


def rule_blocks(markdown: str) -> dict[str, tuple[str, str]]:
    """rule name -> (version, code) for every python block of ``markdown`` that defines a rule."""
    found = {}
    for info, code in code_blocks(markdown):
        match = _RULE_HEADER.match(code.split("\n", 1)[0])
        if info == "python" and match and "def reference_score" in code:
            assert match.group(1) not in found, f"two blocks define rule {match.group(1)}"
            found[match.group(1)] = (match.group(2), code)
    return found


def _run(code: str, name: str) -> dict:
    namespace: dict = {"__name__": f"card_block_{name}"}
    exec(compile(code, f"<card block {name}>", "exec"), namespace)  # noqa: S102 - the card's own code
    return namespace


def _card_decision(namespace: dict, prediction, references, options) -> tuple[float, bool]:
    if "reference_decide" in namespace:
        value, passed = namespace["reference_decide"](prediction, references, options)
        return float(value), bool(passed)
    value = float(namespace["reference_score"](prediction, references, options))
    return value, bool(namespace["passes"](value))


def test_sample_card_has_a_block_for_every_rule_it_used(sample_build, all_rules_card):
    result, _ = sample_build
    text = (result.out / "README.md").read_text(encoding="utf-8")
    blocks = rule_blocks(text)
    assert set(blocks) == set(result.report["rules"]) and blocks
    everything = rule_blocks(all_rules_card)
    for name, block in blocks.items():
        assert block == everything[name]  # the same rendering, whichever other rules are present


@pytest.mark.parametrize("rule_name", sorted(RULE_MODULES))
def test_card_block_agrees_with_the_production_rule(rule_name, all_rules_card):
    blocks = rule_blocks(all_rules_card)
    assert rule_name in blocks, f"the card has no block for rule {rule_name}"
    version, code = blocks[rule_name]
    rule = get_rule(rule_name)
    assert version == rule.VERSION
    namespace = _run(code, rule_name)  # self-contained: runs in an empty namespace
    outcomes = {True: 0, False: 0}
    for prediction, references, options in corpus(rule_name):
        expected = decide(rule, prediction, references, options)
        got = _card_decision(namespace, prediction, references, options)
        assert got[1] == expected[1] and _same(got[0], expected[0]), (
            f"{rule_name}: card block decides {got} but the rule decides {expected} for "
            f"prediction={prediction!r} references={references!r} options={options!r}")
        outcomes[expected[1]] += 1
    # The corpus must exercise both sides of the rule, or agreement proves little.
    assert min(outcomes.values()) >= CORPUS_SIZE // 50, outcomes


def test_card_constants_are_the_modules_values(all_rules_card):
    for name, (_, code) in rule_blocks(all_rules_card).items():
        rule = get_rule(name)
        namespace = _run(code, name)
        for constant in rule.CONSTANTS:
            assert namespace[constant] == getattr(rule, constant), f"{name}.{constant}"


def _candidates_block(markdown: str) -> dict:
    blocks = [code for info, code in code_blocks(markdown)
              if info == "python" and code.startswith(CANDIDATES_BLOCK_PREFIX)]
    assert len(blocks) == 1
    return _run(blocks[0], "candidates")


# Pieces of final answers: reasoning, explicit statements of every pattern, conclusions, markup.
_PIECES = (
    "B", "The answer is B.", "\n", "\n\n", "  ", "<think>", "</think>", "reasoning", "\n \n", "x",
    "\\boxed{", "}", "\\boxed{\\text{C}}", "\\fbox{12}", "the correct answer is (C) 60°.", "**Answer:** ", "### Final answer",
    "Answer:", "the correct option is ", "option (B) is correct", "答案是", "选项为C。", "(D)", "A", "not ",
    "If the answer is A", "Therefore, the range is 7 miles.", "There are two bars.", "Chase will spend $18.",
    "I hope this helps!", "so 4 x 2 = 8 cm^2", "is about 2 inches", ", because it is red", "3:1", ". ", "。",
)


def test_candidates_block_agrees_with_production(all_rules_card):
    namespace = _candidates_block(all_rules_card)
    assert namespace["EXTRACTION_VERSION"] == EXTRACTION_VERSION
    rng = random.Random("card-candidates")
    answers = ["".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 10))) for _ in range(CORPUS_SIZE)]
    answers += [reply for _, reply, _ in EXAMPLES]
    patterns = set()
    for answer in answers:
        for conclusions in (False, True):
            expected = final_answer_candidates(answer, conclusions)
            assert namespace["final_answer_candidates"](answer, conclusions) == expected, repr(answer)
            patterns.update(extraction for _, _, extraction in expected)
    # The corpus must reach every pattern, or agreement proves little.
    assert patterns - {""} == set(EXTRACTION_PATTERNS), set(EXTRACTION_PATTERNS) - patterns


def test_card_states_the_sentence_of_reasoning_case(all_rules_card):
    """The matching section's example of a first line of reasoning that mentions the reference
    (decided in test_verify_extract): the card states it, and the threshold it gives is the code's."""
    flat = " ".join(all_rules_card.split())
    opening, closing = "The area of the rectangle ABEF is 4 x 2 = 8 cm^2.", "So the ratio of the areas is 0.6."
    assert f'opens with "{opening}"' in flat
    assert f'ends "{closing}"' in flat
    assert f"({NUMBER_WORDS[SENTENCE_WORDS]} words or more)" in flat
    assert not verify("math", f"{opening}\n\n{closing}", ["8"]).passed


def test_card_lists_every_pattern_with_its_example(all_rules_card):
    for name, reply, span in EXAMPLES:  # the whole row, as the card renders it
        assert f"| `{name}` | {code_span(reply)} | {code_span(span)} |" in all_rules_card, name
    assert [name for name, _, _ in EXAMPLES] == list(EXTRACTION_PATTERNS)
    namespace = _candidates_block(all_rules_card)
    for name, reply, span in EXAMPLES:  # each example, run through the card's own block
        found = [(extraction, text) for _, text, extraction in namespace["final_answer_candidates"](reply, True)
                 if extraction == name]
        assert found == [(name, span)], (name, reply)
