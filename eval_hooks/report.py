"""``veritune report RUN_DIR``: a static HTML report of a training run that opens offline.

Plots (inline SVG, no scripts, no network) of the training rewards and loss from ``trainer_state.json``
and of every headline eval metric against the checkpoint step, read from
``RUN_DIR/eval/checkpoint-N/<benchmark>/metrics.json``; the newest checkpoint's per-class tables
(precision/recall/F1, yes-proportion) and confusion matrices.
"""

from __future__ import annotations

import argparse
import html
import json
import re
from pathlib import Path
from typing import Any

from veritune.errors import UserError
from veritune.io import atomic_write_text

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def svg_plot(title: str, series: dict[str, list[tuple[float, float]]], width: int = 460, height: int = 220) -> str:
    """A line plot of one or more ``(x, y)`` series as an inline SVG element."""
    points = [p for values in series.values() for p in values]
    if not points:
        return ""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1
    left, right, top, bottom = 48, 12, 24, 28

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def sy(y: float) -> float:
        return height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{left}" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#888"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#888"/>',
             f'<text x="4" y="{top + 8}" font-size="10">{y1:.3g}</text><text x="4" y="{height - bottom}" font-size="10">{y0:.3g}</text>',
             f'<text x="{left}" y="{height - 8}" font-size="10">step {x0:g}</text>',
             f'<text x="{width - right - 60}" y="{height - 8}" font-size="10">step {x1:g}</text>']  # fmt: skip
    for index, (name, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(values))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in values]
        parts.append(f'<text x="{width - right - 150}" y="{top + 12 * (index + 1)}" font-size="10" fill="{colour}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{v:.2f}</td>" if isinstance(v, float) else f"<td>{html.escape(str(v))}</td>" for v in (row.get(c, "") for c in columns)) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def collect_eval(run_dir: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """``{benchmark: {step: metrics.json content}}`` from the run's eval folders."""
    results: dict[str, dict[int, dict[str, Any]]] = {}
    eval_dir = run_dir / "eval"
    for checkpoint in sorted(eval_dir.glob("checkpoint-*")) if eval_dir.is_dir() else []:
        match = CHECKPOINT.match(checkpoint.name)
        if not match:
            continue
        for metrics_file in checkpoint.glob("*/metrics.json"):
            results.setdefault(metrics_file.parent.name, {})[int(match.group(1))] = json.loads(metrics_file.read_text())
    return results


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the HTML report of ``run_dir`` (default ``RUN_DIR/report.html``) and return its path."""
    if not run_dir.is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    out = out or run_dir / "report.html"
    sections = [f"<h1>veritune report: {html.escape(run_dir.name)}</h1>"]
    states = [run_dir / "trainer_state.json", *sorted(run_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: p.stat().st_mtime)]
    state_file = next((p for p in states if p.is_file()), None)
    if state_file:
        history = json.loads(state_file.read_text()).get("log_history", [])
        train = {key: [(row["step"], row[key]) for row in history if key in row and isinstance(row[key], (int, float))]
                 for key in ("reward", "rewards/accuracy_reward/mean", "rewards/format_reward/mean", "rewards/margins", "loss")}  # fmt: skip
        sections.append("<h2>Training</h2>")
        sections.append(svg_plot("reward", {k: v for k, v in train.items() if k.startswith("reward") and v}))
        sections.append(svg_plot("loss", {"loss": train["loss"]}) if train["loss"] else "")
    results = collect_eval(run_dir)
    for benchmark, by_step in sorted(results.items()):
        sections.append(f"<h2>{html.escape(benchmark)}</h2>")
        headline = sorted({k for r in by_step.values() for k in r["metrics"] if "/" not in k or k.startswith("macro/")})
        sections.append(svg_plot(f"{benchmark}: headline metrics", {k: [(s, r["metrics"][k]) for s, r in sorted(by_step.items()) if k in r["metrics"]] for k in headline}))
        proportions = {k: [(s, r["metrics"][k]) for s, r in sorted(by_step.items()) if k in r["metrics"]] for k in ("yes_proportion", "yes_ratio")}
        sections.append(svg_plot(f"{benchmark}: yes-proportion", {k: v for k, v in proportions.items() if v}))
        newest_step, newest = max(by_step.items())
        per_class = [{"class": label, **{m: newest["metrics"][f"{label}/{m}"] for m in ("precision", "recall", "f1") if f"{label}/{m}" in newest["metrics"]}}
                     for label in ("yes", "no") if f"{label}/f1" in newest["metrics"]]  # fmt: skip
        if per_class:
            sections.append(f"<h3>Per class at step {newest_step}</h3>" + _table(per_class))
        for name, rows in newest.get("tables", {}).items():
            sections.append(f"<h3>{html.escape(name)} at step {newest_step}</h3>" + _table(rows))
    if not results and not state_file:
        raise UserError(f"{run_dir}: no trainer_state.json and no eval results to report")
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>veritune report</title><style>body{font-family:sans-serif;margin:24px}"
            "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px}svg{margin:6px}</style></head><body>"
            + "".join(sections) + "</body></html>")  # fmt: skip
    return atomic_write_text(out, page)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune report``."""
    parser = subparsers.add_parser("report", help="write a static HTML report of a training run")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, help="default: RUN_DIR/report.html")
    parser.set_defaults(handler=lambda args: print(f"wrote {write_report(args.run_dir, args.out)}") or 0)
