"""The card's table of contents: a list of links to its level-2 sections, made from the rendered
text itself (between ``CONTENTS_START`` and ``CONTENTS_END``, HTML comments the Hub does not
show), so it lists exactly the sections the card has; ``orandcar push --tag`` makes it again after
adding the Versions section.

A link's target is the anchor the Hub (like GitHub) gives a heading: its text as shown (inline
code without its backticks), lower-cased, punctuation other than ``-`` and ``_`` removed, spaces
as ``-``; a repeated heading gets ``-1``, ``-2``, ...
"""

from __future__ import annotations

import re

CONTENTS_START = "<!-- orandcar:contents -->"
CONTENTS_END = "<!-- /orandcar:contents -->"
CONTENTS_TITLE = "Contents"

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def heading_text(markdown: str) -> str:
    """A heading's text as shown: inline code without its backticks, escapes resolved."""
    text = _CODE_SPAN.sub(lambda m: m.group(2).strip(), markdown)
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text).strip()


def anchor(text: str) -> str:
    """The anchor of a heading whose shown text is ``text``."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def headings(markdown: str, level: int = 2) -> list[str]:
    """The headings of ``level`` in ``markdown`` (their markdown), in order; fenced code skipped."""
    out, fence = [], None
    prefix = "#" * level + " "
    for line in markdown.split("\n"):
        match = _FENCE.match(line)
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and not line.strip().strip(fence[0]):
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        if line.startswith(prefix):
            out.append(line[len(prefix):].strip())
    return out


def contents(markdown: str) -> str:
    """The table of contents of ``markdown``, between its markers."""
    seen: dict[str, int] = {}
    lines = [CONTENTS_START, f"**{CONTENTS_TITLE}**", ""]
    for heading in headings(markdown):
        target = anchor(heading_text(heading))
        n = seen.get(target, 0)
        seen[target] = n + 1
        lines.append(f"- [{heading}](#{target}{f'-{n}' if n else ''})")
    lines.append(CONTENTS_END)
    return "\n".join(lines) + "\n"


def with_contents(markdown: str) -> str:
    """``markdown`` with the part between its contents markers made again from its headings; a
    text without the markers is returned as it is."""
    start = markdown.find(CONTENTS_START + "\n")
    end = markdown.find(CONTENTS_END + "\n", start) if start >= 0 else -1
    if start < 0 or end < 0:
        return markdown
    return markdown[:start] + contents(markdown) + markdown[end + len(CONTENTS_END) + 1:]
