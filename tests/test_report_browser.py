"""The HTML report in a real headless Chromium: it loads from disk without console errors and shows the matrix.

Driven over the DevTools protocol (a small client on ``websocket-client``), so
console errors, uncaught exceptions and blocked fetches are read from the
browser itself, and a full-page screenshot is kept (``KIT_SCREENSHOT=path.png``
keeps it outside pytest's temporary folder).

Without a ``chromium`` binary (Debian: ``apt-get install chromium``) these
checks skip, saying so; ``KIT_REQUIRE_BROWSER=1`` (as CI sets it) makes that
a failure instead.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kit.backends import resolve
from kit.report import ReportWriter, load_report, merge_reports, render_all
from kit.runner import run_suite

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
)
"""Without the background-networking flags Chromium hangs on refused connections in a sandbox with no network."""


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    binary = chromium_binary()
    if binary is None:
        message = ("the HTML report's browser checks need Chromium, and no chromium binary is on PATH: install "
                   "Debian's chromium (apt-get install -y chromium) to run them here; CI's .ci/run installs it and "
                   "sets KIT_REQUIRE_BROWSER=1, so there they never skip")
        if os.environ.get("KIT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{message} (required by KIT_REQUIRE_BROWSER=1)", pytrace=False)
        pytest.skip(message)
    try:
        import websocket  # noqa: F401
    except ImportError:
        message = "websocket-client is not installed: pip install -e '.[test]'"
        if os.environ.get("KIT_REQUIRE_BROWSER") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return binary


@dataclass
class PageLoad:
    """What the browser said while loading a page."""

    errors: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    screenshot: bytes = b""


class DevTools:
    """A headless Chromium and one page, driven over the DevTools protocol."""

    def __init__(self, binary: str, timeout: float = 30.0) -> None:
        import websocket

        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="kit-chromium-")
        self.process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not open its DevTools port (exit {self.process.poll()})")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        page_ws = ""
        while not page_ws:
            with opener.open(f"http://127.0.0.1:{port}/json/list", timeout=5) as answer:
                targets = json.loads(answer.read())
            page_ws = next((t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page"), "")
            if not page_ws:
                if time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError("chromium opened no page target")
                time.sleep(0.05)
        self.ws = websocket.create_connection(page_ws, timeout=timeout, suppress_origin=True,
                                              http_no_proxy=["127.0.0.1", "localhost"])
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self.events.append(message)
        raise TimeoutError(f"{method}: no answer in {self.timeout} s")

    def wait_for(self, event: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == event for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} in {self.timeout} s")
            self.events.append(json.loads(self.ws.recv()))

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (CSP violations, blocked loads)."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                found.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                found.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip())
        return found

    def evaluate(self, expression: str) -> Any:
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"evaluating {expression!r}: {answer['exceptionDetails']}")
        return answer.get("result", {}).get("value")

    def load(self, url: str, facts: dict[str, str], width: int = 1400, max_height: int = 12000) -> PageLoad:
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)
        result = PageLoad(facts={name: self.evaluate(js) for name, js in facts.items()})
        metrics = self.call("Page.getLayoutMetrics")
        height = int(min(metrics.get("cssContentSize", metrics.get("contentSize", {})).get("height", 2000), max_height))
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        result.screenshot = base64.b64decode(shot["data"])
        time.sleep(0.1)  # let late console messages arrive
        self.call("Runtime.evaluate", expression="1")
        result.errors = self.errors()
        return result

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture
def browser(chromium: str) -> Iterator[DevTools]:
    tools = DevTools(chromium)
    try:
        yield tools
    finally:
        tools.close()


FACTS = {
    "ready": "document.body.getAttribute('data-ready')",
    "title": "document.title",
    "matrix_rows": "document.querySelectorAll('#matrix tbody tr').length",
    "matrix_columns": "Array.from(document.querySelectorAll('#matrix thead th')).map(th => th.textContent)",
    "failing_cells": "document.querySelectorAll('#matrix td.st-fail').length",
    "reproduce": "Array.from(document.querySelectorAll('code.cmd')).map(c => c.textContent)",
    "charts": "document.querySelectorAll('svg.chart').length",
    "timelines": "document.querySelectorAll('.plot-timeline svg').length",
    "series_plots": "document.querySelectorAll('.plot-series svg').length",
    "external": "Array.from(document.querySelectorAll('[src],[href]')).map(e => e.getAttribute('src') || e.getAttribute('href'))"
                ".filter(u => !u.startsWith('#') && !u.startsWith('data:'))",
    "filter": "(() => { const box = document.getElementById('only-interesting'); box.click(); "
              "const shown = Array.from(document.querySelectorAll('tr.check-row')).filter(r => !r.hidden).length; "
              "box.click(); return [document.querySelectorAll('tr.check-row').length, shown]; })()",
    "matrix_visible": "(() => { const r = document.getElementById('matrix').getBoundingClientRect(); "
                      "return r.width > 100 && r.height > 20; })()",
}


def _merged_report(tmp_path: Path) -> Path:
    """A real sqlite run with a seeded bug, a real clean sqlite run, and a synthetic stress run, merged."""
    from tests.seeded_bugs.registry import all_bugs

    bug = next(b for b in all_bugs() if b.name == "ensure_definition_overwrites")
    folders = []
    for label, spec in (("sqlite", "sqlite"), (f"sqlite/{bug.name}", f"tests.seeded_bugs.registry:{bug.name}")):
        backend = resolve("sqlite") if spec == "sqlite" else bug.make_backend()
        writer = ReportWriter.create(tmp_path / "runs", label)
        writer.start_run(backend="sqlite", spec=spec, label=label, backend_obj=backend, seed=7, profile="quick",
                         keyword="definitions")
        try:
            suite = run_suite(backend, keyword="definitions", on_result=writer.add)
        finally:
            backend.close()
        writer.end_suite(suite)
        folders.append(writer.finish())
    stress = ReportWriter.create(tmp_path / "runs", "stress-demo")
    stress.start_run(backend="memory", label="stress demo (synthetic)", tool="stress")
    for worker in range(3):
        for i in range(6):
            t = i * 0.5 + worker * 0.1
            stress.add_event(f"worker-{worker}", t, "claim", t + 0.2, f"run r{i}")
            stress.add_event(f"worker-{worker}", t + 0.25, "commit", t + 0.35)
        stress.add_event(f"worker-{worker}", 1.7, "fault", None, "lost ack")
    stress.add_points("p99 claim latency", [(t / 2, 3 + (t % 3)) for t in range(8)], kind="latency", unit="ms")
    stress.add_points("commits", [(t / 2, 40 + 5 * t) for t in range(8)], kind="throughput", unit="ops/s")
    stress.end_run(duration_s=4.0)
    folders.append(stress.finish())
    merged = merge_reports([load_report(f) for f in folders])
    out = tmp_path / "merged"
    render_all(merged, out)
    return out / "index.html"


def _keep(png: bytes, tmp_path: Path, name: str) -> Path:
    """Save a screenshot: into ``KIT_SCREENSHOT`` (a folder, or the .png of the main check) or the tmp folder."""
    wanted = os.environ.get("KIT_SCREENSHOT", "")
    target = tmp_path / name
    if wanted and not wanted.endswith(".png"):
        target = Path(wanted) / name
    elif wanted and name == "kit-report.png":
        target = Path(wanted)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(png)
    return target


def test_merged_report_renders_without_console_errors_and_shows_the_matrix(browser: DevTools, tmp_path: Path) -> None:
    page = _merged_report(tmp_path)
    loaded = browser.load(page.resolve().as_uri(), FACTS)
    shot = _keep(loaded.screenshot, tmp_path, "kit-report.png")
    facts = loaded.facts
    assert loaded.errors == [], f"the page logged errors: {loaded.errors}"
    assert facts["ready"] == "yes", "the page's script did not run to its end"
    assert facts["matrix_visible"], "the matrix is not laid out on screen"
    assert facts["matrix_columns"] == ["contract area", "sqlite", "sqlite/ensure_definition_overwrites",
                                       "stress demo (synthetic)"]
    assert facts["matrix_rows"] >= 2 and facts["failing_cells"] == 1
    assert facts["filter"][0] >= 10 and facts["filter"][1] == 3, "the 'only failing' filter shows the 3 failing checks"
    assert any("kit check tests.seeded_bugs.registry:ensure_definition_overwrites -k test_" in c
               for c in facts["reproduce"]), facts["reproduce"]
    assert facts["timelines"] == 1 and facts["series_plots"] == 2 and facts["charts"] >= 4
    assert facts["external"] == [], f"the page links outside itself: {facts['external']}"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_partial_report_renders_with_its_incomplete_banner(browser: DevTools, tmp_path: Path) -> None:
    writer = ReportWriter.create(tmp_path, "sqlite")
    writer.start_run(backend="sqlite", label="sqlite")
    backend = resolve("sqlite")
    try:
        run_suite(backend, keyword="definitions", on_result=writer.add)
    finally:
        backend.close()
    # no end_run: the run "crashed"; kit report renders what the journal holds
    render_all(load_report(writer.folder), writer.folder)
    loaded = browser.load((writer.folder / "index.html").resolve().as_uri(), {
        **FACTS, "banner": "document.getElementById('incomplete') && document.getElementById('incomplete').textContent",
        "verdict": "document.getElementById('verdict').textContent"})
    _keep(loaded.screenshot, tmp_path, "kit-report-partial.png")
    assert loaded.errors == []
    assert loaded.facts["verdict"] == "INCOMPLETE" and "Incomplete report" in loaded.facts["banner"]
    assert loaded.facts["series_plots"] == 0 and loaded.facts["timelines"] == 0  # empty states, no broken charts


def test_the_browser_check_sees_console_errors_and_blocked_fetches(browser: DevTools, tmp_path: Path) -> None:
    """Guards the checks above against a false green: a broken page is reported as broken."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; script-src 'unsafe-inline'\"></head><body>"
        '<img src="http://127.0.0.1:9/blocked.png">'
        '<script>console.error("boom"); notDefined();</script></body></html>'
    )
    errors = browser.load(page.resolve().as_uri(), {}).errors
    assert any("boom" in e for e in errors), errors
    assert any("notDefined" in e for e in errors), errors
    assert any("Content Security Policy" in e or "blocked" in e.lower() for e in errors), errors
