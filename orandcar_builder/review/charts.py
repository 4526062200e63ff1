"""The build's charts, drawn with matplotlib: the same inputs give the same bytes.

Used by the review page (SVG, embedded) and the dataset card (PNG under ``examples/``, which the
Hub renders). Everything that could make two renders differ is pinned: matplotlib's default style
(a user's matplotlibrc is ignored), the bundled DejaVu Sans font, the Agg and SVG backends
without pyplot (no display, no global figure state), a fixed SVG id salt, and no date or software
metadata in the files.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence, Union

from ..figures import BuildFigures
from ..vocab import ACCEPTED, NO_ANSWER, REJECTED, TRUNCATED, UNSURE, WRONG_ANSWER

# Route segments of the acceptance chart, in drawing order, and their colours (colour-blind safe).
ACCEPTED_BY_RULE = "accepted by rule"
PROMOTED_BY_JUDGE = "promoted by judge"
REJECTED_SEGMENT = "rejected"
FAILED_SEGMENT = "failed (no generation)"
SEGMENT_COLOURS = {
    ACCEPTED_BY_RULE: "#1b9e77",
    PROMOTED_BY_JUDGE: "#7570b3",
    REJECTED_SEGMENT: "#d95f02",
    FAILED_SEGMENT: "#9e9e9e",
}
# Rejection reasons the pipeline knows, in legend order; any other reason gets a colour from
# OTHER_COLOURS in name order.
REASON_COLOURS = {
    WRONG_ANSWER: "#d95f02",
    UNSURE: "#e6ab02",
    TRUNCATED: "#e7298a",
    NO_ANSWER: "#666666",
}
OTHER_COLOURS = ("#66a61e", "#a6761d", "#1f78b4", "#b2df8a", "#fb9a99", "#cab2d6")
COMPLETE_COLOUR = "#4c72b0"
TRUNCATED_COLOUR = "#e7298a"

LENGTH_LABELS_MAX = 16  # bins labelled per length panel; beyond it every second (third, ...) bin is
SVG_HASH_SALT = "orandcar-review"  # matplotlib derives SVG element ids from this salt
PNG_DPI = 144  # the card's PNG: sharp on high-density screens
_RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": SVG_HASH_SALT,
    "svg.fonttype": "path",  # glyphs as paths: the browser needs no font to draw the same picture
    "path.simplify": True,
}


@dataclass(frozen=True)
class FamilyCounts:
    """One family's QA items by outcome: the inputs of the per-family charts."""

    family: str
    accepted_by_rule: int = 0
    promoted: int = 0
    rejected: int = 0
    failed: int = 0
    rejected_by_reason: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.accepted_by_rule + self.promoted + self.rejected + self.failed

    @property
    def accepted(self) -> int:
        return self.accepted_by_rule + self.promoted


def family_counts_of(figures: Union[BuildFigures, Mapping]) -> list[FamilyCounts]:
    """Per-family counts from a build's figures (or report.json's content): what the card can
    draw. The figures do not record failed items per family, so ``failed`` is 0 here."""
    figures = BuildFigures.of(figures)
    overturns = (figures.judge.overturns_by_family if figures.judge is not None else None) or {}
    out = []
    for family, counts in sorted((figures.families or {}).items()):
        promoted = int((overturns.get(family) or {}).get("promoted", 0))
        reasons = {key[len(f"{REJECTED}_"):]: int(n) for key, n in counts.items()
                   if key.startswith(f"{REJECTED}_") and n}
        out.append(FamilyCounts(family=family, accepted_by_rule=int(counts.get(ACCEPTED, 0)) - promoted,
                                promoted=promoted, rejected=int(counts.get(REJECTED, 0)),
                                rejected_by_reason=dict(sorted(reasons.items()))))
    return out


