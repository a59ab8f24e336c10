"""``veritune report RUN_DIR``: a static HTML report of a training run that opens offline.

One self-contained file: plots are inline SVG drawn here (no scripts, no fonts or styles fetched, no
plotting library), with each point's value as a hover title. It shows

- training curves from ``trainer_state.json``: rewards (GRPO's total and per-function means, DPO's
  chosen/rejected/margins/accuracies), loss and a few other health signals;
- for each benchmark evaluated under ``RUN_DIR/eval/checkpoint-N/<benchmark>/metrics.json``: a table of
  the headline metrics per checkpoint, every metric against the training step (grouped: headline,
  yes-proportion, per class, per paraphrase or subset), the confusion matrices of the first and the last
  checkpoint, the last checkpoint's per-category tables and sample predictions.

For an ``eval run --out`` folder (no training run: its ``results.json``), an eval-only report: the run's settings,
one row per benchmark with its coverage (answered of expected items, missing images, unresolved share; a
``partial`` mark) and headline metrics, then each benchmark's tables and sample predictions.
"""

from __future__ import annotations

import functools
import html
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_text
from core.run_layout import checkpoints, collect_eval

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
YES_PROPORTION_KEYS = ("yes_proportion", "yes_ratio")
# Training curves, in this order; rewards are found by prefix (GRPO: reward, rewards/<fn>/mean; DPO: rewards/*).
TRAINING_CURVES = {
    "loss": ("loss",),
    "completion length (tokens)": ("completions/mean_length", "completion_length"),
    "KL to the reference": ("kl",),
    "entropy": ("entropy",),
    "gradient norm": ("grad_norm",),
    "learning rate": ("learning_rate",),
}
STYLE = (
    "\n"
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1180px;color:#222;"
    "padding:0 16px}\n"
    "h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}"
    "h3{font-size:15px;margin:18px 0 6px}\n"
    ".grid{display:flex;flex-wrap:wrap;gap:8px}.muted{color:#666;font-size:13px}\n"
    "table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
    "th{background:#f4f4f4}td.text{text-align:left;max-width:520px;white-space:pre-wrap;word-break:break-word}\n"
    "svg{background:#fff;border:1px solid #eee;max-width:100%;height:auto}\n"
    ".table-wrap{max-width:100%;overflow-x:auto}th{white-space:normal;vertical-align:bottom}\n"
    "figure.plot{margin:0;width:560px;max-width:100%}figcaption.note{font-size:12px;color:#8a5a00;"
    "background:#fff8e6;border:1px solid #f0d9a0;padding:4px 6px;margin-top:2px}\n"
)


# ---------------------------------------------------------------------------------------------- drawing


def nice_ticks(low: float, high: float, count: int = 5, *, integer: bool = False) -> list[float]:
    """About ``count`` distinct round tick values covering ``[low, high]`` (steps of 1, 2, 2.5 or 5 times a power
    of ten; whole steps of at least 1 with ``integer``, for training steps). A constant range is padded by 10%
    of its value (by 1 around 0), so it is drawn mid-axis."""
    low, high = min(low, high), max(low, high)
    if high == low:
        pad = abs(low) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    if integer:
        step = 1.0 if step < 1 else 2.0 if step == 2.5 else step  # 25, 250, ... are whole already
    first = math.floor(low / step + 1e-9)
    last = math.ceil(high / step - 1e-9)
    digits = max(0, 2 - math.floor(math.log10(step)))  # rounds away float noise, keeps 2.5 x 10^k exact
    return [round(index * step, digits) for index in range(first, last + 1)]


def log_ticks(low: float, high: float) -> list[float]:
    """Tick values of a log axis covering ``[low, high]`` (both > 0): the powers of ten around them, with 2 and 5
    times each when the range spans less than three decades, every k-th power when it spans more than eight."""
    if low <= 0 or high <= 0:
        raise ValueError("a log axis needs positive values")
    first, last = math.floor(math.log10(min(low, high))), math.ceil(math.log10(max(low, high)))
    last = max(last, first + 1)
    stride = max(1, math.ceil((last - first) / 8))
    decades = range(first, last + 1, stride)
    if last - first >= 3:
        return [10.0**power for power in decades]
    ticks = [m * 10.0**power for power in decades for m in (1, 2, 5)]
    # keep one tick below the data and one above it, drop the rest outside
    below = max(t for t in ticks if t <= low * (1 + 1e-9))
    above = min(t for t in ticks if t >= high * (1 - 1e-9))
    return [float(f"{t:.1e}") for t in ticks if below <= t <= above]


