"""Text a recipe gives the card (pretty_name, license, license_name, license_link, the access
prompt, heading and button, tags) cannot break the card: the YAML header (written by the YAML
dumper) reads back to the same values and ends where it should, and in the body (read as
CommonMark) the text opens no heading, list, rule, fence or HTML; it shows as written."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from orandcar_builder.card import CardOptions
from orandcar_builder.card.markdown import line_text, quoted
from orandcar_builder.card.render import render_card
from orandcar_builder.dataset.cardfile import load_yaml, split_card

HOSTILE_LINES = ["# heading", "## heading", "---", "===", "***", "___", "- item", "+ item", "* item", "1. item",
                 "2) item", "> quote", "```", "~~~", "    indented code", "<div>html</div>", "<script>x()</script>",
                 "<!-- comment -->", "&lt;b&gt;", "[link](javascript:x)", "![img](http://x/y.png)", "| a | b |",
                 "text `code", "\\", "#", "-", "1."]
BLOCKS = {"heading_open", "bullet_list_open", "ordered_list_open", "hr", "fence", "code_block", "html_block",
          "html_inline", "image", "link_open", "table_open"}


def tokens(markdown: str) -> list:
    out = []
    for token in MarkdownIt("commonmark").enable("table").parse(markdown):
        out.append(token)
        out.extend(token.children or [])
    return out


@pytest.mark.parametrize("line", HOSTILE_LINES)
def test_a_quoted_line_stays_text_in_the_quote(line):
    for text in (line, f"Agree.\n\n{line}\nmore", f"{line}\n{line}"):
        found = {t.type for t in tokens("> " + quoted(text) + "\n")}
        assert not found & BLOCKS, (text, found)
        assert [t.type for t in tokens("> " + quoted(text) + "\n") if t.type.endswith("_open")][0] == "blockquote_open"


@pytest.mark.parametrize("line", HOSTILE_LINES)
def test_a_heading_line_stays_one_heading(line):
    found = [t.type for t in tokens("# " + line_text(f"Name {line}\n{line}") + "\n")]
    assert found.count("heading_open") == 1 and not set(found) & (BLOCKS - {"heading_open"})
    assert found.count("heading_open") == 1


HOSTILE = CardOptions(
    pretty_name="Name\n---\n# Injected name heading\n<script>alert(1)</script>",
    license="mit`\n## Injected license heading",
    license_name="x` <b>bold</b> `y | z",
    license_link="https://example.org/\n# Injected link heading <img src=x onerror=alert(1)>",
    gated_heading="Heading\n---\nfoo: bar",
    gated_prompt="Agree.\n\n## Injected prompt heading\n<div>html</div>\n---\n- list\n```\ncode\n</blockquote><h1>x</h1>",
    gated_button="Button\n...\n---\n",
    tags=("a\n---\nb: c", "<i>t</i>"),
)


def headings(markdown: str) -> list[str]:
    found = tokens(markdown)
    return [found[i + 1].content for i, t in enumerate(found) if t.type == "heading_open"]


def test_hostile_options_keep_the_header_and_the_body_intact(sample_build):
    result, _ = sample_build
    text = render_card(result.out, result.report, options=HOSTILE)
    benign = render_card(result.out, result.report, options=CardOptions())
    header, body = split_card(text)
    # the front matter ends at the first '---' line, as the Hub reads it, and reads back the same values
    lines = text.split("\n")
    assert lines.index("---", 1) == len(text[:text.index("\n---\n", 3)].split("\n"))
    assert load_yaml(text[4:text.index("\n---\n", 3) + 1]) == header
    assert header["pretty_name"] == HOSTILE.pretty_name and header["license"] == HOSTILE.license
    assert header["license_name"] == HOSTILE.license_name and header["license_link"] == HOSTILE.license_link
    assert header["extra_gated_heading"] == HOSTILE.gated_heading
    assert header["extra_gated_prompt"] == HOSTILE.gated_prompt
    assert header["extra_gated_button_content"] == HOSTILE.gated_button
    assert header["tags"] == list(HOSTILE.tags)
    # the body: the same headings as a card of plain options (the title shows the name as written)
    found, plain = headings(body), headings(split_card(benign)[1])
    assert len(found) == len(plain) and found[1:] == plain[1:]
    assert not any("Injected" in h for h in found[1:])
    html_types = {"html_block", "html_inline"}
    assert (sum(t.type in html_types for t in tokens(body)) == sum(t.type in html_types
                                                                   for t in tokens(split_card(benign)[1])))
    rendered = MarkdownIt("commonmark").enable("table").render(body)
    for raw in ("<script>", "<div>html", "<b>bold", "<img src=x", "<h1>x", "</blockquote><h1>"):
        assert raw not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered
    assert "## Injected prompt heading" in rendered and "Injected license heading" in rendered  # shown as text


def test_plain_options_render_as_before(sample_build, built_sample):
    """The escapes change nothing for plain values: the sample card is byte-identical."""
    result, _ = sample_build
    assert render_card(result.out, result.report) == (built_sample / "README.md").read_text(encoding="utf-8")
