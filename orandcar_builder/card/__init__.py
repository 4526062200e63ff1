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

# What is imported from ``orandcar_builder.card`` (the build, the CLI, tests and benchmarks); the
# rest is imported from the module that defines it.
from ..dataset.info import dataset_info
from .errors import CardError
from .examples import BLOCK_VALUE_MAX_CHARS, image_extension
from .markdown import NOT_RECORDED, code_blocks, code_span, fence
from .options import DEFAULT_REPO_ID, CardOptions
from .render import render_card, rewrite_card, write_card
from .rules import CANDIDATES_BLOCK_PREFIX, RULE_BLOCK_PREFIX
from .sections import ACCEPTANCE_CHART, acceptance_chart_png
from .sizes import card_sizes, config_sizes

__all__ = [
    "ACCEPTANCE_CHART", "BLOCK_VALUE_MAX_CHARS", "CANDIDATES_BLOCK_PREFIX", "CardError", "CardOptions",
    "DEFAULT_REPO_ID", "NOT_RECORDED", "RULE_BLOCK_PREFIX", "acceptance_chart_png", "card_sizes", "code_blocks",
    "code_span", "config_sizes", "dataset_info", "fence", "image_extension", "render_card", "rewrite_card",
    "write_card",
]
