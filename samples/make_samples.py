"""Render the sample pool: scene-text crops made by the project itself.

Words and numbers are drawn with Pillow's bundled font on varied backgrounds, then blurred,
rotated and noised to different degrees, so that the OCR engine reads most of them and gets a
realistic share wrong. Deterministic: a fixed seed, the bundled font, PNG output; rerunning it
rewrites the same files. Run from the repository root:

    python samples/make_samples.py
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

HERE = Path(__file__).resolve().parent
SEED = 20261129
SCENE_QUESTION = "What is written in this image?"
WORDS = [
    "HARBOR", "Bakery", "EXIT", "market", "STATION", "Coffee", "PHARMACY", "garden", "Hotel",
    "PARKING", "library", "Museum", "SALE", "open", "THEATRE", "Pizza", "BRIDGE", "river",
    "1984", "42", "2026", "7350", "B-12", "No.9", "SINGH'S", "P.A.R.C", "Route 66", "24/7",
    "FINISH", "welcome", "Danger", "TAXI",
]


def _background(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    kind = rng.choice(["flat", "gradient", "stripes", "speckle"])
    base = tuple(rng.randint(0, 255) for _ in range(3))
    img = Image.new("RGB", size, base)
    draw = ImageDraw.Draw(img)
    w, h = size
    if kind == "gradient":
        other = tuple(rng.randint(0, 255) for _ in range(3))
        for x in range(w):
            t = x / max(1, w - 1)
            draw.line([(x, 0), (x, h)], fill=tuple(int(a + (b - a) * t) for a, b in zip(base, other)))
    elif kind == "stripes":
        other = tuple(rng.randint(0, 255) for _ in range(3))
        step = rng.randint(6, 14)
        for x in range(-h, w, step * 2):
            draw.polygon([(x, 0), (x + step, 0), (x + step + h, h), (x + h, h)], fill=other)
    elif kind == "speckle":
        for _ in range(w * h // 40):
            draw.point((rng.randrange(w), rng.randrange(h)), fill=tuple(rng.randint(0, 255) for _ in range(3)))
    return img


def _contrasting(rng: random.Random, img: Image.Image) -> tuple[int, int, int]:
    r, g, b = img.resize((1, 1)).getpixel((0, 0))
    light = (r * 299 + g * 587 + b * 114) / 1000 > 128
    return tuple(rng.randint(0, 60) for _ in range(3)) if light else tuple(rng.randint(200, 255) for _ in range(3))


def render_word(text: str, rng: random.Random, difficulty: float) -> Image.Image:
    """A word crop; ``difficulty`` in [0, 1] scales blur, rotation, noise and contrast loss."""
    font = ImageFont.load_default(size=rng.randint(28, 44))
    left, top, right, bottom = font.getbbox(text)
    pad_x, pad_y = rng.randint(8, 20), rng.randint(6, 14)
    size = (right - left + 2 * pad_x, bottom - top + 2 * pad_y)
    img = _background(rng, size)
    colour = _contrasting(rng, img)
    if difficulty > 0.6:  # washed-out ink
        bg = img.resize((1, 1)).getpixel((0, 0))
        colour = tuple(int(c + (b - c) * (difficulty - 0.3)) for c, b in zip(colour, bg))
    ImageDraw.Draw(img).text((pad_x - left, pad_y - top), text, font=font, fill=colour)
    angle = rng.uniform(-1, 1) * 25 * difficulty
    img = img.rotate(angle, resample=Image.BICUBIC, expand=True, fillcolor=img.getpixel((0, 0)))
    if difficulty > 0.2:
        img = img.filter(ImageFilter.GaussianBlur(radius=2.2 * difficulty))
    noise = int(90 * difficulty)
    if noise:
        px = img.load()
        for _ in range(img.width * img.height // 3):
            x, y = rng.randrange(img.width), rng.randrange(img.height)
            px[x, y] = tuple(max(0, min(255, c + rng.randint(-noise, noise))) for c in px[x, y])
    if difficulty > 0.75:  # low resolution, as in far-away signs
        small = img.resize((max(8, img.width // 3), max(6, img.height // 3)), Image.BILINEAR)
        img = small.resize(img.size, Image.BILINEAR)
    return img


def scene_text_items(rng: random.Random) -> list[dict]:
    items = []
    for index, word in enumerate(WORDS):
        difficulty = [0.0, 0.15, 0.35, 0.55, 0.8, 0.95][index % 6]
        name = f"scene_{index:02d}.png"
        render_word(word, rng, difficulty).save(HERE / "images" / name, optimize=False)
        items.append({
            "id": f"scene-{index:02d}", "image": f"images/{name}", "question": SCENE_QUESTION,
            "answer": word, "family": "scene_text", "options": None,
            "source": {"dataset": "orandcar-samples", "split": "test", "id": str(index),
                       "origin": "benchmark", "image": f"images/{name}", "image_sha256": None},
        })
    # A few images carry a second question, so rows group several QA items of one image.
    for index in (0, 5, 18):
        first = items[index]
        items.append({**first, "id": f"{first['id']}-spell", "question": "Which word or number does this sign show?"})
    return items


def _item(item_id: str, name: str, question: str, answer, family: str, options=None) -> dict:
    return {
        "id": item_id, "image": f"images/{name}", "question": question, "answer": answer,
        "family": family, "options": options,
        "source": {"dataset": "orandcar-samples", "split": "test", "id": item_id, "origin": "benchmark",
                   "image": f"images/{name}", "image_sha256": None},
    }


def render_bar_chart(values: dict[str, int]) -> Image.Image:
    """A small labelled bar chart, values printed above the bars."""
    font = ImageFont.load_default(size=14)
    img = Image.new("RGB", (320, 220), "white")
    draw = ImageDraw.Draw(img)
    draw.line([(30, 190), (310, 190)], fill="black", width=2)
    draw.line([(30, 20), (30, 190)], fill="black", width=2)
    top = max(values.values())
    for i, (label, value) in enumerate(values.items()):
        x0 = 45 + i * 65
        height = int(150 * value / top)
        draw.rectangle([x0, 190 - height, x0 + 40, 190], fill=(60 + 40 * i, 110, 200 - 30 * i))
        draw.text((x0 + 8, 190 - height - 18), str(value), font=font, fill="black")
        draw.text((x0 + 2, 195), label, font=font, fill="black")
    draw.text((90, 2), "Visitors per day", font=font, fill="black")
    return img


def render_document(lines: list[str]) -> Image.Image:
    font = ImageFont.load_default(size=16)
    img = Image.new("RGB", (360, 30 + 26 * len(lines)), (250, 248, 240))
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((16, 14 + 26 * i), line, font=font, fill=(20, 20, 40))
    return img


def render_expression(text: str) -> Image.Image:
    font = ImageFont.load_default(size=36)
    left, top, right, bottom = font.getbbox(text)
    img = Image.new("RGB", (right - left + 40, bottom - top + 30), "white")
    ImageDraw.Draw(img).text((20 - left, 15 - top), text, font=font, fill="black")
    return img


def render_shapes() -> Image.Image:
    img = Image.new("RGB", (240, 160), (235, 235, 235))
    draw = ImageDraw.Draw(img)
    draw.ellipse([20, 40, 100, 120], fill=(210, 30, 30))
    draw.rectangle([140, 40, 220, 120], fill=(30, 80, 200))
    return img


def render_stars(count: int) -> Image.Image:
    img = Image.new("RGB", (70 * count + 20, 90), (20, 20, 60))
    draw = ImageDraw.Draw(img)
    for i in range(count):
        cx, cy = 45 + 70 * i, 45
        points = []
        for k in range(10):
            radius = 28 if k % 2 == 0 else 12
            angle = -90 + 36 * k
            points.append((cx + radius * math.cos(math.radians(angle)), cy + radius * math.sin(math.radians(angle))))
        draw.polygon(points, fill=(250, 210, 40))
    return img


def other_family_items(rng: random.Random) -> list[dict]:
    """One or more items for every family other than scene_text, each on an image made here."""
    items = []
    images = {
        "chart_visitors.png": render_bar_chart({"Mon": 42, "Tue": 35, "Wed": 58, "Thu": 27}),
        "doc_invoice.png": render_document(["ACME Supplies Ltd.", "Invoice no. INV-2041",
                                            "Date: 12 March 2026", "Total due: 318.50 EUR"]),
        "math_product.png": render_expression("7 x 8 = ?"),
        "vqa_shapes.png": render_shapes(),
        "generic_stars.png": render_stars(3),
    }
    for name, img in images.items():
        img.save(HERE / "images" / name, optimize=False)
    items.append(_item("chart-00", "chart_visitors.png", "How many visitors came on Wednesday?", "58", "chart_qa"))
    items.append(_item("chart-01", "chart_visitors.png", "Which day had the fewest visitors?", "Thu", "chart_qa"))
    items.append(_item("doc-00", "doc_invoice.png", "What is the invoice number?", "INV-2041", "doc_vqa"))
    items.append(_item("doc-01", "doc_invoice.png", "What is the total due?", ["318.50 EUR", "318.50"], "doc_vqa"))
    items.append(_item("math-00", "math_product.png", "Compute the value of the expression in the image.", "56", "math"))
    items.append(_item("vqa-00", "vqa_shapes.png", "What colour is the circle?",
                       ["red"] * 8 + ["dark red", "crimson"], "vqa"))
    items.append(_item("generic-00", "generic_stars.png", "How many stars are in the picture?", "3", "generic"))
    # Multiple choice whose options are words in the image: the OCR engine can answer these.
    for index, (word, options, difficulty) in enumerate([
        ("GARDEN", ["market", "garden", "bridge", "river"], 0.1),
        ("Bakery", ["Bakery", "Butcher", "Barber"], 0.3),
        ("HARBOR", ["Harbour", "Harvest", "Arbor", "Harbor"], 0.5),
        ("river", ["rover", "liver", "river", "giver"], 0.97),
    ]):
        name = f"choice_{index:02d}.png"
        render_word(word, rng, difficulty).save(HERE / "images" / name, optimize=False)
        same = [i for i, option in enumerate(options) if option.lower() == word.lower()]
        assert len(same) == 1, (word, options)
        letter = "ABCDEFGH"[same[0]]
        items.append(_item(f"choice-{index:02d}", name, "Which word is shown on the sign?", letter,
                           "multiple_choice", options))
    return items


def main() -> None:
    (HERE / "images").mkdir(exist_ok=True)
    rng = random.Random(SEED)
    items = scene_text_items(rng)
    items += other_family_items(rng)
    with open(HERE / "pool.jsonl", "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item, ensure_ascii=False) + "\n")
    print(f"wrote {len(items)} items to {HERE / 'pool.jsonl'}")


if __name__ == "__main__":
    main()
