"""Rewrite the golden sample card (tests/golden/sample_card.md) from a fresh sample build.

Run it only when a change to the card is intended (or after bumping the pinned versions in
constraints.txt, which the OCR output and the parquet bytes depend on), then review the diff:

    python -m tests.update_golden

``test_golden_sample_card`` only compares; it never writes the golden file.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "sample_card.md"
SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def sample_card() -> str:
    """The card of the sample pool built with the engine the tests use (rapidocr, one thread),
    naming no git commit (as in the tests: conftest.py)."""
    import os

    os.environ["ORANDCAR_SOURCE_COMMIT"] = "none"
    from orandcar_builder.engines import create_engine
    from orandcar_builder.pipeline import build

    with tempfile.TemporaryDirectory(prefix="orandcar-golden-") as root:
        result = build(SAMPLES / "pool.jsonl", Path(root) / "OrandCar", work=Path(root) / "work",
                       engine=create_engine("rapidocr", threads=1), progress=False)
        if not result.ok:
            raise SystemExit("the sample build failed validation:\n" + "\n".join(result.problems))
        return (result.out / "README.md").read_text(encoding="utf-8")


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else GOLDEN
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(sample_card(), encoding="utf-8")
    print(f"wrote {target}: review the change (git diff) before committing it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