def tick_labels(ticks: list[float], *, log: bool = False) -> list[str]:
    """Labels for ``ticks`` with just enough digits that each reads back as its own value (so no two are
    equal): fixed-point, or scientific (``1e-4``, ``2.5e-8``) for magnitudes below 0.001 or from 100000 (on a
    linear axis decided by its largest tick, so one axis has one notation; on a ``log`` axis tick by tick)."""
    if not ticks:
        return []
    gaps = [abs(b - a) for a, b in zip(ticks, ticks[1:]) if b != a]
    tolerance = (min(gaps) if gaps else abs(ticks[0]) or 1.0) * 1e-3

    def scientific(value: float) -> bool:
        return value >= 1e5 or 0 < value < 1e-3

    biggest = max(abs(t) for t in ticks)
    notation = [scientific(abs(t)) if log else scientific(biggest) for t in ticks]
    for digits in range(0, 16):
        labels = [_number(t, digits, sci) for t, sci in zip(ticks, notation)]
        if all(abs(float(label) - t) <= (abs(t) * 1e-3 if log else tolerance) for label, t in zip(labels, ticks)):
            return labels
    return [repr(t) for t in ticks]


def _number(value: float, digits: int, scientific: bool) -> str:
    if scientific and value != 0:
        mantissa, _, exponent = f"{value:.{digits}e}".partition("e")
        mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
        return f"{mantissa}e{int(exponent)}"
    text = f"{value:.{digits}f}"
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return "0" if text in ("-0", "") else text


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.2e}"


def wants_log_axis(values: list[float]) -> bool:
    """A log axis suits values that are all positive and span at least a factor of 10 (a learning rate with
    warm-up or decay); anything else is drawn on a linear axis scaled to the data."""
    return bool(values) and min(values) > 0 and max(values) >= 10 * min(values)


LEGEND_CHAR_PX = 6.6  # a generous width of one 11-px sans-serif character, for laying out the legend
LEGEND_ROW_PX = 15


def _legend_name(name: str, max_chars: int) -> str:
    """``name``, or its head and tail around an ellipsis when it is longer than ``max_chars``."""
    if len(name) <= max_chars:
        return name
    tail = (max_chars - 1) * 2 // 3
    return name[: max_chars - 1 - tail] + "\u2026" + name[len(name) - tail :]


