"""The review page (work/report.html, `orandcar report`): what it reads, what it shows, that it is
small, deterministic and safe with untrusted text, and that a real browser renders it."""

from __future__ import annotations

import hashlib
import html
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

from orandcar_builder.cli import main
from orandcar_builder.pipeline import BuildFailed, build, format_summary
from orandcar_builder.review import ReviewError, review_after_build, write_review
from orandcar_builder.review.charts import (
    FamilyCounts,
    LengthHistogram,
    acceptance_chart,
    bin_label,
    family_counts_of,
    length_chart,
    rejection_chart,
)
from orandcar_builder.review.collect import PROMOTED_LISTED_MAX, SAMPLES_PER_KIND, collect, kind_of, sample_key
from orandcar_builder.review.page import render_review
from orandcar_builder.workdir import WorkDir

from .browser import ARTIFACTS_ENV, PAGE_CHECKS, Chromium, browser_required, chromium_binary
from .conftest import write_png, write_pool

REPO = Path(__file__).resolve().parents[1]
HOSTILE_QUESTION = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">Which word?'
HOSTILE_REPLY = '<b>bold</b><script>window.__pwned = 3</script>'


def _scene(k: int) -> dict:
    return {"id": f"s{k}", "image": f"img/s{k}.png", "question": "What is written in this image?",
            "answer": f"Word{k}", "family": "scene_text",
            "source": {"dataset": "review-test", "split": "test", "id": str(k), "origin": "benchmark"}}


@pytest.fixture(scope="module")
def judged_build(tmp_path_factory):
    """A small replayed build with everything the page shows: accepts, rule rejects the judge
    promotes or keeps, truncated replies, reasoning, a calibration with a disagreement, dropped
    lines, and a question and a reply holding HTML."""
    root = tmp_path_factory.mktemp("judged")
    lines, replies = [], []
    for k in range(16):
        write_png(root / "img" / f"s{k}.png", colour=(40 + 12 * k, 90, 200 - 10 * k), size=(60 + 4 * k, 24))
        lines.append(_scene(k))
        text, finish = {0: (f"Word{k}", "stop"), 1: (f"<think>The sign reads Word{k}; {'checking. ' * 40}</think>"
                                                     f"Word{k}", "stop"),
                        2: (f"Nope{k}", "stop"), 3: ("<think>Let me look closely at the", "length")}[k % 4]
        replies.append({"id": f"s{k}", "text": text, "finish_reason": finish})
    for k in range(6):
        write_png(root / "img" / f"v{k}.png", colour=(200, 20 * k, 20), size=(40, 40))
        lines.append({"id": f"v{k}", "image": f"img/v{k}.png", "question": "What colour is the square?",
                      "answer": "red", "family": "vqa"})
        replies.append({"id": f"v{k}", "text": "red" if k % 2 else "blue", "finish_reason": "stop"})
    write_png(root / "img" / "h.png", colour=(10, 10, 10), size=(50, 20))
    lines.append({"id": "hostile", "image": "img/h.png", "question": HOSTILE_QUESTION, "answer": "X",
                  "family": "scene_text"})
    replies.append({"id": "hostile", "text": HOSTILE_REPLY, "finish_reason": "stop"})
    lines.append("{not json")
    lines.append({"id": "gone", "image": "img/missing.png", "question": "What?", "answer": "a", "family": "vqa"})
    pool = write_pool(root / "pool.jsonl", lines)
    gens = root / "gens.jsonl"
    gens.write_text("".join(json.dumps(r) + "\n" for r in replies))

    # Judge replies: rule rejects with an answer alternate CORRECT / WRONG (the hostile one is
    # promoted); calibration items (rule accepts) all agree but s4, which the judge calls WRONG.
    wrong = [r["id"] for r in replies if r["id"] != "hostile" and r["finish_reason"] == "stop"
             and (r["text"].startswith("Nope") or r["text"] == "blue")]
    verdicts = {item_id: "Verdict: CORRECT" if i % 2 == 0 else "Verdict: WRONG" for i, item_id in enumerate(wrong)}
    verdicts["hostile"] = "Verdict: CORRECT"
    accepted = [r["id"] for r in replies if r["id"] not in verdicts and r["finish_reason"] == "stop"]
    verdicts.update({item_id: "It matches.\nVerdict: CORRECT" for item_id in accepted})
    verdicts["s4"] = "<i>No</i> the reference differs.\nVerdict: WRONG"
    judge_file = root / "verdicts.jsonl"
    judge_file.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in verdicts.items()))
    result = build(pool, root / "OrandCar", work=root / "work", engine_name="replay",
                   engine_options={"replay": gens}, judge="replay", judge_options={"replay": judge_file},
                   calibrate=50, progress=False)
    assert result.ok, result.problems
    return result


