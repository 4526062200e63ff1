"""Headless Chromium (the Debian package) driven over the DevTools protocol, for page tests.

A fresh profile per browser, every network feature the brief allows switched off, and a
websocket (websocket-client) to one page: load a file:// URL, collect console errors, uncaught
exceptions and log entries of level error while it loads, evaluate checks, take a full-page
screenshot.
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
from pathlib import Path
from typing import Any, Optional

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "/usr/bin/chromium")
REQUIRE_ENV = "ORANDCAR_REQUIRE_BROWSER"  # set (as .ci/run does) to fail instead of skipping without a browser
ARTIFACTS_ENV = "ORANDCAR_TEST_ARTIFACTS"  # where screenshots are copied; default: test-artifacts/ in the checkout
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
)
START_TIMEOUT_S = 60


def chromium_binary() -> Optional[str]:
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_required() -> bool:
    return bool(os.environ.get(REQUIRE_ENV) or os.environ.get("CI"))


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless Chromium process and a DevTools connection to its page."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900):
        import websocket  # websocket-client, from the test extra

        self.profile = Path(tempfile.mkdtemp(prefix="orandcar-chromium-"))
        self.width = width
        self.log = open(self.profile / "chromium.log", "wb")
        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile / 'profile'}", "--remote-debugging-port=0",
             f"--window-size={width},{height}", "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            port = self._port()
            self.socket = websocket.create_connection(self._page_socket(port), timeout=60, suppress_origin=True)
        except BaseException:
            self.close()
            raise
        self.next_id = 0
        self.events: list[dict] = []

    def _port(self) -> int:
        active = self.profile / "profile" / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrowserError(f"chromium exited with {self.process.returncode}: {self._log_tail()}")
            if active.is_file():
                first = active.read_text().splitlines()[:1]
                if first and first[0].isdigit():
                    return int(first[0])
            time.sleep(0.05)
        raise BrowserError(f"chromium did not open its DevTools port in {START_TIMEOUT_S}s: {self._log_tail()}")

    def _page_socket(self, port: int) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
                targets = json.loads(response.read())
            pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.05)
        raise BrowserError("chromium opened no page target")

    def _log_tail(self) -> str:
        self.log.flush()
        return (self.profile / "chromium.log").read_bytes()[-2000:].decode("utf-8", "replace")

    def send(self, method: str, **params: Any) -> dict:
        """Call a DevTools method and return its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        call_id = self.next_id
        self.socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def wait_for(self, event: str, timeout: float = 60) -> dict:
        for i, message in enumerate(self.events):
            if message["method"] == event:
                return self.events.pop(i)
        self.socket.settimeout(timeout)
        while True:
            message = json.loads(self.socket.recv())
            if message.get("method") == event:
                return message
            if "method" in message:
                self.events.append(message)

    def load(self, url: str) -> None:
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Log.clear")  # entries of a page loaded before are not this page's
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error-level log entries seen so far."""
        out = []
        for message in self.events:
            method, params = message["method"], message.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                args = params.get("args", [])
                out.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in args))
            elif method == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                out.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip())
        return out

    def screenshot(self, path: Path, max_height: int = 20000) -> Path:
        """A PNG of the whole page (cut at ``max_height`` pixels)."""
        metrics = self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        height = min(int(size["height"]) + 1, max_height)
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=height, deviceScaleFactor=1,
                  mobile=False)
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        self.send("Emulation.clearDeviceMetricsOverride")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        socket = getattr(self, "socket", None)
        if socket is not None:
            try:
                socket.close()
            except Exception:
                pass
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


PAGE_CHECKS = """
(async () => {
  const images = Array.from(document.images);
  const failed = [];
  await Promise.all(images.map(img => img.decode().catch(() => failed.push(img.alt || img.src.slice(0, 80)))));
  return {
    images: images.length,
    undecoded: failed.concat(images.filter(img => !(img.complete && img.naturalWidth > 0))
                                   .map(img => img.alt || img.src.slice(0, 80))),
    charts: Array.from(document.querySelectorAll("img.chart")).map(img => ({id: img.id, width: img.naturalWidth,
                                                                           height: img.naturalHeight})),
    thumbnails: document.querySelectorAll(".thumb img").length,
    // code in a heading (a family name) as large and as bold as the heading around it
    heading_code: Array.from(document.querySelectorAll("h1 code, h2 code, h3 code, h4 code")).map(c => {
      const own = getComputedStyle(c), around = getComputedStyle(c.parentElement);
      return {text: c.textContent, fits: own.fontSize === around.fontSize && own.fontWeight === around.fontWeight};
    }),
    scripts: document.querySelectorAll("script").length,
    title: document.title,
    text: document.body.innerText,
    height: document.documentElement.scrollHeight,
  };
})()
"""
