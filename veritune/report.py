"""``veritune report RUN_DIR``: a static HTML report of a training run that opens offline.

One self-contained file: plots are inline SVG drawn here (no scripts, no fonts or styles fetched, no
plotting library), with each point's value as a hover title. It shows

- training curves from ``trainer_state.json``: rewards (GRPO's total and per-function means, DPO's
  chosen/rejected/margins/accuracies), loss and a few other health signals;
- for each benchmark evaluated under ``RUN_DIR/eval/checkpoint-N/<benchmark>/metrics.json``: a table of
  the headline metrics per checkpoint, every metric against the training step (grouped: headline,
  yes-proportion, per class, per paraphrase or subset), the confusion matrices of the first and the last
  checkpoint, the last checkpoint's per-category tables and sample predictions.
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from veritune.core.errors import UserError
from veritune.core.io import atomic_write_text
from veritune.core.run_layout import EVAL_DIR, checkpoint_eval_dir, checkpoints

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
    "svg{background:#fff;border:1px solid #eee}\n"
)


# ---------------------------------------------------------------------------------------------- drawing


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[low, high]``."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return ticks


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.2e}"


def svg_line_plot(
    title: str,
    series: dict[str, list[tuple[float, float]]],
    *,
    x_label: str = "step",
    width: int = 560,
    height: int = 250,
) -> str:
    """A line plot of one or more ``(x, y)`` series as an inline SVG element ("" when there is no point)."""
    series = {name: sorted(points) for name, points in series.items() if points}
    points = [p for values in series.values() for p in values]
    if not points:
        return ""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_ticks, y_ticks = nice_ticks(min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1), nice_ticks(min(ys), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    legend_width = min(190, 12 + 7 * max(len(name) for name in series))
    left, right, top, bottom = 52, legend_width + 12, 28, 36
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - (y - y0) / (y1 - y0) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}" font-family="sans-serif">',
        f'<text x="{left}" y="17" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    for y in y_ticks:
        parts.append(f'<line x1="{left}" y1="{sy(y):.1f}" x2="{left + plot_w}" y2="{sy(y):.1f}" stroke="#eee"/>')
        parts.append(
            f'<text x="{left - 5}" y="{sy(y) + 3.5:.1f}" font-size="10" text-anchor="end" fill="#555">{_fmt(y)}</text>'
        )
    for x in x_ticks:
        parts.append(
            f'<line x1="{sx(x):.1f}" y1="{top + plot_h}" x2="{sx(x):.1f}" y2="{top + plot_h + 4}" stroke="#888"/>'
        )
        parts.append(
            f'<text x="{sx(x):.1f}" y="{top + plot_h + 15}" font-size="10" text-anchor="middle" fill="#555">'
            f"{_fmt(x)}</text>"
        )
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#888"/>')
    parts.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" font-size="11" text-anchor="middle" fill="#333">'
        f"{html.escape(x_label)}</text>"
    )
    for index, (name, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        if len(values) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in values)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for x, y in values:
            parts.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}">'
                f"<title>{html.escape(name)} at {x_label} {_fmt(x)}: {y:.4g}</title></circle>"
            )
        ly = top + 10 + 15 * index
        parts.append(
            f'<line x1="{width - legend_width}" y1="{ly - 4}" x2="{width - legend_width + 14}" y2="{ly - 4}" '
            f'stroke="{colour}" stroke-width="3"/>'
        )
        parts.append(f'<text x="{width - legend_width + 18}" y="{ly}" font-size="11">{html.escape(name)}</text>')
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


def html_table(rows: list[dict[str, Any]], *, text_columns: tuple[str, ...] = ()) -> str:
    """An HTML table of row dicts (union of their keys as columns); floats with 4 significant digits."""
    if not rows:
        return ""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for column in columns:
            value = row.get(column, "")
            css = ' class="text"' if column in text_columns else ""
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            cells.append(f"<td{css}>{html.escape(shown)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


# ---------------------------------------------------------------------------------------------- reading


def collect_eval(run_dir: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """``{benchmark: {step: metrics.json content}}`` from ``RUN_DIR/eval/checkpoint-N/<benchmark>/``."""
    results: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for step, checkpoint in checkpoints(run_dir / EVAL_DIR):
        for metrics_file in checkpoint.glob("*/metrics.json"):
            try:
                content = json.loads(metrics_file.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, OSError) as err:
                raise UserError(f"{metrics_file}: not a readable metrics file ({err})") from None
            if not isinstance(content, dict) or not isinstance(content.get("metrics"), dict):
                raise UserError(f"{metrics_file}: expected a JSON object with a 'metrics' object")
            results[metrics_file.parent.name][step] = content
    return {name: dict(sorted(by_step.items())) for name, by_step in sorted(results.items())}


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


def metric_groups(metrics: list[str]) -> dict[str, list[str]]:
    """Metric names grouped for plotting: headline (no ``/``), yes-proportion, then by prefix
    (``yes/f1`` -> ``yes``; ``p0/macro/f1`` -> ``p0/macro``)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for name in metrics:
        last = name.rsplit("/", 1)[-1]
        if last in YES_PROPORTION_KEYS:
            groups["yes-proportion"].append(name)
        else:
            groups[name.rsplit("/", 1)[0] if "/" in name else "headline"].append(name)
    order = ["headline", "yes-proportion", "macro", "yes", "no"]
    return dict(sorted(groups.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])))


