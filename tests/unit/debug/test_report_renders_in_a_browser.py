"""The debug report renders in headless Chromium: every image loads, no console errors (slow; skips without chromium)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from hbtool.config import load_config
from hbtool.debug.run import run_debug, write_debug
from tests.debug_models import tiny_transformer, write_config

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # renders in a browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_report_renders(tmp_path):
    model = tiny_transformer(tmp_path / "m.onnx")
    cfg = load_config(write_config(tmp_path, model, "1x16x32", {"auto_int16": False}))
    out = tmp_path / "out"
    write_debug(run_debug(cfg, auto=True, samples=8), out)
    page = out / "debug_report.html"
    srcs = re.findall(r'<img src="([^"]+)"', page.read_text())
    assert len(srcs) >= 4
    probe = out / "probe.html"
    probe.write_text("<html><body><div id=r></div><script>const s=%r;let n=0;for(const x of s){const i=new Image();"
                     "i.onload=()=>{document.getElementById('r').textContent+=' ok:'+x+':'+i.naturalWidth};"
                     "i.onerror=()=>{document.getElementById('r').textContent+=' fail:'+x};i.src=x;}</script></body></html>" % srcs)
    dom = _chromium("--dump-dom", probe.as_uri()).stdout
    for s in srcs:
        m = re.search(rf"ok:{re.escape(s)}:(\d+)", dom)
        assert m and int(m.group(1)) > 0, (s, dom[-500:])
    shot = _chromium(f"--screenshot={tmp_path / 'report.png'}", "--window-size=1200,3000", page.as_uri())
    console = [ln for ln in shot.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln or "Failed to load" in ln]
    assert not console, console
    assert (tmp_path / "report.png").stat().st_size > 10_000
    shutil.copy(tmp_path / "report.png", "/tmp/debug_report_screenshot.png")
