"""The figures a benchmark records, in a form ``perf/run_all.py`` can compare with the last recorded run.

A benchmark ends its output with a figures table (:func:`figures_table`)::

    | figure | value | unit | better |
    | --- | --- | --- | --- |
    | model-free stages, veritune (median) | 12.3 | s | lower |

``make bench`` writes that output into its section of docs/PERFORMANCE.md, so the document stays the one
home of the recorded figures, readable as it is. On the next run, ``perf/run_all.py`` reads the previous
section's table (:func:`parse_figures`) and prints each new figure beside the recorded one with their
ratio (:func:`compare`), marking ``REGRESSION`` where the figure got more than 20% worse: a time-like
figure (``better`` = ``lower``) whose ratio new / recorded is above 1.2, or a throughput-like one
(``higher``) whose ratio is below 1 / 1.2. Figures are compared by name, so renaming one starts it afresh.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HEADER = "| figure | value | unit | better |"
REGRESSION_RATIO = 1.2  # more than 20% worse


@dataclass(frozen=True)
class Figure:
    """One recorded number: its value, unit and which direction is better ("lower" or "higher")."""

    value: float
    unit: str
    better: str


def figures_table(rows: list[tuple[str, float, str, str]]) -> str:
    """The figures table a benchmark prints last: rows of ``(name, value, unit, better)``."""
    lines = [HEADER, "| --- | --- | --- | --- |"]
    for name, value, unit, better in rows:
        if better not in ("lower", "higher") or "|" in name:
            raise ValueError(f"figure {name!r}: better must be 'lower' or 'higher', and the name has no '|'")
        text = f"{value:.4g}"
        if "e+" in text:  # four significant digits, but no exponent for a large number
            text = f"{value:.0f}"
        lines.append(f"| {name} | {text} | {unit} | {better} |")
    return "\n".join(lines)


def parse_figures(text: str) -> dict[str, Figure]:
    """The figures of every figures table in ``text`` (a benchmark's output or its PERFORMANCE.md section);
    rows that do not parse are skipped."""
    figures: dict[str, Figure] = {}
    in_table = False
    for line in text.splitlines():
        line = line.strip()
        if line == HEADER:
            in_table = True
            continue
        if not in_table:
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != 4 or cells[3] not in ("lower", "higher"):
            continue
        try:
            value = float(cells[1].replace(",", ""))
        except ValueError:
            continue
        figures[cells[0]] = Figure(value, cells[2], cells[3])
    return figures


def compare(now: dict[str, Figure], recorded: dict[str, Figure]) -> list[str]:
    """One line per new figure: its value, the recorded one and the ratio new / recorded, marked
    ``REGRESSION`` when it is more than 20% worse."""
    lines = []
    for name, figure in now.items():
        before = recorded.get(name)
        if before is None:
            lines.append(f"{name}: {figure.value:.4g} {figure.unit} (nothing recorded)")
            continue
        if before.value == 0 or not math.isfinite(before.value):
            lines.append(f"{name}: {figure.value:.4g} {figure.unit} (recorded {before.value:.4g}: no ratio)")
            continue
        ratio = figure.value / before.value
        worse = ratio > REGRESSION_RATIO if figure.better == "lower" else ratio < 1 / REGRESSION_RATIO
        mark = f"  REGRESSION ({figure.better} is better)" if worse else ""
        lines.append(
            f"{name}: {figure.value:.4g} {figure.unit}, recorded {before.value:.4g} {before.unit}, "
            f"ratio {ratio:.2f}{mark}"
        )
    return lines
