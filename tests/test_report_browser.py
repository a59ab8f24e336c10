"""The report as a browser shows it: headless Chromium renders a report of a small GRPO run with eval
results, takes a screenshot, and measures the laid-out page (nothing wider than a narrow window outside the
tables' own scroll boxes, every label inside its plot, every thumbnail decoded). Skips without Chromium
(``scripts/test.sh`` installs Debian's ``chromium`` when run as root)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import write_report_run
from PIL import Image

from veritune.report import write_report

BROWSER = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no chromium on PATH (Debian: apt-get install chromium; scripts/test.sh does it as root)"
)
WINDOW = (800, 2400)  # narrower than two plots side by side: the page must reflow, not overflow

# Run in the page once it is laid out; writes its findings into the DOM, which --dump-dom prints.
PROBE = """
window.addEventListener("load", () => {
  const width = document.documentElement.clientWidth;
  const found = {width, scrollWidth: document.documentElement.scrollWidth, overflowing: [], outside: [],
                 images: 0, broken: 0, plots: 0};
  for (const el of document.body.querySelectorAll("*")) {
    const inTable = el.closest(".table-wrap") && !el.classList.contains("table-wrap");
    const inPlot = el.closest("svg") && el.tagName.toLowerCase() !== "svg";
    if (!inTable && !inPlot && el.getBoundingClientRect().right > width + 1) found.overflowing.push(el.tagName);
  }
  for (const svg of document.querySelectorAll("svg")) {
    found.plots++;
    const box = svg.getBoundingClientRect();
    for (const text of svg.querySelectorAll("text")) {
      const r = text.getBoundingClientRect();
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
        found.outside.push(svg.getAttribute("aria-label") + ": " + text.textContent);
    }
  }
  for (const img of document.images) { found.images++; if (!img.complete || img.naturalWidth === 0) found.broken++; }
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
});
"""


def _chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    command += [f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}", *args, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("browser") / "run"
    run.mkdir()
    return write_report(write_report_run(run))


def test_screenshot_shows_a_rendered_page(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    _chromium(report, tmp_path / "profile", f"--screenshot={shot}")
    with Image.open(shot) as image:
        assert image.size == WINDOW
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, plot lines and thumbnails, not a blank page


def test_page_fits_the_window_with_labels_inside_plots(report: Path, tmp_path: Path) -> None:
    page = report.read_text(encoding="utf-8")
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", f"<script>{PROBE}</script></body>"), encoding="utf-8")
    dom = _chromium(probed, tmp_path / "profile", "--virtual-time-budget=5000", "--dump-dom").stdout
    found = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom).group(1).replace("&quot;", '"'))
    assert found["plots"] >= 20 and found["images"] >= 30
    assert found["scrollWidth"] <= found["width"] and found["overflowing"] == []
    assert found["outside"] == []  # legends and tick labels fit inside their plots
    assert found["broken"] == 0
