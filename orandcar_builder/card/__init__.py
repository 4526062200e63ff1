"""The dataset card (README.md of the dataset folder), rendered from the build report.

The YAML header's ``configs:`` block comes from ``loading_script/`` and its ``dataset_info``
from the features and the sizes the writer counted (measured on the shards only where no writer
summary describes them); every figure in the body comes from the build report, and every rule is
shown with its constants and its reference implementation as they are in the code, so the card
cannot disagree with the data or the code it describes.

``render_card`` reads the folder and returns the text; ``write_card`` also writes README.md and
the example images (``examples/<config>-<k>.<ext>``, the original bytes) beside it. Neither
depends on the clock, the machine or absolute paths: the same build renders the same bytes.

The modules, one job each:

- ``options``: what a maintainer chooses (``CardOptions``) and the YAML header;
- ``sizes``: rows and bytes per config, from the writer's summary (else measured);
- ``sections``: the sections built from the build report (production, families, rules, judge,
  cleaning, the acceptance chart);
- ``rules``: the rule-source renderer (self-contained code blocks of rules and extraction);
- ``schema``: the field tables of each config;
- ``examples``: the example rows and their image files;
- ``markdown``: escaping and the figures' spelling;
- ``render``: the templates, ``render_card``, ``write_card`` and ``rewrite_card``.
"""

from __future__ import annotations

from ..dataset.info import arrow_bytes, dataset_info, shard_paths
from ..dataset.layout import EXAMPLES_DIR
from .errors import CardError
from .examples import (BLOCK_VALUE_MAX_CHARS, EXAMPLES_PER_CONFIG, QA_ITEMS_SHOWN, TABLE_VALUE_MAX_CHARS, Example,
                       example_indices, examples, image_dimensions, image_extension, read_row)
from .markdown import (NAME_MAX_CHARS, NOT_RECORDED, bounded, cell, code_blocks, code_span, fence, figure_tables,
                       number, percent, size)
from .options import (DEFAULT_GATED_FIELDS, DEFAULT_GATED_PROMPT, DEFAULT_REPO_ID, CardOptions, card_header,
                      header_text, size_category)
from .render import load_report, render_card, rewrite_card, template_dir, write_card
from .rules import (CANDIDATES_BLOCK_PREFIX, PROJECT_PACKAGE, RULE_BLOCK_PREFIX, candidates_source,
                    extraction_section, rule_entries, rule_source, third_party_packages)
from .schema import ANSWER_NOTES, FIELD_NOTES, schema_tables
from .sections import (ACCEPTANCE_CHART, SHORT_CONSTANT_CHARS, acceptance_chart_png, cleaning_section,
                       engine_fingerprint, family_rows, family_rules, generation_facts, judge_section, rule_sections)
from .sizes import card_sizes, config_sizes

__all__ = [
    "ACCEPTANCE_CHART", "ANSWER_NOTES", "BLOCK_VALUE_MAX_CHARS", "CANDIDATES_BLOCK_PREFIX", "CardError", "CardOptions",
    "DEFAULT_GATED_FIELDS", "DEFAULT_GATED_PROMPT", "DEFAULT_REPO_ID", "EXAMPLES_DIR", "EXAMPLES_PER_CONFIG",
    "Example", "FIELD_NOTES", "NAME_MAX_CHARS", "NOT_RECORDED", "PROJECT_PACKAGE", "QA_ITEMS_SHOWN",
    "RULE_BLOCK_PREFIX", "SHORT_CONSTANT_CHARS", "TABLE_VALUE_MAX_CHARS", "acceptance_chart_png", "arrow_bytes",
    "bounded", "candidates_source", "card_header", "card_sizes", "cell", "cleaning_section", "code_blocks",
    "code_span", "config_sizes", "dataset_info", "engine_fingerprint", "example_indices", "examples",
    "extraction_section", "family_rows", "family_rules", "fence", "figure_tables", "generation_facts",
    "header_text", "image_dimensions", "image_extension", "judge_section", "load_report", "number", "percent",
    "read_row", "render_card", "rewrite_card", "rule_entries", "rule_sections", "rule_source", "schema_tables",
    "shard_paths", "size", "size_category", "template_dir", "third_party_packages", "write_card",
]
