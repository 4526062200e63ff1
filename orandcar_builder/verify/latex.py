"""One LaTeX normalisation, shared by ``math`` and ``choice``.

Option texts and replies write the same value in many ways: ``$\\frac{1}{4}$`` and
``\\dfrac14``, ``$\\displaystyle 45^\\circ$`` and ``45°``, ``8\\,\\mathrm{kg}`` and ``8 kg``. Two
levels, each a list of named steps applied in order (``STEPS``, the card renders them):

``clean_latex(text)`` keeps the text a formula math-verify can parse:

- ``trailing_punctuation``: a period, comma or semicolon right before a closing delimiter goes
  (``$2^{10}.$`` is ``$2^{10}$``: math-verify reads the first as 2);
- ``delimiters``: math delimiters dropped (``$$``, ``$``, ``\\(``, ``\\)``, ``\\[``, ``\\]``); an
  escaped dollar (``\\$5``, a currency sign) is dropped with them;
- ``sizing``: ``\\displaystyle``, ``\\textstyle``, ``\\left``, ``\\right`` and the ``\\big``
  family dropped (``\\left(`` is ``(``);
- ``fractions``: ``\\dfrac`` and ``\\tfrac`` are ``\\frac``;
- ``spacing``: ``\\,``, ``\\;``, ``\\:``, ``\\ ``, ``~``, ``\\quad``, ``\\qquad`` are a space,
  ``\\!`` nothing;
- ``wrappers``: ``\\text{..}``, ``\\mathrm{..}``, ``\\textrm{..}``, ``\\mathbf{..}``,
  ``\\textbf{..}``, ``\\mbox{..}``, ``\\operatorname{..}`` give their content (``\\mathrm{e}`` is
  ``e``: math-verify stops parsing at ``\\mathrm``);
- ``symbols``: ``^{\\circ}``, ``^\\circ``, ``\\circ``, ``\\degree`` are ``°``; ``\\%`` is ``%``;
  ``−`` (minus sign) is ``-``; ``²``, ``³`` are ``^2``, ``^3``; ``×`` is ``\\times``, ``·`` and
  ``⋅`` are ``\\cdot``, ``÷`` is ``\\div``, ``√`` is ``\\sqrt``, ``π`` is ``\\pi``;
- ``degree_words``: "degrees", "degree" or "deg" right after a number is ``°`` ("45 degrees" is
  "45°");
- white space collapsed.

``latex_key(text)`` is for comparing texts: ``clean``, then

- ``single_braces``: braces around a single token dropped (``2^{5}`` is ``2^5``,
  ``\\frac{1}{4}`` is ``\\frac14``, ``{x}`` is ``x``), repeatedly;
- ``no_space``: every white space removed; letters case-folded.

Two texts with the same ``latex_key`` write the same value; the converse is math-verify's job.
``NORMALISATION_VERSION`` changes whenever a key changes.
"""

from __future__ import annotations

import functools
import re

NORMALISATION_VERSION = "1"
_TRAILING_PUNCTUATION = re.compile(r"\s*[.,;]\s*(?=\$|\\\)|\\\])")

_ESCAPED_DOLLAR = re.compile(r"\\\$")
_DELIMITERS = re.compile(r"\\\$|\$\$|\$|\\\(|\\\)|\\\[|\\\]")
_SIZING = re.compile(r"\\(?:displaystyle|textstyle|scriptstyle|left|right|[bB]ig{1,2}[lr]?)(?![A-Za-z])\.?")
_FRACTIONS = re.compile(r"\\[dt]frac(?![A-Za-z])")
_SPACING = re.compile(r"\\[,;:> ]|~|\\q?quad(?![A-Za-z])")
_NEG_SPACE = re.compile(r"\\!")
_WRAPPER = re.compile(r"\\(?:text|mathrm|textrm|mathbf|textbf|mbox|operatorname|textit|mathit)\s*\{")
_SYMBOLS = (("^{\\circ}", "°"), ("^\\circ", "°"), ("\\circ", "°"), ("\\degree", "°"), ("\\%", "%"),
            ("−", "-"), ("²", "^2"), ("³", "^3"), ("×", "\\times "), ("·", "\\cdot "), ("⋅", "\\cdot "),
            ("÷", "\\div "), ("√", "\\sqrt"), ("π", "\\pi "))
_DEGREE_WORDS = re.compile(r"(?<=\d)\s*(?:degrees|degree|deg)(?![A-Za-z])", re.IGNORECASE)
# A brace pair around one token: a digit run, a letter, or a command ("{5}", "{x}", "{\\pi}").
_SINGLE_BRACES = re.compile(r"\{\s*(\d+(?:\.\d+)?|[A-Za-z]|\\[A-Za-z]+|°)\s*\}")
STEPS = ("trailing_punctuation", "delimiters", "sizing", "fractions", "spacing", "wrappers", "symbols", "degree_words",
         "single_braces", "no_space")
CONSTANTS = ("STEPS", "NORMALISATION_VERSION")


def _unwrap(text: str) -> str:
    """``\\text{..}``-like wrappers replaced by their content (balanced braces); an unbalanced
    wrapper is left as it is."""
    out, pos = [], 0
    for _ in range(len(text)):  # bounded: each pass consumes at least one wrapper
        match = _WRAPPER.search(text, pos)
        if match is None:
            break
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:
            break
        out.append(text[pos:match.start()])
        out.append(_unwrap(text[match.end():i - 1]) if "\\" in text[match.end():i - 1] else text[match.end():i - 1])
        pos = i
    out.append(text[pos:])
    return "".join(out)


@functools.lru_cache(maxsize=1 << 14)
def clean_latex(text: str, delimiters: bool = True) -> str:
    """``text`` with the ``clean`` steps applied (see the module docstring); with
    ``delimiters=False`` the math delimiters stay (math-verify finds ``$..$`` inside prose) and
    only an escaped dollar goes."""
    text = _TRAILING_PUNCTUATION.sub("", text)
    text = _DELIMITERS.sub(" ", text) if delimiters else _ESCAPED_DOLLAR.sub("", text)
    text = _SIZING.sub("", text)
    text = _FRACTIONS.sub(r"\\frac", text)
    text = _NEG_SPACE.sub("", text)
    text = _SPACING.sub(" ", text)
    text = _unwrap(text)
    for latex, symbol in _SYMBOLS:
        text = text.replace(latex, symbol)
    text = _DEGREE_WORDS.sub("°", text)
    return " ".join(text.split())


@functools.lru_cache(maxsize=1 << 14)
def latex_key(text: str) -> str:
    """``clean_latex(text)`` with single-token braces and all white space removed, case-folded."""
    text = clean_latex(text)
    for _ in range(8):  # nested single tokens: "{{5}}"
        reduced = _SINGLE_BRACES.sub(r"\1", text)
        if reduced == text:
            break
        text = reduced
    return "".join(text.split()).casefold()


def has_latex(text: str) -> bool:
    """Whether ``text`` holds LaTeX markup or a math delimiter (a backslash, ``$``, ``^``, ``_``)."""
    return any(mark in text for mark in ("\\", "$", "^", "_", "{"))