def svg_line_plot(
    title: str,
    series: dict[str, list[tuple[float, float]]],
    *,
    x_label: str = "step",
    width: int = 560,
    height: int = 250,
    log_y: bool = False,
) -> str:
    """A line plot of one or more ``(x, y)`` series as an inline SVG element ("" when there is no point).

    Both axes are scaled to the data (a constant series is drawn mid-axis), ``log_y`` draws the y axis in
    log scale (all values must be positive), tick labels carry the digits that keep them distinct, and the
    legend sits under the plot, a name too long for it shortened in the middle with the full name on hover. A
    series with exactly the points of an earlier one (GRPO's total ``reward`` with one reward function) is drawn
    dashed with smaller dots, so that the one under it shows through.
    """
    series = {name: sorted(points) for name, points in series.items() if points}
    earlier: list[list[tuple[float, float]]] = []
    repeats = set()
    for name, values in series.items():
        if values in earlier:
            repeats.add(name)
        earlier.append(values)
    points = [p for values in series.values() for p in values]
    if not points:
        return ""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    whole = all(float(x).is_integer() for x in xs)
    x_ticks = nice_ticks(min(xs), max(xs), integer=whole) if max(xs) > min(xs) else [min(xs) - 1, min(xs), min(xs) + 1]
    log_y = log_y and min(ys) > 0
    y_ticks = log_ticks(min(ys), max(ys)) if log_y else nice_ticks(min(ys), max(ys))
    x_labels, y_labels = tick_labels(x_ticks), tick_labels(y_ticks, log=log_y)
    scale = math.log10 if log_y else float
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], scale(y_ticks[0]), scale(y_ticks[-1])
    left = max(44, 14 + math.ceil(6 * max(len(label) for label in y_labels)))
    right, top, bottom = 14, 28, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    # the legend: under the plot, in as many columns as its longest name allows
    named = len(series) > 1 or next(iter(series)) != title
    avail = width - 2 * 8
    max_chars = max(4, int((avail - 22) / LEGEND_CHAR_PX))
    shown = {name: _legend_name(name, max_chars) for name in series} if named else {}
    column_w = 22 + LEGEND_CHAR_PX * max((len(text) for text in shown.values()), default=0) + 12
    columns = max(1, min(len(shown), int(avail // column_w))) if shown else 1
    legend_rows = math.ceil(len(shown) / columns)
    total_h = height + LEGEND_ROW_PX * legend_rows + (4 if legend_rows else 0)

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - (scale(y) - y0) / (y1 - y0) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" '
        f'viewBox="0 0 {width} {total_h}" role="img" aria-label="{html.escape(title)}" font-family="sans-serif">',
        f'<text x="8" y="17" font-size="13" font-weight="bold">{html.escape(title)}'
        + (' <tspan font-weight="normal" fill="#666">(log scale)</tspan>' if log_y else "")
        + "</text>",
    ]
    for y, label in zip(y_ticks, y_labels):
        parts.append(f'<line x1="{left}" y1="{sy(y):.1f}" x2="{left + plot_w}" y2="{sy(y):.1f}" stroke="#eee"/>')
        parts.append(
            f'<text x="{left - 5}" y="{sy(y) + 3.5:.1f}" font-size="10" text-anchor="end" fill="#555">{label}</text>'
        )
    for x, label in zip(x_ticks, x_labels):
        parts.append(
            f'<line x1="{sx(x):.1f}" y1="{top + plot_h}" x2="{sx(x):.1f}" y2="{top + plot_h + 4}" stroke="#888"/>'
        )
        parts.append(
            f'<text x="{sx(x):.1f}" y="{top + plot_h + 15}" font-size="10" text-anchor="middle" fill="#555">'
            f"{label}</text>"
        )
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#888"/>')
    parts.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" font-size="11" text-anchor="middle" fill="#333">'
        f"{html.escape(x_label)}</text>"
    )
    for index, (name, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        dash = ' stroke-dasharray="6 4"' if name in repeats else ""
        if len(values) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in values)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{path}"/>')
        for x, y in values:
            parts.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{2 if dash else 3}" fill="{colour}">'
                f"<title>{html.escape(name)} at {html.escape(x_label)} {_fmt(x)}: {y:.4g}</title></circle>"
            )
        if name in shown:
            lx = 8 + column_w * (index % columns)
            ly = height + 8 + LEGEND_ROW_PX * (index // columns)
            parts.append(
                f"<g><title>{html.escape(name)}</title>"
                f'<line x1="{lx:.0f}" y1="{ly - 4}" x2="{lx + 14:.0f}" y2="{ly - 4}" '
                f'stroke="{colour}" stroke-width="3"{dash}/>'
                f'<text x="{lx + 18:.0f}" y="{ly}" font-size="11">{html.escape(shown[name])}</text></g>'
            )
    parts.append("</svg>")
    return "".join(parts)


def svg_confusion(title: str, rows: list[dict[str, Any]]) -> str:
    """A confusion matrix (rows: true label, columns: predicted) as an SVG heatmap with counts."""
    labels = [str(row.get("true", "")) for row in rows]
    columns = list(
        dict.fromkeys(key for row in rows for key in row if key != "true" and isinstance(row[key], (int, float)))
    )
    if not rows or not columns:
        return ""
    cell_w, cell_h, left, top = 86, 34, 86, 48
    width, height = left + cell_w * len(columns) + 10, top + cell_h * len(rows) + 30
    peak = max((float(row.get(c, 0) or 0) for row in rows for c in columns), default=0.0) or 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}" font-family="sans-serif">',
        f'<text x="6" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>',
        f'<text x="{left + cell_w * len(columns) / 2:.0f}" y="{top - 22}" font-size="11" text-anchor="middle">'
        "predicted</text>",
        f'<text x="6" y="{top - 6}" font-size="11">true</text>',
    ]
    for j, column in enumerate(columns):
        parts.append(
            f'<text x="{left + cell_w * (j + 0.5):.0f}" y="{top - 6}" font-size="11" text-anchor="middle">'
            f"{html.escape(column.removeprefix('pred_'))}</text>"
        )
    for i, (label, row) in enumerate(zip(labels, rows)):
        y = top + cell_h * i
        parts.append(
            f'<text x="{left - 6}" y="{y + cell_h / 2 + 4:.0f}" font-size="11" text-anchor="end">'
            f"{html.escape(label)}</text>"
        )
        for j, column in enumerate(columns):
            value = float(row.get(column, 0) or 0)
            shade = value / peak
            fill = f"rgb({int(255 - 200 * shade)},{int(255 - 140 * shade)},{int(255 - 60 * shade)})"
            text_colour = "#fff" if shade > 0.6 else "#111"
            x = left + cell_w * j
            parts.append(f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" fill="{fill}"/>')
            parts.append(
                f'<text x="{x + cell_w / 2 - 1:.0f}" y="{y + cell_h / 2 + 4:.0f}" font-size="12" '
                f'text-anchor="middle" fill="{text_colour}">{value:g}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


class Markup(str):
    """A table cell that is already HTML (a thumbnail): :func:`html_table` puts it in as it is."""


def _header(name: str) -> str:
    """A column name that may break after its ``/`` and ``_`` (``yes/precision``), so headers wrap."""
    return html.escape(name).replace("/", "/<wbr>").replace("_", "_<wbr>")


def html_table(rows: list[dict[str, Any]], *, text_columns: tuple[str, ...] = ()) -> str:
    """An HTML table of row dicts (union of their keys as columns); floats with 4 significant digits. The table
    sits in a box that scrolls sideways when it is wider than the page; its headers and text cells wrap."""
    if not rows:
        return ""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    head = "".join(f"<th>{_header(str(c))}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for column in columns:
            value = row.get(column, "")
            css = ' class="text"' if column in text_columns else ""
            if isinstance(value, Markup):
                cells.append(f"<td{css}>{value}</td>")
                continue
            shown = "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
            cells.append(f"<td{css}>{html.escape(shown)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<div class='table-wrap'><table><tr>{head}</tr>{''.join(body)}</table></div>"


# ---------------------------------------------------------------------------------------------- reading


def training_history(run_dir: Path) -> tuple[list[dict[str, Any]], Path | None]:
    """The log history of the run's final ``trainer_state.json``, else of its newest checkpoint."""
    candidates = [run_dir / "trainer_state.json"]
    candidates += [path / "trainer_state.json" for _, path in reversed(checkpoints(run_dir))]
    for path in candidates:
        if path.is_file():
            try:
                return list(json.loads(path.read_text(encoding="utf-8")).get("log_history", [])), path
            except (json.JSONDecodeError, AttributeError) as err:
                raise UserError(f"{path}: not a readable trainer state ({err})") from None
    return [], None


def _curve(history: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    return [
        (row["step"], float(row[key]))
        for row in history
        if "step" in row and isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool)
    ]


HEADLINE_METRIC = "macro/f1"  # drawn in the headline chart where a benchmark has it (ORIC, arXiv 2509.15695, Table 2)


def metric_groups(metrics: list[str]) -> dict[str, list[str]]:
    """Metric names grouped for plotting: headline (names without ``/``, and ``macro/f1`` where there is one),
    yes-proportion, then by prefix (``yes/f1`` -> ``yes``; ``p0/macro/f1`` -> ``p0/macro``). Top-level names
    that share a stem with another one (ORIC's ``yes_recall_small``, ``yes_recall_medium``, ...) are a group of
    their own, named by the stem, not part of the headline."""
    groups: dict[str, list[str]] = defaultdict(list)
    top = [name for name in metrics if "/" not in name and name not in YES_PROPORTION_KEYS]
    stems = defaultdict(list)
    for name in top:
        if "_" in name:
            stems[name.rsplit("_", 1)[0]].append(name)
    if HEADLINE_METRIC in metrics:
        groups["headline"].append(HEADLINE_METRIC)
    for name in metrics:
        last = name.rsplit("/", 1)[-1]
        if last in YES_PROPORTION_KEYS:
            groups["yes-proportion"].append(name)
        elif "/" in name:
            groups[name.rsplit("/", 1)[0]].append(name)
        elif "_" in name and len(stems[name.rsplit("_", 1)[0]]) > 1:
            groups[name.rsplit("_", 1)[0]].append(name)
        else:
            groups["headline"].append(name)
    order = ["headline", "yes-proportion", "macro", "yes", "no"]
    return dict(sorted(groups.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])))


# ---------------------------------------------------------------------------------------------- sections


NEAR_ZERO_LOSS = 1e-6  # |loss| below this on every logged step: GRPO's loss is ~0 by design (see below)
GRPO_ZERO_LOSS_NOTE = (
    "Loss ~0 by design: with beta 0 and num_iterations 1, TRL's GRPO loss is a mean of advantages that average "
    "0 per group, whatever the gradient; read the rewards and gradient norm."
)

ONE_REWARD_NOTE = "reward (the total, dashed) equals {name}: the run has one reward function."


def _figure(plot: str, note: str = "") -> str:
    """A plot with a one-line note under it (no wrapper when there is no note)."""
    if not plot or not note:
        return plot
    return f"<figure class='plot'>{plot}<figcaption class='note'>{html.escape(note)}</figcaption></figure>"


def training_section(history: list[dict[str, Any]], source: Path) -> list[str]:
    keys = list(dict.fromkeys(key for row in history for key in row))
    # the total last: drawn over the per-function means, dashed where it repeats one (svg_line_plot)
    rewards = [k for k in keys if k.startswith("rewards/") and not k.endswith("/std")]
    rewards += ["reward"] if "reward" in keys else []
    curves = {k: _curve(history, k) for k in rewards}
    functions = [k for k in rewards if k.startswith("rewards/") and k.endswith("/mean")]
    note = ""
    if len(functions) == 1 and curves.get("reward") and sorted(curves["reward"]) == sorted(curves[functions[0]]):
        note = ONE_REWARD_NOTE.format(name=functions[0])
    parts = [f"<h2>Training</h2><p class='muted'>from {html.escape(str(source))}</p><div class='grid'>"]
    parts.append(_figure(svg_line_plot("rewards", curves), note))
    for title, candidates in TRAINING_CURVES.items():
        series = {k: _curve(history, k) for k in candidates if k in keys}
        values = [y for points in series.values() for _, y in points]
        note = ""
        if title == "loss" and "reward" in keys and values and max(abs(v) for v in values) < NEAR_ZERO_LOSS:
            note = GRPO_ZERO_LOSS_NOTE
        log_y = title == "learning rate" and wants_log_axis(values)
        parts.append(_figure(svg_line_plot(title, series, log_y=log_y), note))
    parts.append("</div>")
    return parts


def benchmark_section(name: str, by_step: dict[int, dict[str, Any]]) -> list[str]:
    steps = list(by_step)
    newest_step, newest = steps[-1], by_step[steps[-1]]
    metric_names = list(dict.fromkeys(key for result in by_step.values() for key in result["metrics"]))
    headline = [k for k in metric_names if "/" not in k or k.startswith("macro/")]
    parts = [f"<h2>{html.escape(name)}</h2>"]
    generation = newest.get("generation", {})
    data = newest.get("data", {})
    if generation or data:
        parts.append(
            f"<p class='muted'>data: {html.escape(str(data.get('path', '?')))}; "
            f"limit: {html.escape(str(data.get('limit')))}; "
            f"max new tokens: {html.escape(str(generation.get('max_new_tokens', '?')))}</p>"
        )
    blind = generation.get("blind")
    if isinstance(blind, dict):  # `eval run --blind`: the model was shown blanks, not the images
        fill = ",".join(map(str, blind.get("fill", [])))
        parts.append(f"<p><b>blind control</b>: images replaced by a blank {html.escape(fill)} of the same size</p>")
    table = []
    for step, result in by_step.items():
        counts = result.get("counts", {})
        lower = set(result.get("lower_is_better", []))  # e.g. AMBER's CHAIR, Hal and Cog, ORBIT's RMSE
        row: dict[str, Any] = {
            "step": step,
            **{f"{k} (lower is better)" if k in lower else k: result["metrics"].get(k, "") for k in headline},
        }
        row.update({f"n {k}": counts[k] for k in ("items", "unresolved", "missing_images") if k in counts})
        row.update(coverage_cells(result))
        table.append(row)
    parts.append("<h3>Headline metrics by checkpoint</h3>" + html_table(table))
    parts += curve_section(name, by_step)
    parts.append("<h3>Metrics against training step</h3><div class='grid'>")
    for group, keys in metric_groups(metric_names).items():
        series = {
            k: [
                (s, float(r["metrics"][k])) for s, r in by_step.items() if isinstance(r["metrics"].get(k), (int, float))
            ]
            for k in keys
        }
        parts.append(svg_line_plot(f"{name}: {group}", series))
    parts.append("</div>")
    confusions = [t for t in newest.get("tables", {}) if "confusion" in t]
    if confusions:
        parts.append("<h3>Confusion matrices</h3><div class='grid'>")
        for table_name in confusions:
            for step in dict.fromkeys((steps[0], newest_step)):
                rows = by_step[step].get("tables", {}).get(table_name, [])
                parts.append(svg_confusion(f"{table_name}, step {step}", rows))
        parts.append("</div>")
    for table_name, rows in newest.get("tables", {}).items():
        if "confusion" not in table_name and rows:
            parts.append(f"<h3>{html.escape(table_name)} at step {newest_step}</h3>" + html_table(rows))
    parts.append(samples_table(f"Sample predictions at step {newest_step}", newest.get("samples", []), blind))
    return parts


def samples_table(heading: str, samples: list[dict[str, Any]], blind: Any = None) -> str:
    """A result's sample predictions under ``heading`` ("" when there are none): each image as a thumbnail (the
    blank a blind control showed instead, where ``blind`` records its fill), its path only on hover; the
    ``correct`` column dropped when the scorer gives no per-item verdict. A training run's report and an
    ``eval run`` folder's report show them alike."""
    fill = tuple(blind["fill"]) if isinstance(blind, dict) and blind.get("fill") else None  # show the blank it saw
    rows = [
        {**row, "image": _image_cell(row["image"], fill), "prediction": str(row.get("prediction", ""))[:400]}
        if row.get("image")
        else {**row, "prediction": str(row.get("prediction", ""))[:400]}
        for row in samples
    ]
    if rows and all(row.get("correct") is None for row in rows):  # the scorer gives no per-item verdict
        rows = [{k: v for k, v in row.items() if k != "correct"} for row in rows]
    if not rows:
        return ""
    return f"<h3>{html.escape(heading)}</h3>" + html_table(rows, text_columns=("prompt", "prediction", "id"))


def coverage_cells(result: dict[str, Any]) -> dict[str, Any]:
    """A result's coverage for a table row: answered of expected items, naming the questions (or pairs) they are
    (:func:`eval_hooks.coverage.coverage_text`), marked partial when the benchmark was scored on the answered
    items only (``eval_allow_partial``) and mostly unresolved when most answers were unread; empty for a result
    written before coverage."""
    from eval_hooks.coverage import coverage_text

    coverage = result.get("coverage")
    if not isinstance(coverage, dict):
        return {}
    marks = [mark for mark in ("partial", "mostly unresolved") if result.get(mark.replace(" ", "_"))]
    return {"answered": coverage_text(coverage) + "".join(f" ({mark})" for mark in marks)}


CURVE_CHECKPOINTS = 6  # a curve shows every checkpoint up to this many, else the first and the last


def curve_section(name: str, by_step: dict[int, dict[str, Any]]) -> list[str]:
    """The curves a benchmark's result declares (``curves``: ``{title, table, x, y}``, e.g. FINER's Fig. 1b,
    accuracy on negative queries against their granularity level), one line per checkpoint: the step-0
    baseline (the base model) against the trained ones. Empty when the benchmark declares none."""
    steps = list(by_step)
    shown = steps if len(steps) <= CURVE_CHECKPOINTS else [steps[0], steps[-1]]
    specs = by_step[steps[-1]].get("curves") or []
    plots = []
    for spec in specs:
        series = {}
        for step in shown:
            rows = by_step[step].get("tables", {}).get(spec.get("table"), [])
            points = [
                (float(row[spec["x"]]), float(row[spec["y"]]))
                for row in rows
                if isinstance(row.get(spec["x"]), (int, float)) and isinstance(row.get(spec["y"]), (int, float))
            ]
            series[f"step {step}" + (" (base)" if step == 0 else "")] = points
        plots.append(svg_line_plot(f"{name}: {spec.get('title', spec['y'])}", series, x_label=str(spec["x"])))
    plots = [plot for plot in plots if plot]
    return ["<h3>Curves by checkpoint</h3><div class='grid'>", *plots, "</div>"] if plots else []


BEFORE_AFTER_METRICS = (
    "macro/f1",
    "yes_proportion",
    "accuracy",
    "paired_accuracy",
    "neg_accuracy_l3_l7",
    "paired_accuracy_l3_l7",
    "pos_accuracy",
)
THUMBNAIL_ROWS = 8


@functools.lru_cache(maxsize=256)
def _thumbnail(path: Path, size: int = 64, blind_fill: tuple[int, int, int] | None = None) -> str:
    """An inline ``<img>`` of ``path`` scaled to fit ``size`` pixels (the report opens offline, and a data URI of
    at most ``size`` x ``size`` pixels keeps the page small), or "" when unreadable. ``blind_fill``: the blank
    a blind control showed the model in its place."""
    import base64
    import io

    from core.images import load_image_cached

    try:
        image = load_image_cached(path, cache=False, blind_fill=blind_fill).copy()
    except (OSError, ValueError):
        return ""
    image.thumbnail((size, size))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    shown = f"{path} (blind control: blank {','.join(map(str, blind_fill))})" if blind_fill else str(path)
    return (
        f"<img alt='{html.escape(path.name)}' title='{html.escape(shown)}' "
        f"width='{image.width}' height='{image.height}' "
        f"src='data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}'>"
    )


def _image_cell(path: str | Path, blind_fill: tuple[int, int, int] | None = None) -> Markup:
    """A sample's image as a thumbnail, or its file name (full path on hover) when it cannot be read."""
    path = Path(path)
    shown = _thumbnail(path, blind_fill=blind_fill)
    if shown:
        return Markup(shown)
    return Markup(f"<span title='{html.escape(str(path))}'>{html.escape(path.name)} (missing)</span>")


def before_after_section(name: str, by_step: dict[int, dict[str, Any]], run_dir: Path) -> list[str]:
    """The step-0 baseline against the newest checkpoint: headline metrics with their difference and 95% paired
    bootstrap interval (questions resampled), and sample rows with the image thumbnail, the reference and the
    prediction at each checkpoint. Empty without a step-0 result (``eval_at_start``) and a later one."""
    from eval_hooks.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, hook_difference_intervals

    steps = list(by_step)
    if 0 not in by_step or len(steps) < 2:
        return []
    last = steps[-1]
    metrics = [m for m in BEFORE_AFTER_METRICS if m in by_step[last]["metrics"]] or list(by_step[last]["metrics"])[:3]
    try:
        items, predictions, intervals = hook_difference_intervals(run_dir, name, metrics, steps)
    except (UserError, KeyError, OSError) as err:
        return [f"<h3>Before / after</h3><p class='muted'>not available: {html.escape(str(err))}</p>"]
    rows = []
    for metric, row in zip(metrics, intervals):
        rows.append(
            {
                "metric": metric,
                "step 0": row["base"],
                f"step {last}": row["trained"],
                "difference": row["difference"],
                "95% interval": f"[{row['low']:.4g}, {row['high']:.4g}]",
                "questions": row["questions"],
            }
        )
    parts = [
        f"<h3>Before / after: step 0 against step {last}</h3>"
        f"<p class='muted'>95% paired bootstrap intervals of the difference: {DEFAULT_RESAMPLES} resamples of the "
        f"questions (seed {DEFAULT_SEED}), as the demo's results.json</p>" + html_table(rows)
    ]
    samples = []
    for item in items[:THUMBNAIL_ROWS]:
        reference = next((item.meta[k] for k in ("label", "answer", "gt_answer", "gt_index") if k in item.meta), "")
        cells = [
            _image_cell(item.images[0]) if item.images else "",
            html.escape(item.prompt[:200]),
            html.escape(str(reference)),
        ]
        cells += [html.escape(str(predictions[step].get(item.id, ""))[:200]) for step in steps]
        samples.append("<tr>" + "".join(f"<td class='text'>{cell}</td>" for cell in cells) + "</tr>")
    head = "".join(
        f"<th>{html.escape(c)}</th>" for c in ["image", "prompt", "reference", *(f"step {s}" for s in steps)]
    )
    parts.append(
        f"<h3>Samples per checkpoint</h3><div class='table-wrap'><table><tr>{head}</tr>{''.join(samples)}</table></div>"
    )
    return parts


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the HTML report of ``run_dir`` (default ``RUN_DIR/report.html``) and return its path: a training
    run's, or an ``eval run --out`` folder's (:func:`write_eval_report`, from its ``results.json``)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    history, state_file = training_history(run_dir)
    results = collect_eval(run_dir)
    if not results and state_file is None and is_eval_run(run_dir):
        return write_eval_report(run_dir, out)
    if not results and state_file is None:
        raise UserError(
            f"{run_dir}: no trainer_state.json and no eval/checkpoint-N/<benchmark>/metrics.json to report (nor "
            "the results.json of a `veritune eval run` folder)"
        )
    if results:  # a folder's name is never imported as a dotted path (eval_hooks.registry.registered_benchmark)
        from eval_hooks.registry import BENCHMARKS

        for name in [name for name in results if name not in BENCHMARKS]:
            print(
                f"note: {run_dir / 'eval'}: {name!r} is not a registered benchmark; its metrics are reported "
                "without the before/after intervals",
                file=sys.stderr,
            )
    sections = [
        f"<h1>veritune report: {html.escape(run_dir.resolve().name)}</h1>",
        f"<p class='muted'>{html.escape(str(run_dir.resolve()))}; "
        f"benchmarks: {html.escape(', '.join(results) or 'none evaluated')}</p>",
    ]
    if state_file is not None and history:
        sections += training_section(history, state_file)
    for name, by_step in results.items():
        sections += benchmark_section(name, by_step)
        sections += before_after_section(name, by_step, run_dir)
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>veritune report: {html.escape(run_dir.resolve().name)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(sections)}</body></html>\n"
    )
    return atomic_write_text(out or run_dir / "report.html", page)


# ---------------------------------------------------------------------------------------------- eval-only runs

EVAL_RESULTS_FILE = "results.json"  # eval_hooks.results.RESULTS_FILE: what `veritune eval run` writes in OUT


def is_eval_run(folder: Path) -> bool:
    """``folder`` is an ``eval run --out`` folder: it holds the run's ``results.json``."""
    return (Path(folder) / EVAL_RESULTS_FILE).is_file()


def read_eval_run(folder: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The ``results.json`` of an ``eval run`` and each of its benchmarks' ``metrics.json`` (``{}`` when gone).

    Raises:
        UserError: results.json, or a metrics.json it names, is not readable.
    """
    path = Path(folder) / EVAL_RESULTS_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, OSError) as err:
        raise UserError(f"{path}: not a readable results file ({err})") from None
    if not isinstance(record, dict) or not isinstance(record.get("results"), dict):
        raise UserError(f"{path}: expected a JSON object with a 'results' object (written by `veritune eval run`)")
    details = {}
    for name, entry in record["results"].items():
        metrics_file = Path(folder) / str((entry or {}).get("metrics_file", f"{name}/metrics.json"))
        try:
            details[name] = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.is_file() else {}
        except (json.JSONDecodeError, OSError) as err:
            raise UserError(f"{metrics_file}: not a readable metrics file ({err})") from None
    return record, details


def eval_summary_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per benchmark of ``results.json``: coverage, the partial and mostly-unresolved marks and the
    headline metrics."""
    from eval_hooks.coverage import benchmark_label, coverage_text

    rows = []
    for name, entry in record["results"].items():
        coverage = entry.get("coverage") or {}
        lower = set(entry.get("lower_is_better") or [])
        rows.append(
            {
                "benchmark": benchmark_label(name, entry),
                "answered": coverage_text(coverage),
                "missing images": coverage.get("missing_images", ""),
                "unresolved %": coverage.get("unresolved_share")
                if coverage.get("unresolved_share") is not None
                else "",
                **{f"{k} (lower is better)" if k in lower else k: v for k, v in (entry.get("metrics") or {}).items()},
            }
        )
    return rows


def eval_run_section(record: dict[str, Any], details: dict[str, dict[str, Any]]) -> list[str]:
    """The eval-only report's body: the run's settings, the summary table, and per benchmark its per-category
    tables and sample predictions (from its metrics.json)."""
    config = record.get("config") or {}
    settings = {
        "model": config.get("model"),
        "backend": config.get("backend"),
        "limit": config.get("limit"),
        "seed": config.get("seed"),
        "strict official": config.get("strict_official"),
        "judge": (config.get("judge") or {}).get("model") if config.get("judge") else None,
        "veritune": record.get("veritune_version"),
        "commit": record.get("git_commit"),
        "date": record.get("date"),
    }
    shown = "; ".join(f"{key}: {value}" for key, value in settings.items() if value not in (None, ""))
    parts = [f"<p class='muted'>{html.escape(shown)}</p>"]
    partial = record.get("partial") or [name for name, e in record["results"].items() if e.get("partial")]
    if partial:
        parts.append(
            f"<p><b>partial</b>: {html.escape(', '.join(partial))} scored on the answered items only "
            "(--allow-partial); their numbers do not describe the whole benchmark</p>"
        )
    parts.append("<h2>Results</h2>" + html_table(eval_summary_rows(record)))
    for name, result in details.items():
        parts.append(f"<h2>{html.escape(name)}</h2>")
        blind = (result.get("generation") or {}).get("blind")
        if isinstance(blind, dict):
            fill = ",".join(map(str, blind.get("fill", [])))
            parts.append(
                f"<p><b>blind control</b>: images replaced by a blank {html.escape(fill)} of the same size</p>"
            )
        confusions = [t for t in result.get("tables", {}) if "confusion" in t]
        if confusions:
            parts.append("<div class='grid'>")
            parts += [svg_confusion(t, result["tables"][t]) for t in confusions]
            parts.append("</div>")
        for table_name, rows in result.get("tables", {}).items():
            if "confusion" not in table_name and rows:
                parts.append(f"<h3>{html.escape(table_name)}</h3>" + html_table(rows))
        parts.append(samples_table("Sample predictions", result.get("samples", []), blind))
    return parts


def write_eval_report(folder: Path, out: Path | None = None) -> Path:
    """The HTML report of an ``eval run --out`` folder (default ``OUT/report.html``), from its results.json."""
    folder = Path(folder)
    record, details = read_eval_run(folder)
    title = f"veritune eval report: {folder.resolve().name}"
    sections = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='muted'>{html.escape(str(folder.resolve()))}; "
        f"benchmarks: {html.escape(', '.join(record['results']) or 'none')}</p>",
        *eval_run_section(record, details),
    ]
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>{''.join(sections)}</body></html>\n"
    )
    return atomic_write_text(out or folder / "report.html", page)
