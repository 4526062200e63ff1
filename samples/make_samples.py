"""Render the sample pool: scene-text crops made by the project itself.

Words and numbers are drawn with Pillow's bundled font on varied backgrounds, then blurred,
rotated and noised to different degrees, so that the OCR engine reads most of them and gets a
realistic share wrong. Deterministic: a fixed seed, the bundled font, PNG output; rerunning it
rewrites the same files. Run from the repository root:

    python samples/make_samples.py
"""

from __future__ import annotations

import json
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


def main() -> None:
    (HERE / "images").mkdir(exist_ok=True)
    rng = random.Random(SEED)
    items = scene_text_items(rng)
    with open(HERE / "pool.jsonl", "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item, ensure_ascii=False) + "\n")
    print(f"wrote {len(items)} items to {HERE / 'pool.jsonl'}")


if __name__ == "__main__":
    main()
