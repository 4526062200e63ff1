"""Each rule's fast implementation agrees with its readable reference on generated pairs.

The corpus is built from each rule's edge cases (white space, case, punctuation, number words,
percentages, zero, option letters in many dresses, LaTeX) and random mutations of them, so both
passing and failing pairs are common.
"""

import random

import pytest

from orandcar_builder.verify import decide, get_rule, reference_decide

PAIRS_PER_RULE = 1200
MATH_PAIRS = 1000  # math-verify's reference path costs ms per pair: about 8 s, marked slow
SEED = 20261129
_UNICODE = "aé\u0301ßİﬁ😀 \t\u00a0-.,!?'\"/()"


def _mutate(rng: random.Random, text: str, alphabet: str) -> str:
    chars = list(text)
    for _ in range(rng.choice([0, 0, 1, 2, 4])):
        op = rng.random()
        pos = rng.randrange(len(chars) + 1)
        if op < 0.4:
            chars.insert(pos, rng.choice(alphabet))
        elif chars and op < 0.7:
            del chars[min(pos, len(chars) - 1)]
        elif chars:
            chars[min(pos, len(chars) - 1)] = rng.choice(alphabet)
    out = "".join(chars)
    if rng.random() < 0.3:
        out = out.upper() if rng.random() < 0.5 else out.title()
    if rng.random() < 0.2:
        out = rng.choice(["  ", " ", "\n"]) + out + rng.choice(["  ", ".", "!", " \t"])
    return out


def _text_pairs(rng, vocabulary, alphabet, max_refs=3):
    reference = rng.choice(vocabulary)
    refs = [reference] + [_mutate(rng, rng.choice(vocabulary), alphabet) for _ in range(rng.randrange(max_refs))]
    prediction = _mutate(rng, reference, alphabet) if rng.random() < 0.8 else rng.choice(vocabulary)
    return prediction, refs, None


_WORDS = ["hello world", "Invoice 1234", "total", "ACME Corp.", "straße", "İstanbul", "ﬁle", "12/05/2020",
          "", " ", "a", "x" * 40]


def _anls(rng):
    return _text_pairs(rng, _WORDS, "abcXY 1-." + _UNICODE)


_VQA_TOKENS = ["two", "2", "the", "a", "an", "dog", "dogs", "yes", "no", "don't", "dont", "couldn'tve", "1,000",
               "1000", "3.5", "U.S.A.", "red/blue", "e-mail", "none", "0", "it's", "x.", "(a)", "ten", "Im"]
_VQA_SEPARATORS = [" ", ", ", ",", " - ", "-", ".", "!", "\t", "\n", "? ", "/"]


def _vqa_phrase(rng):
    words = [rng.choice(_VQA_TOKENS) for _ in range(rng.randint(1, 3))]
    out = words[0]
    for word in words[1:]:
        out += rng.choice(_VQA_SEPARATORS) + word
    return out + rng.choice(["", "", ".", "!", "?"])


def _vqa(rng):
    answer = _vqa_phrase(rng)
    pool = [answer, _vqa_phrase(rng), _mutate(rng, answer, ".,!-/ ")]
    refs = [rng.choice(pool) for _ in range(rng.choice([1, 2, 3, 4, 5, 10, 10, 10]))]
    return answer, refs, None


def _number(rng):
    value = rng.choice([0, 0.0, 100, 96, 0.96, 1e3, -5, 12.5, 1 / 3, rng.uniform(-1000, 1000)])
    style = rng.random()
    if style < 0.3:
        return f"{value:.{rng.randint(0, 3)}f}"
    if style < 0.5:
        return f"{value * 100:g}%"
    if style < 0.6:
        return f"{value:e}"
    if style < 0.7:
        return f"{value:,.0f}"
    return rng.choice(["0", "-0", "0.0", "0%", "nan", "inf", "yes", "Yes", "Won't", "$5", "1_000", "5%%", "%", ""])


def _relaxed(rng):
    reference = _number(rng)
    if rng.random() < 0.5:
        number = rng.choice([0.9, 0.95, 0.96, 1.0, 1.04, 1.05, 1.06]) * (float(reference) if reference.replace(
            ".", "", 1).lstrip("-").isdigit() else 1.0)
        prediction = rng.choice([f"{number:g}", f"{number * 100:g}%", reference.upper()])
    else:
        prediction = _number(rng)
    return prediction, [reference] + [_number(rng) for _ in range(rng.randrange(2))], None


_OPTION_TEXTS = ["cat", "dog", "red fox", "fox", "A cat", "B", "stop", "go", "I", "the answer", "cat"]
# Option texts that are values (LaTeX, units, numbers), and replies that write values.
_VALUE_OPTIONS = ["$\\frac{1}{4}$", "$\\frac{1}{2}$", "$8-4\\sqrt{2}$", "$3 \\cdot 2^{5}$", "8 kg", "8 g", "$65°$",
                  "75", "25", "43.75", "$\\displaystyle 45^\\circ$", "\\text{B}", "a+b", "1:2", "0.5", "$2^{5}$"]
_VALUES = ["\\frac{1}{4}", "\\dfrac14", "96", "8\\,\\mathrm{kg}", "65^\\circ", "43.75", "\\frac{a+b}{2}", "1: 2",
           "x = 96", "0.25", "$32$", "45°", "All except B", "(b) 8 kg", "A cat", "_B", "**B**", "probably B",
           "Vitamin B", "A. 8 kg\nB. 8 g", "(A) because 8 kg"]