@pytest.fixture(scope="module")
def judged_page(judged_build) -> str:
    return WorkDir(judged_build.work).review.read_text(encoding="utf-8")


def _decisions(work: Path) -> list[dict]:
    return pq.read_table(work / "decisions.parquet").to_pylist()


# --- the page a build writes ---------------------------------------------------------------------


def test_every_build_writes_the_page(judged_build, sample_build):
    for result in (judged_build, sample_build[0]):
        page = WorkDir(result.work).review
        assert page.is_file() and page.stat().st_size > 10_000
        assert f"review page: {page}" in format_summary(result)
        assert "Written by <code>orandcar build</code> at the end of every build" in page.read_text(encoding="utf-8")


def test_counts_per_family_agree_with_the_build_report(judged_build, sample_build):
    for result in (judged_build, sample_build[0]):
        collected = collect(result.work / "decisions.parquet")
        from_decisions = {f.family: (f.accepted_by_rule, f.promoted, f.rejected, dict(f.rejected_by_reason))
                          for f in collected.family_counts()}
        from_report = {f.family: (f.accepted_by_rule, f.promoted, f.rejected, dict(f.rejected_by_reason))
                       for f in family_counts_of(result.report)}
        assert from_decisions == from_report
    promoted = sum(f.promoted for f in family_counts_of(judged_build.report))
    assert promoted == judged_build.report["judge"]["promoted"] > 0


def test_a_work_dir_from_before_the_final_answer_rename_still_reviews(judged_build, tmp_path):
    """decisions.parquet once named the model's final answer ``model_answer``: read under today's name."""
    table = pq.read_table(judged_build.work / "decisions.parquet")
    old = table.rename_columns(["model_answer" if n == "final_answer" else n for n in table.column_names])
    pq.write_table(old, tmp_path / "decisions.parquet")
    now, then = collect(judged_build.work / "decisions.parquet"), collect(tmp_path / "decisions.parquet", batch_rows=5)
    assert then.extra_columns == now.extra_columns == []
    assert then.final_answer.histogram() == now.final_answer.histogram()
    assert then.promoted == now.promoted and now.promoted
    assert {b: [s.row for s in v] for b, v in then.samples.items()} == {b: [s.row for s in v] for b, v in now.samples.items()}


@pytest.mark.parametrize("batch_rows", [1, 3, 4096])
def test_samples_are_the_items_with_the_smallest_keys(judged_build, batch_rows):
    rows = _decisions(judged_build.work)
    expected: dict[tuple, list[str]] = {}
    for row in rows:
        kind = kind_of(row["route"], row["reason"], row["verifier"])
        expected.setdefault((row["family"], kind), []).append(row["id"])
    expected = {bucket: sorted(ids, key=sample_key)[:SAMPLES_PER_KIND] for bucket, ids in expected.items()}
    collected = collect(judged_build.work / "decisions.parquet", batch_rows=batch_rows)
    assert {bucket: [s.row["id"] for s in items] for bucket, items in collected.samples.items()} == expected
    assert collected.rows == len(rows)