# ---------------------------------------------------------------------------------------------- sections


def training_section(history: list[dict[str, Any]], source: Path) -> list[str]:
    keys = list(dict.fromkeys(key for row in history for key in row))
    rewards = [k for k in keys if k == "reward" or (k.startswith("rewards/") and not k.endswith("/std"))]
    parts = [f"<h2>Training</h2><p class='muted'>from {html.escape(str(source))}</p><div class='grid'>"]
    parts.append(svg_line_plot("rewards", {k: _curve(history, k) for k in rewards}))
    for title, candidates in TRAINING_CURVES.items():
        parts.append(svg_line_plot(title, {k: _curve(history, k) for k in candidates if k in keys}))
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
    samples = [{**row, "prediction": str(row.get("prediction", ""))[:400]} for row in newest.get("samples", [])]
    if samples:
        parts.append(
            f"<h3>Sample predictions at step {newest_step}</h3>"
            + html_table(samples, text_columns=("prompt", "prediction", "id"))
        )
    return parts


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
    "pos_accuracy",
)
THUMBNAIL_ROWS = 8


def _thumbnail(path: Path, size: int = 64) -> str:
    """An inline ``<img>`` of ``path`` scaled to ``size`` pixels (the report opens offline), or "" when unreadable."""
    import base64
    import io

    from PIL import Image

    try:
        with Image.open(path) as opened:
            image = opened.convert("RGB")
    except (OSError, ValueError):
        return ""
    image.thumbnail((size, size))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return (
        f"<img alt='{html.escape(path.name)}' "
        f"src='data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}'>"
    )


def before_after_section(name: str, by_step: dict[int, dict[str, Any]], run_dir: Path) -> list[str]:
    """The step-0 baseline against the newest checkpoint: headline metrics with their difference and 95% paired
    bootstrap interval (questions resampled), and sample rows with the image thumbnail, the reference and the
    prediction at each checkpoint. Empty without a step-0 result (``eval_at_start``) and a later one."""
    from eval_hooks.bootstrap import metric_difference_intervals
    from eval_hooks.evaluate import prepare_as_evaluated
    from eval_hooks.runner import PREDICTIONS_FILE, read_predictions

    steps = list(by_step)
    if 0 not in by_step or len(steps) < 2:
        return []
    last = steps[-1]
    try:
        prepared = prepare_as_evaluated(name, by_step[last])
        predictions = {
            step: read_predictions(checkpoint_eval_dir(run_dir, step) / name / PREDICTIONS_FILE) for step in steps
        }
    except (UserError, KeyError, OSError) as err:
        return [f"<h3>Before / after</h3><p class='muted'>not available: {html.escape(str(err))}</p>"]
    rows = []
    metrics = [m for m in BEFORE_AFTER_METRICS if m in by_step[last]["metrics"]] or list(by_step[last]["metrics"])[:3]
    intervals = metric_difference_intervals(
        name, prepared.items, predictions[0], predictions[last], metrics, resamples=500
    )
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
    parts = [f"<h3>Before / after: step 0 against step {last}</h3>" + html_table(rows)]
    samples = []
    for item in prepared.items[:THUMBNAIL_ROWS]:
        reference = next((item.meta[k] for k in ("label", "answer", "gt_answer", "gt_index") if k in item.meta), "")
        cells = [
            _thumbnail(item.images[0]) if item.images else "",
            html.escape(item.prompt[:200]),
            html.escape(str(reference)),
        ]
        cells += [html.escape(str(predictions[step].get(item.id, ""))[:200]) for step in steps]
        samples.append("<tr>" + "".join(f"<td class='text'>{cell}</td>" for cell in cells) + "</tr>")
    head = "".join(
        f"<th>{html.escape(c)}</th>" for c in ["image", "prompt", "reference", *(f"step {s}" for s in steps)]
    )
    parts.append(f"<h3>Samples per checkpoint</h3><table><tr>{head}</tr>{''.join(samples)}</table>")
    return parts


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the HTML report of ``run_dir`` (default ``RUN_DIR/report.html``) and return its path."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    history, state_file = training_history(run_dir)
    results = collect_eval(run_dir)
    if not results and state_file is None:
        raise UserError(f"{run_dir}: no trainer_state.json and no eval/checkpoint-N/<benchmark>/metrics.json to report")
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