def reason_colours(reasons: Iterable[str]) -> dict[str, str]:
    """A colour per reason: the known ones first, in REASON_COLOURS order, then the rest by name."""
    reasons = set(reasons)
    out = {r: c for r, c in REASON_COLOURS.items() if r in reasons}
    for i, reason in enumerate(sorted(reasons - set(REASON_COLOURS))):
        out[reason] = OTHER_COLOURS[i % len(OTHER_COLOURS)]
    return out


# --- rendering --------------------------------------------------------------------------------


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=PNG_DPI, layout="constrained")


def _save(fig, fmt: str) -> bytes:
    buf = io.BytesIO()
    if fmt == "svg":
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    elif fmt == "png":  # at the figure's dpi (PNG_DPI)
        fig.savefig(buf, format="png", metadata={"Software": None})
    else:
        raise ValueError(f"chart format must be svg or png, not {fmt!r}")
    return buf.getvalue()


def _render(draw, fmt: str, *args) -> bytes:
    import matplotlib
    import matplotlib.style

    with matplotlib.style.context("default"), matplotlib.rc_context(_RC):
        fig = draw(*args)
        return _save(fig, fmt)


def _family_height(n: int) -> float:
    return 1.3 + 0.32 * max(n, 1)


def _empty(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#555555")
    ax.set_axis_off()


def _draw_acceptance(families: Sequence[FamilyCounts], title: str):
    fig = _figure(7.5, _family_height(len(families)))
    ax = fig.add_subplot()
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    shown = [f for f in families if f.total]
    if not shown:
        _empty(ax, "no QA item reached a model")
        return fig
    names = [f.family for f in shown][::-1]  # first family on top
    rows = shown[::-1]
    segments = [(ACCEPTED_BY_RULE, [f.accepted_by_rule for f in rows]),
                (PROMOTED_BY_JUDGE, [f.promoted for f in rows]),
                (REJECTED_SEGMENT, [f.rejected for f in rows]),
                (FAILED_SEGMENT, [f.failed for f in rows])]
    segments = [(label, values) for label, values in segments
                if any(values) or label in (ACCEPTED_BY_RULE, REJECTED_SEGMENT)]
    left = [0.0] * len(rows)
    y = range(len(rows))
    for label, values in segments:
        shares = [100.0 * v / f.total for v, f in zip(values, rows)]
        ax.barh(y, shares, left=left, color=SEGMENT_COLOURS[label], label=label, height=0.7)
        left = [a + b for a, b in zip(left, shares)]
    ax.set_yticks(list(y), names)
    ax.set_xlim(0, 100)
    # The acceptance rate and item count as tick labels on the right: the layout makes room for them.
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yticks(list(y), [f"{100.0 * f.accepted / f.total:.0f}% of {f.total:,}" for f in rows], fontsize=8)
    right.tick_params(axis="y", length=0)
    right.spines["right"].set_visible(False)
    ax.set_xlabel("share of the family's QA items (%)")
    fig.legend(loc="outside lower center", ncols=len(segments), frameon=False, fontsize=8)
    return fig


def acceptance_chart(families: Sequence[FamilyCounts], fmt: str = "svg",
                     title: str = "Acceptance per family") -> bytes:
    """Per family, the share of QA items accepted by the rule, promoted by the judge, rejected
    (and failed, where any did), with the acceptance rate and item count beside each bar."""
    return _render(_draw_acceptance, fmt, list(families), title)


def _draw_reasons(families: Sequence[FamilyCounts], title: str):
    from matplotlib.ticker import MaxNLocator

    fig = _figure(7.5, _family_height(len(families)))
    ax = fig.add_subplot()
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    rows = [f for f in families if f.rejected][::-1]
    colours = reason_colours(r for f in rows for r, n in f.rejected_by_reason.items() if n)
    if not rows:
        _empty(ax, "nothing was rejected")
        return fig
    left = [0] * len(rows)
    y = range(len(rows))
    for reason, colour in colours.items():
        values = [int(f.rejected_by_reason.get(reason, 0)) for f in rows]
        ax.barh(y, values, left=left, color=colour, label=reason, height=0.7)
        left = [a + b for a, b in zip(left, values)]
    for i, total in enumerate(left):
        ax.text(total, i, f" {total:,}", va="center", fontsize=8)
    ax.set_yticks(list(y), [f.family for f in rows])
    ax.set_xlim(0, max(left) * 1.15)
    ax.set_xlabel("rejected QA items")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(loc="outside lower center", ncols=max(len(colours), 1), frameon=False, fontsize=8)
    return fig


def rejection_chart(families: Sequence[FamilyCounts], fmt: str = "svg",
                    title: str = "Rejection reasons per family") -> bytes:
    """Per family with any rejection, the rejected QA items stacked by reason."""
    return _render(_draw_reasons, fmt, list(families), title)


@dataclass(frozen=True)
class LengthHistogram:
    """Counts of texts per length bin (see ``length_bins``), complete and truncated apart."""

    label: str
    complete: Sequence[int]
    truncated: Sequence[int]


def bin_label(index: int) -> str:
    """Bin 0 holds empty texts; bin k >= 1 holds lengths from 2**(k-1) to 2**k - 1."""
    if index == 0:
        return "0"
    low, high = 2 ** (index - 1), 2 ** index - 1
    return _short_number(low) if low == high else f"{_short_number(low)}–{_short_number(high)}"


def _short_number(n: int) -> str:
    """``n`` in at most four characters, cut (not rounded) like the thousands: 16383 -> "16k"."""
    if n >= 10_000_000:
        return f"{n // 1_000_000}M"
    if n >= 1_000_000:
        return f"{n // 100_000 / 10:g}M"  # 1048575 -> "1M", 4194303 -> "4.1M" (was "1.04858M")
    if n >= 10_000:
        return f"{n // 1000}k"
    return str(n)


def _draw_lengths(histograms: Sequence[LengthHistogram], title: str, unit: str):
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    fig = _figure(7.5, 2.9)
    axes = fig.subplots(1, len(histograms), squeeze=False)[0]
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    for ax, hist in zip(axes, histograms):
        n = max(len(hist.complete), len(hist.truncated))
        complete = list(hist.complete) + [0] * (n - len(hist.complete))
        truncated = list(hist.truncated) + [0] * (n - len(hist.truncated))
        ax.set_title(hist.label, loc="left", fontsize=9)
        if not any(complete) and not any(truncated):
            _empty(ax, "no replies")
            continue
        x = range(n)
        ax.bar(x, complete, color=COMPLETE_COLOUR, width=0.8)
        ax.bar(x, truncated, bottom=complete, color=TRUNCATED_COLOUR, width=0.8)
        # Every bin labelled (every second, third... past LENGTH_LABELS_MAX bins), each label
        # ending under its own bar: rotated about its right end, which sits on the tick; steeper
        # when there are many, so that neighbours do not touch.
        step = -(-n // LENGTH_LABELS_MAX)
        ticks = list(range(0, n, step))
        ax.set_xticks(ticks, [bin_label(i) for i in ticks], rotation=45 if len(ticks) <= 10 else 60,
                      ha="right", va="center", rotation_mode="anchor", fontsize=8)
        ax.set_xlabel(f"length ({unit})")
        ax.set_ylabel("replies")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    handles = [Patch(color=COMPLETE_COLOUR, label="complete"),
               Patch(color=TRUNCATED_COLOUR, label="truncated (stopped at the token limit)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False, fontsize=8)
    return fig


def length_chart(histograms: Sequence[LengthHistogram], fmt: str = "svg",
                 title: str = "Lengths of the model's replies", unit: str = "characters") -> bytes:
    """One panel per histogram (reasoning, final answer): bars per length bin, truncated
    replies stacked on top in their own colour."""
    return _render(_draw_lengths, fmt, list(histograms), title, unit)

