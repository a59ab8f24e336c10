"""A static HTML contact sheet of ORIC items for the human check (seed Sec. 3.2: 150 yes + 150 no
questions verified by hand for labelling accuracy and contextual incongruity; examples as in Fig. 14).

Each card shows the image thumbnail (embedded, so the page works offline and can be mailed), the
question, the label, and for yes-items the target's boxes drawn in red.
"""

from __future__ import annotations

import base64
import html
import io
import random
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from core.io import atomic_write_text
from data_builders.oric.annotations import load_instances

THUMBNAIL_SIZE = 256


def sample_for_review(items: list[dict[str, Any]], sample: int = 300, seed: int = 0) -> list[dict[str, Any]]:
    """Up to ``sample`` items, half yes and half no where both exist (seeded), in file order.

    >>> items = [{"id": i, "label": "yes" if i < 8 else "no"} for i in range(10)]
    >>> sorted(item["label"] for item in sample_for_review(items, 4))
    ['no', 'no', 'yes', 'yes']
    """
    rng = random.Random(seed)
    by_label = {label: [item for item in items if item.get("label") == label] for label in ("yes", "no")}
    want_yes = min(len(by_label["yes"]), max(sample // 2, sample - len(by_label["no"])))
    want_no = min(len(by_label["no"]), sample - want_yes)
    chosen = rng.sample(by_label["yes"], want_yes) + rng.sample(by_label["no"], want_no)
    order = {id(item): position for position, item in enumerate(items)}
    return sorted(chosen, key=lambda item: order[id(item)])


def write_review_html(
    items: list[dict[str, Any]], annotations: Path, image_root: Path, out: Path, sample: int = 300, seed: int = 0
) -> Path:
    """Write the contact sheet of :func:`sample_for_review` items to ``out`` (atomically) and return it."""
    records = {record.file_name: record for record in load_instances(annotations)[0]}
    chosen = sample_for_review(items, sample, seed)
    cards = [_card(item, records.get(item["image"]), image_root) for item in chosen]
    yes = sum(item["label"] == "yes" for item in chosen)
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>ORIC review sheet</title><style>"
        "body{font-family:sans-serif}.card{display:inline-block;width:270px;margin:6px;vertical-align:top;"
        "border:3px solid #ccc;padding:4px}.yes{border-color:#2a2}.no{border-color:#c33}"
        ".missing{height:120px;background:#eee}</style></head><body>"
        f"<h1>ORIC review sheet: {len(chosen)} of {len(items)} items ({yes} yes, {len(chosen) - yes} no)</h1>"
        "<p>Check each card: is the label right, and is the object incongruous with its context? "
        "Red boxes mark the asked object on yes-items.</p>"
        f"{''.join(cards)}</body></html>"
    )
    return atomic_write_text(out, page)


def _card(item: dict[str, Any], record: Any, image_root: Path) -> str:
    path = image_root / item["image"]
    thumbnail = "<div class='missing'>image file missing</div>"
    if path.is_file():
        try:
            with Image.open(path) as opened:
                image = opened.convert("RGB")
        except OSError:
            thumbnail = "<div class='missing'>image file unreadable</div>"
        else:
            if item["label"] == "yes" and record is not None:
                draw = ImageDraw.Draw(image)
                width = max(2, image.width // 160)
                for x, y, w, h in record.boxes.get(item["target_object"], []):
                    draw.rectangle([x, y, x + w, y + h], outline=(255, 0, 0), width=width)
            image.thumbnail((THUMBNAIL_SIZE, THUMBNAIL_SIZE))
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=85)
            thumbnail = f'<img src="data:image/jpeg;base64,{base64.b64encode(buffer.getvalue()).decode()}">'
    question = item["problem"][0] if isinstance(item["problem"], list) else item["problem"].split("?")[0] + "?"
    return (
        f'<div class="card {html.escape(item["label"])}">{thumbnail}<p>{html.escape(question)}</p>'
        f"<p><b>{html.escape(item['label'])}</b> · {html.escape(item['image'])} · id {item['id']}</p></div>"
    )
