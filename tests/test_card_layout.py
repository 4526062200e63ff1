"""The sample card as a reader sees it: rendered to HTML (markdown-it-py, CommonMark with tables
and raw HTML, as the Hub renders a card) and laid out by headless Chromium. What a reader wants
comes first (the contents, the sizes, the counts per family and per source dataset, the
examples), the rule sources are folded in <details> and come after them, every link of the
contents reaches its section, and the folding saves most of the page's height."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from .browser import ARTIFACTS_ENV, Chromium, browser_required, chromium_binary
from .conftest import REPO

STYLE = ("body{font-family:sans-serif;font-size:16px;line-height:1.5;max-width:860px;margin:0 auto;padding:16px}"
         "table{border-collapse:collapse;display:block;overflow-x:auto}td,th{border:1px solid #ccc;padding:2px 6px}"
         "pre{background:#f6f6f6;overflow-x:auto;padding:8px}img{max-width:100%}")

# Heading anchors as GitHub and the Hub make them (github-slugger), written apart from the card's
# own contents.py so the two are checked against each other.
LAYOUT = """
(() => {
  const seen = {};
  for (const h of document.querySelectorAll("h1, h2, h3, h4")) {
    let slug = h.textContent.trim().toLowerCase().replace(/[^\\p{L}\\p{N}\\p{M}_\\- ]/gu, "").replace(/ /g, "-");
    const n = seen[slug] || 0; seen[slug] = n + 1;
    h.id = n ? `${slug}-${n}` : slug;
  }
  const top = el => el ? Math.round(el.getBoundingClientRect().top + window.scrollY) : null;
  const h2 = {};
  for (const h of document.querySelectorAll("h2")) h2[h.textContent] = top(h);
  const contents = Array.from(document.querySelectorAll("ul a[href^='#']"))
    .filter(a => a.closest("ul").previousElementSibling?.textContent === "Contents");
  const ruleBlocks = Array.from(document.querySelectorAll("pre code"))
    .filter(c => c.textContent.startsWith("# rule: ") || c.textContent.startsWith("# candidates"));
  const examples = document.evaluate("//h2[.='Examples']", document, null, 9, null).singleNodeValue;
  const exampleImages = Array.from(document.images).filter(i => i.getAttribute("src").match(/^examples\\/(RS_|rejected)/));
  return {
    h2,
    contents: contents.map(a => ({text: a.textContent, target: a.getAttribute("href").slice(1),
                                  found: !!document.getElementById(a.getAttribute("href").slice(1))})),
    rule_blocks: ruleBlocks.map(c => ({in_details: !!c.closest("details"), open: !!c.closest("details")?.open,
                                      visible: c.closest("pre").checkVisibility()})),
    first_rule_block: top(ruleBlocks[0]?.closest("details")),
    first_example_image: top(exampleImages[0]),
    example_images: exampleImages.length,
    examples_end: top(examples?.nextElementSibling && document.evaluate(
      "//h2[.='Examples']/following-sibling::h2[1]", document, null, 9, null).singleNodeValue),
    first_example_table: top(examples && document.evaluate(
      "//h2[.='Examples']/following-sibling::table[1]", document, null, 9, null).singleNodeValue),
    widest: Math.max(...Array.from(document.querySelectorAll("table")).map(t => t.scrollWidth)),
    body_width: document.body.clientWidth,
    height: document.documentElement.scrollHeight,
    text: document.body.innerText,
  };
})()
"""


@pytest.fixture(scope="module")
def browser():
    binary = chromium_binary()
    missing = ("chromium is not installed (apt-get install -y chromium)" if binary is None else
               "websocket-client (the test extra) is not installed" if importlib.util.find_spec("websocket") is None
               else "markdown-it-py (the test extra) is not installed" if importlib.util.find_spec("markdown_it") is None
               else None)
    if missing:
        if browser_required():
            pytest.fail(f"{missing}, and this run requires the browser tests")
        pytest.skip(f"{missing}; the card's browser test needs it")
    with Chromium(binary, width=900, height=900) as chromium:
        yield chromium


def card_page(folder: Path) -> Path:
    """The card of ``folder`` as an HTML page beside it (its example images load from there)."""
    from markdown_it import MarkdownIt

    from orandcar_builder.dataset.cardfile import split_card

    _, body = split_card((folder / "README.md").read_text(encoding="utf-8"))
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(body)
    page = folder / "card.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>card</title><style>{STYLE}</style>"
                    f"</head><body>{html}</body></html>", encoding="utf-8")
    return page


def _keep(shot: Path) -> Path:
    keep = Path(os.environ.get(ARTIFACTS_ENV) or REPO / "test-artifacts") / shot.name
    keep.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, keep)
    return keep


def test_the_card_puts_counts_and_examples_before_the_folded_rule_sources(browser, sample_copy, tmp_path):
    browser.load(card_page(sample_copy).as_uri())
    layout = browser.evaluate(LAYOUT)
    assert browser.errors() == []
    h2 = layout["h2"]
    # the contents: one link per section, each reaching its heading
    assert [c["text"] for c in layout["contents"]] == list(h2)
    assert [c for c in layout["contents"] if not c["found"]] == []
    # what a reader wants, first: sizes, counts per family and per source, then the examples
    firsts = ["At a glance", "Counts per family", "Source datasets", "Examples"]
    assert list(h2)[:4] == firsts and [h2[name] for name in firsts] == sorted(h2[name] for name in firsts)
    assert layout["example_images"] == 9
    examples_end = layout["examples_end"]
    assert h2["Examples"] < layout["first_example_image"] < layout["first_example_table"] < examples_end
    # ... all of it above every rule source, which is folded: in a closed <details>, not shown
    blocks = layout["rule_blocks"]
    assert len(blocks) >= 3 and all(b["in_details"] and not b["open"] and not b["visible"] for b in blocks)
    assert examples_end <= h2["How a match is decided"] < layout["first_rule_block"]
    # short questions are shown in full in their cell, line breaks escaped
    assert ("What is written in this image?\\nReply with only the text shown in the image, exactly as written, "
            "and nothing else.") in layout["text"]
    assert "in full below" not in layout["text"].split("Examples", 2)[2].split("How the data was produced")[0]
    assert layout["widest"] <= layout["body_width"] + 1  # no example table wider than the page
    shot = browser.screenshot(tmp_path / "card-sample.png", max_height=40000)
    print(f"screenshot of the sample card: {shot} (copy: {_keep(shot)}); {json.dumps(h2)}")

    # the folding is what keeps the page short: opened, the rule sources make it half as tall again
    folded = layout["height"]
    browser.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    opened = browser.evaluate("document.documentElement.scrollHeight")
    assert opened > 1.5 * folded, (folded, opened)