_LETTER_DRESS = ["{}", "({})", "{}.", "**{}**", "[{}]", "The answer is {}", "Answer: **{}**", "{}) {}", "{} or {}",
                 "I think {}", "{}, not {}", " {} ", "{}\n\nbecause", "option {}", "{}".lower()]


def _choice(rng):
    if rng.random() < 0.3:
        options = rng.sample(_VALUE_OPTIONS, rng.randint(2, 5))
        prediction = rng.choice(_VALUES + options)
        if rng.random() < 0.3:
            prediction = _mutate(rng, prediction, "AB ${}\\.,:")
        return prediction, [rng.choice("ABCD")], options
    options = rng.sample(_OPTION_TEXTS, rng.randint(2, 6)) if rng.random() < 0.85 else None
    letters = "ABCDEFGH"
    form = rng.random()
    if form < 0.6:
        dress = rng.choice(_LETTER_DRESS)
        picks = [rng.choice(letters) for _ in range(dress.count("{}"))]
        prediction = dress.format(*picks)
        if rng.random() < 0.2:
            prediction = prediction.lower()
    elif form < 0.85 and options:
        prediction = rng.choice(["{}", "It is {}.", "{}!", "The sign says {}"]).format(rng.choice(options))
    else:
        prediction = _mutate(rng, rng.choice(_OPTION_TEXTS), "ABC ().*")
    reference = rng.choice(["{}", "({})", "{}.", "{}"]).format(rng.choice(letters[:4]))
    if options and rng.random() < 0.15:
        reference = rng.choice(options)
    return prediction, [reference], options


_MATH = ["1:2", "1: 2", "2", "1:1", "1", "3 \\cdot 2 \\cdot 1 = 6", "6", "3 \\cdot 2 = 7", "11 5/6", "11 6/6", "4 0/0",
         "11\n5/6", "1+\\frac{1}{\\mathrm{e}}", "$2^{10}.$", "\\$16386.17", "16386.17", "158 + LK", "158",
         "\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}", "1, 3, \\ldots, 2n-1", "\\frac{1}{2}", "0.5", "1/2", "$\\frac{1}{2}$", "2x", "x2", "(1, 2)", "[1, 2]", "3", "3.0", "x = 3", "\\sqrt{2}",
         "1.414214", "50\\%", "50%", "A", "B", "10 cm", "\\frac{L}{n}", "\\frac{L}{n-1}", "\\frac{l}{n}", "12 and 13", "13",
         "yes", "\\boxed{3}", "1,000", "1000", "1e3", "45^\\circ", "45", "\\pi", "3.14159", "-3", "\\{1, 2\\}",
         "100000000000000000001", "100000000000000000000", "05", "5", "-0", "0"]


_MATH_PAIRS = [("1:1", "1"), ("1:2", "0.5"), ("1: 2", "2"), ("3 \\cdot 2 \\cdot 1 = 6", "6"), ("11 5/6", "71/6"),
               ("11 6/6", "12"), ("\\$16386.17", "16386.17"), ("$2^{10}.$", "1024"), ("0.5", "\\frac{1}{2}"),
               ("\\frac{1}{2^{98}}", "\\frac{1}{2^{99}}"), ("x = 3", "3"), ("3.0", "3"), ("50%", "0.5")]


def _math(rng):
    if rng.random() < 0.3:
        prediction, reference = rng.choice(_MATH_PAIRS)
        return (prediction, [reference], None) if rng.random() < 0.5 else (reference, [prediction], None)
    prediction = rng.choice(_MATH)
    if rng.random() < 0.2:
        prediction = " " + prediction.replace(" ", "  ") + " "
    return prediction, [rng.choice(_MATH)], None


def _exact(rng):
    return _text_pairs(rng, _WORDS + ["Straße", "STRASSE", "New  York", "new york"], " \t\u00a0\u2003aA" + _UNICODE)


def _alnum(rng):
    return _text_pairs(rng, ["HELLO", "hello!", "Hel-lo", "1432", "ll.850", "M. Este", "ﬁne", "İ"], "-. !" + _UNICODE)


GENERATORS = {"anls": _anls, "vqa": _vqa, "relaxed": _relaxed, "choice": _choice, "math": _math, "exact": _exact,
              "alnum": _alnum}


def corpus(rule_name: str, n: int = 0, seed: int = SEED):
    n = n or (MATH_PAIRS if rule_name == "math" else PAIRS_PER_RULE)
    rng = random.Random(f"{seed}:{rule_name}")
    return [GENERATORS[rule_name](rng) for _ in range(n)]


@pytest.mark.parametrize(
    "rule_name",
    [pytest.param(name, marks=pytest.mark.slow) if name == "math" else name for name in sorted(GENERATORS)],
)
def test_fast_and_reference_implementations_agree(rule_name):
    rule = get_rule(rule_name)
    outcomes = []
    for prediction, refs, options in corpus(rule_name):
        fast = decide(rule, prediction, refs, options)
        slow = reference_decide(rule, prediction, refs, options)
        assert fast[1] == slow[1] and fast[0] == pytest.approx(slow[0], abs=1e-12), (prediction, refs, options)
        outcomes.append(fast[1])
    # The corpus must exercise both outcomes, or agreement proves little.
    assert 0.05 * len(outcomes) <= sum(outcomes) <= 0.95 * len(outcomes)


def test_every_registered_rule_has_a_corpus():
    from orandcar_builder.verify import RULE_MODULES

    assert set(RULE_MODULES) == set(GENERATORS)