def test_the_page_shows_each_sampled_item_with_its_image(judged_build, judged_page):
    collected = collect(judged_build.work / "decisions.parquet")
    for items in collected.samples.values():
        for sampled in items:
            assert f"<code>{html.escape(sampled.row['id'])}</code> · pool position" in judged_page
    n = sum(len(items) for items in collected.samples.values())
    samples = judged_page.split('<h2 id="samples">', 1)[1]
    thumbs = re.findall(r'<div class="thumb"><img src="data:image/(?:png|jpeg);base64,', samples)
    assert len(thumbs) == n  # every sampled item of this build has its image
    # The question as sent, the references, the final answer, the rule's score and candidate.
    assert "What is written in this image?\nReply with only the text shown" in judged_page
    assert re.search(r"<code>alnum</code> v1: score 1, passed on candidate <code>full</code>", judged_page)
    assert "rejected: truncated" in judged_page


def test_every_promoted_item_and_every_calibration_disagreement_is_listed(judged_build, judged_page):
    promoted = [r["id"] for r in _decisions(judged_build.work) if r["verifier"] == "judge"]
    assert len(promoted) == judged_build.report["judge"]["promoted"] >= 3
    table = judged_page.split('<table id="promoted-table">', 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<tr><td><code>([^<]+)</code>", table) == promoted
    assert f"Every promoted item ({len(promoted)})" in judged_page
    calibration = judged_build.report["judge"]["calibration"]
    assert [d["id"] for d in calibration["disagreements"]] == ["s4"]
    assert f"<strong>{calibration['agreed']} of {calibration['n']}</strong>" in judged_page
    section = judged_page.split('id="calibration"', 1)[1].split('id="lengths"', 1)[0]
    assert "<code>s4</code>" in section and "&lt;i&gt;No&lt;/i&gt; the reference differs." in section
    assert 'alt="image of s4"' in section


def test_a_long_promoted_list_is_cut_and_counted(judged_build, monkeypatch):
    from orandcar_builder.review import page

    monkeypatch.setattr(page, "collect", lambda path, **kw: collect(path, **{**kw, "promoted_max": 1}))
    text, _, _ = render_review(judged_build.out, judged_build.work)
    total = judged_build.report["judge"]["promoted"]
    assert f"The first 1 in pool order are listed; the other {total - 1} are in" in text


def test_untrusted_text_is_escaped(judged_page):
    assert "<script" not in judged_page.lower()
    assert "onerror=" not in judged_page.replace("onerror=&#34;", "")
    assert html.escape(HOSTILE_QUESTION).replace("&#x27;", "&#39;") in judged_page.replace("&#34;", "&quot;")
    assert "&lt;b&gt;bold&lt;/b&gt;&lt;script&gt;window.__pwned = 3&lt;/script&gt;" in judged_page
    # Nothing on the page may load: the policy allows only embedded images and the inline style.
    assert "default-src 'none'; img-src data:; style-src 'unsafe-inline'" in judged_page
    assert not re.search(r"""(?:src|href)=["'](?!data:|#)""", judged_page)


def test_lengths_count_every_reply_and_mark_the_truncated(judged_build):
    rows = _decisions(judged_build.work)
    replied = [r for r in rows if r["route"] != "failed" and r["unsupported"] is None]
    collected = collect(judged_build.work / "decisions.parquet")
    for stats, column in ((collected.reasoning, "think"), (collected.final_answer, "final_answer")):
        assert stats.n == len(replied)
        assert stats.n_truncated == sum(r["finish_reason"] == "length" for r in replied) > 0
        assert sum(stats.complete) + sum(stats.truncated) == stats.n
        assert stats.longest == max(len(r[column] or "") for r in replied)
        assert stats.total_chars == sum(len(r[column] or "") for r in replied)
    # Bins double: a reasoning of 430 characters falls in 256-511 (bin 9).
    lengths = [len(r["think"]) for r in replied if r["think"] and r["finish_reason"] == "stop"]
    assert lengths and all(collected.reasoning.complete[n.bit_length()] for n in lengths)


def test_dropped_lines_are_shown_with_their_reason(judged_build, judged_page):
    section = judged_page.split('id="dropped"', 1)[1].split('id="samples"', 1)[0]
    for reason, n in judged_build.report["dropped_by_reason"].items():
        assert f"<td><code>{reason}</code></td><td class=\"n\">{n}</td>" in section
    assert "pool.jsonl:" in section


def test_the_page_is_byte_identical_for_the_same_build(judged_build, tmp_path):
    first, _, _ = render_review(judged_build.out, judged_build.work)
    assert render_review(judged_build.out, judged_build.work)[0] == first
    assert first == WorkDir(judged_build.work).review.read_text(encoding="utf-8")
    script = ("import sys; from orandcar_builder.review import write_review; "
              "write_review(sys.argv[1], sys.argv[2], sys.argv[3])")
    target = tmp_path / "other-process.html"
    subprocess.run([sys.executable, "-c", script, str(judged_build.out), str(judged_build.work), str(target)],
                   env={**os.environ, "PYTHONHASHSEED": "4321"}, cwd=REPO, check=True)
    assert target.read_text(encoding="utf-8") == first


def _copy_build(result, tmp_path) -> tuple[Path, Path]:
    out, work = tmp_path / "OrandCar", tmp_path / "work"
    shutil.copytree(result.out, out)
    shutil.copytree(result.work, work, ignore=shutil.ignore_patterns("cache"))
    return out, work


def _rewrite_decisions(work: Path, change) -> None:
    table = pq.read_table(work / "decisions.parquet")
    pq.write_table(change(table), work / "decisions.parquet")


def test_images_come_from_the_dataset_when_the_pool_files_are_gone(judged_build, judged_page, tmp_path):
    out, work = _copy_build(judged_build, tmp_path)
    _rewrite_decisions(work, lambda t: t.set_column(t.schema.get_field_index("image"), "image",
                                                    pa.array([f"/nonexistent/{i}.png" for i in range(t.num_rows)])))
    text, _, _ = render_review(out, work)
    def thumbs(page: str) -> list[str]:
        return re.findall(r'<img src="(data:image/(?:png|jpeg);base64,[^"]+)"[^>]*alt="image of', page)

    assert thumbs(text) == thumbs(judged_page)
    for shard in out.glob("*/*.parquet"):
        shard.unlink()
    text, _, _ = render_review(out, work)
    assert not thumbs(text)
    assert text.count('<div class="noimg">no image: image ') == len(re.findall(r'<div class="thumb">', text))
    assert "is missing or changed, and no shard of the dataset holds it" in text


def test_a_recorded_image_file_is_used_only_while_it_holds_the_image(tmp_path):
    """The path the build recorded is read with the project's guards: a changed file, a missing
    one or a FIFO (which would block a plain read) gives nothing, and the shards are asked instead."""
    from orandcar_builder.review.thumbnails import _from_file

    data = write_png(tmp_path / "a.png").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    assert _from_file(str(tmp_path / "a.png"), sha) == data
    assert _from_file(str(tmp_path / "a.png"), "0" * 64) is None
    assert _from_file(str(tmp_path / "missing.png"), sha) is None
    assert _from_file(None, sha) is None and _from_file("", sha) is None
    os.mkfifo(tmp_path / "fifo")
    assert _from_file(str(tmp_path / "fifo"), sha) is None


def test_recorded_fields_it_does_not_know_are_shown(judged_build, tmp_path):
    """A newer build may record more per decision: shown under its own name, not required."""
    out, work = _copy_build(judged_build, tmp_path)
    _rewrite_decisions(work, lambda t: t.append_column("future_field", pa.array(
        [f'{{"pattern": "final-answer", "span": "<{i}>"}}' for i in range(t.num_rows)])))
    text, _, _ = render_review(out, work)
    assert "Extra recorded fields shown: <code>future_field</code>" in text
    shown = re.findall(r"<dt>future_field</dt><dd><pre>\{&#34;pattern&#34;: &#34;final-answer&#34;, "
                       r"&#34;span&#34;: &#34;&lt;(\d+)&gt;&#34;\}</pre>", text)
    assert len(shown) == text.split('<h2 id="samples">', 1)[1].count('<div class="item ') > 0


def test_the_page_stays_small_for_a_large_build(judged_build, judged_page, tmp_path):
    out, work = _copy_build(judged_build, tmp_path)
    table = pq.read_table(work / "decisions.parquet")
    copies = []
    for n in range(300):  # ~7,000 QA items, each a renamed copy of the build's
        ids = pa.array([f"{item_id}-copy{n}" for item_id in table.column("id").to_pylist()])
        copies.append(table.set_column(table.schema.get_field_index("id"), "id", ids))
    pq.write_table(pa.concat_tables(copies), work / "decisions.parquet", row_group_size=2048)
    result = write_review(out, work)
    assert result.items == table.num_rows * 300
    big = result.path.read_text(encoding="utf-8")

    def without_promoted_list(page: str) -> tuple[int, int]:
        before, rest = page.split('<table id="promoted-table">', 1)
        table, after = rest.split("</table>", 1)
        return len((before + after).encode("utf-8")), table.count("<tr><td>")

    small_size, small_listed = without_promoted_list(judged_page)
    big_size, big_listed = without_promoted_list(big)
    assert small_listed == judged_build.report["judge"]["promoted"]
    assert big_listed == PROMOTED_LISTED_MAX < small_listed * 300  # the list is cut...
    assert big_size < small_size * 1.1, (big_size, small_size)  # ...and nothing else grows with the build
    assert result.sampled == sum(len(v) for v in collect(work / "decisions.parquet").samples.values())


# --- errors ----------------------------------------------------------------------------------------


def test_missing_inputs_are_named(tmp_path, judged_build):
    with pytest.raises(ReviewError, match="work dir not found"):
        write_review(judged_build.out, tmp_path / "nowhere")
    with pytest.raises(ReviewError, match="dataset folder not found"):
        write_review(tmp_path / "nowhere", judged_build.work)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(ReviewError, match="must be 0 or more, not -1"):  # checked before any file is read
        write_review(judged_build.out, work, per_kind=-1)
    with pytest.raises(ReviewError, match=r"report\.json: no build report"):
        write_review(judged_build.out, work)
    (work / "report.json").write_text("{}")
    with pytest.raises(ReviewError, match=r"decisions\.parquet: cannot read the build's decisions"):
        write_review(judged_build.out, work)
    (work / "decisions.parquet").write_bytes(b"not parquet")
    with pytest.raises(ReviewError, match=r"decisions\.parquet: cannot read"):
        write_review(judged_build.out, work)


def test_a_page_that_cannot_be_written_does_not_fail_the_build(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    WorkDir(work).review.write_text("a page of an earlier build")
    assert review_after_build(tmp_path / "missing-out", work) is None
    assert not WorkDir(work).review.exists()
    err = capsys.readouterr().err
    assert "warning: review page not written" in err and "orandcar report" in err


def test_report_command(judged_build, tmp_path):
    target = tmp_path / "review.html"
    result = CliRunner().invoke(main, ["report", str(judged_build.out), "--work", str(judged_build.work),
                                       "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert target.read_bytes() == WorkDir(judged_build.work).review.read_bytes()
    assert re.fullmatch(rf"{re.escape(str(target))}: [\d,]+ bytes; \d+ QA items, \d+ shown with their image\n",
                        result.output)
    missing = CliRunner().invoke(main, ["report", str(judged_build.out), "--work", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "error:" in missing.output and "work dir not found" in missing.output
    assert "Write the review page" in CliRunner().invoke(main, ["report", "--help"]).output
    more = CliRunner().invoke(main, ["report", str(judged_build.out), "--work", str(judged_build.work),
                                     "-o", str(tmp_path / "more.html"), "--samples", "10"])
    assert more.exit_code == 0, more.output
    shown = int(re.search(r"(\d+) shown with their image", more.output).group(1))
    assert shown == sum(len(v) for v in collect(judged_build.work / "decisions.parquet", per_kind=10).samples.values())
    assert shown > int(re.search(r"(\d+) shown with their image", result.output).group(1))
    default = {p.name: p.default for p in main.commands["report"].params}["per_kind"]
    assert default == SAMPLES_PER_KIND  # the command's default is the library's


# --- charts ----------------------------------------------------------------------------------------


FAMILIES = [FamilyCounts("scene_text", 30, 2, 8, 1, {"wrong_answer": 6, "truncated": 2}),
            FamilyCounts("vqa", 0, 0, 3, 0, {"no_answer": 1, "odd_reason": 2}),
            FamilyCounts("empty", 0, 0, 0, 0, {})]


@pytest.mark.parametrize("draw", [acceptance_chart, rejection_chart])
@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_charts_are_deterministic(draw, fmt):
    first = draw(FAMILIES, fmt=fmt)
    assert draw(list(FAMILIES), fmt=fmt) == first
    if fmt == "png":
        with Image.open(io.BytesIO(first)) as image:
            assert image.format == "PNG" and image.width > 500 and image.height > 200
    else:
        assert first.startswith(b"<?xml") and b"<svg" in first and b"<dc:date>" not in first
    assert draw(FAMILIES[:1], fmt=fmt) != first


def test_charts_do_not_depend_on_the_users_matplotlib_settings():
    import matplotlib

    first = length_chart([LengthHistogram("reasoning", [1, 2, 3], [0, 0, 1]), LengthHistogram("answer", [], [])])
    with matplotlib.rc_context({"font.size": 20, "axes.facecolor": "black", "svg.hashsalt": "other"}):
        again = length_chart([LengthHistogram("reasoning", [1, 2, 3], [0, 0, 1]), LengthHistogram("answer", [], [])])
    assert again == first
    png = acceptance_chart(FAMILIES, fmt="png")
    with matplotlib.rc_context({"savefig.dpi": 50, "figure.dpi": 50, "savefig.facecolor": "black"}):
        assert acceptance_chart(FAMILIES, fmt="png") == png


@pytest.mark.parametrize("bins, labelled", [(3, 3), (10, 10), (16, 16), (17, 9), (33, 11)])
def test_the_length_chart_labels_each_bin_under_its_bar(bins, labelled):
    """Every bin is labelled up to LENGTH_LABELS_MAX bins (fewer, evenly, past it), and each label
    is rotated about its end, which sits on its bar's tick (not beside it)."""
    from orandcar_builder.review.charts import LENGTH_LABELS_MAX, _draw_lengths, bin_label

    fig = _draw_lengths([LengthHistogram("reasoning", [1] * bins, [0] * (bins - 1))], "t", "characters")
    ax = fig.axes[0]
    ticks = [int(t) for t in ax.get_xticks()]
    labels = ax.get_xticklabels()
    assert len(ticks) == labelled <= LENGTH_LABELS_MAX and ticks[0] == 0
    assert len({b - a for a, b in zip(ticks, ticks[1:])}) <= 1  # evenly spaced
    assert [t.get_text() for t in labels] == [bin_label(i) for i in ticks]
    for label in labels:
        assert label.get_rotation_mode() == "anchor" and label.get_horizontalalignment() == "right"
        assert label.get_fontsize() >= 8


def test_bin_labels():
    assert [bin_label(i) for i in (0, 1, 2, 9, 14, 15)] == ["0", "1", "2–3", "256–511", "8192–16k", "16k–32k"]
    assert [bin_label(i) for i in (20, 21, 23, 25)] == ["524k–1M", "1M–2M", "4.1M–8.3M", "16M–33M"]


def test_card_shows_the_acceptance_chart(built_sample, sample_build):
    from orandcar_builder.card import ACCEPTANCE_CHART, acceptance_chart_png

    result, _ = sample_build
    card = (built_sample / "README.md").read_text(encoding="utf-8")
    assert f"]({ACCEPTANCE_CHART})\n" in card.split("## Counts per family", 1)[1].split("##", 1)[0]
    data = (built_sample / ACCEPTANCE_CHART).read_bytes()
    assert data == acceptance_chart_png(result.report) == acceptance_chart_png(json.loads(json.dumps(result.report)))
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        assert image.format == "PNG" and image.width > 500


# --- in a real browser -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    binary = chromium_binary()
    if binary is None:
        if browser_required():
            pytest.fail("chromium is not installed, and this run requires the browser tests "
                        "(.ci/run installs it: apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); the browser tests need it")
    if importlib.util.find_spec("websocket") is None:
        if browser_required():
            pytest.fail("websocket-client (the test extra, which drives the browser) is not installed, and this "
                        "run requires the browser tests")
        pytest.skip("websocket-client (the test extra) drives the browser; it is not installed")
    with Chromium(binary) as chromium:
        yield chromium


def artifacts_dir() -> Path:
    return Path(os.environ.get(ARTIFACTS_ENV) or REPO / "test-artifacts")


def _check_in_browser(browser, page: Path, shot: Path) -> dict:
    browser.load(page.resolve().as_uri())
    result = browser.evaluate(PAGE_CHECKS)
    assert browser.errors() == []
    assert result["undecoded"] == [] and result["images"] >= 3
    assert [c["id"] for c in result["charts"]] == ["chart-acceptance", "chart-rejection", "chart-lengths"]
    assert all(c["width"] > 300 and c["height"] > 100 for c in result["charts"])
    assert result["scripts"] == 0
    assert [c["text"] for c in result["heading_code"] if not c["fits"]] == []
    browser.screenshot(shot)
    keep = artifacts_dir() / shot.name
    keep.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, keep)
    print(f"screenshot of {page}: {shot} (copy: {keep})")
    return result


def test_sample_build_page_in_chromium(browser, sample_build, tmp_path):
    result, _ = sample_build
    checks = _check_in_browser(browser, WorkDir(result.work).review, tmp_path / "review-sample-build.png")
    assert checks["title"] == "Build review: OrandCar"
    assert checks["thumbnails"] == sum(len(v) for v in collect(result.work / "decisions.parquet").samples.values())
    assert "No judge pass ran in this build" in checks["text"]
    with Image.open(tmp_path / "review-sample-build.png") as shot:  # reads the header only
        assert shot.height >= min(checks["height"], 20000)  # the whole page


def test_judged_build_page_in_chromium(browser, judged_build, tmp_path):
    checks = _check_in_browser(browser, WorkDir(judged_build.work).review, tmp_path / "review-judged-build.png")
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    assert HOSTILE_QUESTION in checks["text"] and HOSTILE_REPLY in checks["text"]
    assert "Every promoted item" in checks["text"]
    assert {c["text"] for c in checks["heading_code"]} >= {"scene_text", "vqa"}  # the family headings


def test_the_browser_check_catches_a_broken_page(browser, tmp_path):
    """The harness itself: a console error and an image that does not decode are reported."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><img alt="broken" src="data:image/png;base64,AAAA">'
                    "<script>console.error('boom')</script></body></html>")
    browser.load(page.as_uri())
    checks = browser.evaluate(PAGE_CHECKS)
    assert "broken" in checks["undecoded"]
    assert any("boom" in error for error in browser.errors())


@pytest.fixture(scope="module")
def empty_build(tmp_path_factory, ocr_engine):
    """A build where every pool line is dropped: nothing reaches the model."""
    root = tmp_path_factory.mktemp("empty")
    pool = write_pool(root / "pool.jsonl", ["{not json", {"id": "x", "image": "gone.png", "question": "q",
                                                          "answer": "a", "family": "vqa"}])
    # nothing admitted is a failed build (pipeline/failure.py); its review page still shows the drops
    with pytest.raises(BuildFailed):
        build(pool, root / "out", work=root / "work", engine=ocr_engine, progress=False)
    return SimpleNamespace(work=root / "work")


def test_a_build_where_nothing_reaches_the_model(empty_build):
    text = WorkDir(empty_build.work).review.read_text(encoding="utf-8")
    assert text.count("No QA item reached the model.") == 2


def test_a_build_where_nothing_reaches_the_model_in_chromium(browser, empty_build, tmp_path):
    checks = _check_in_browser(browser, WorkDir(empty_build.work).review, tmp_path / "review-empty-build.png")
    assert checks["thumbnails"] == 0 and "malformed_json" in checks["text"]


def test_the_extraction_that_decided_is_shown(judged_build, tmp_path):
    """The recorded final-answer pattern and the text the rule compared appear on each item card."""
    out, work = _copy_build(judged_build, tmp_path)

    def mark(t: pa.Table) -> pa.Table:
        n = t.num_rows
        for name, value in (("extraction", "boxed"), ("extraction_version", "1"), ("decided_text", "§span§")):
            t = t.set_column(t.schema.get_field_index(name), name, pa.array([value] * n, pa.string()))
        return t

    _rewrite_decisions(work, mark)
    text, _, _ = render_review(out, work)
    samples = text.split('<h2 id="samples">', 1)[1]
    decided = samples.count("<dt>decided on</dt>")  # items a rule decided (not those never answered)
    assert decided > 0
    assert samples.count("final-answer pattern <code>boxed</code> (extraction v1)") == decided
    assert samples.count("§span§") == decided


CONCLUDING_ANSWER = "We count the apples: 3 red and 4 green.\n\nSo there are 7 apples in total."


@pytest.mark.parametrize("candidate, shown", [
    ("full", CONCLUDING_ANSWER), ("first_line", "We count the apples: 3 red and 4 green."),
    ("conclusion", "7 apples in total"), ("conclusion_number", "7"), ("statement", None)])
def test_the_decided_text_of_an_older_build_is_recomputed(candidate, shown):
    """A build that predates ``decided_text``: the named candidate is recomputed from the final
    answer, the conclusions (tried by math and choice) included."""
    from orandcar_builder.review.page import decided_span

    row = {"candidate": candidate, "final_answer": CONCLUDING_ANSWER, "decided_text": None}
    assert decided_span(row) == shown
    assert decided_span({**row, "decided_text": "as recorded"}) == "as recorded"
    assert decided_span({**row, "final_answer": None}) is None


def test_a_recomputed_conclusion_is_shown_on_the_item_card(judged_build, tmp_path):
    out, work = _copy_build(judged_build, tmp_path)

    def older(t: pa.Table) -> pa.Table:
        n = t.num_rows
        for name, value in (("decided_text", None), ("candidate", "conclusion"), ("final_answer", CONCLUDING_ANSWER)):
            t = t.set_column(t.schema.get_field_index(name), name, pa.array([value] * n, pa.string()))
        return t

    _rewrite_decisions(work, older)
    samples = render_review(out, work)[0].split('<h2 id="samples">', 1)[1]
    decided = samples.count("<dt>decided on</dt>")
    assert decided > 0
    assert samples.count("<dt>decided on</dt><dd><pre>7 apples in total</pre>") == decided
    assert "not recomputable" not in samples
