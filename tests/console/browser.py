"""Debian's chromium, driven by Playwright for Python (never Playwright's own browser build).

    with chromium() as browser:
        tab = Tab.open(browser, console_url, width=1280)   # its own cookies
        tab.sign_in(key)
        assert not tab.alarms        # no dialog, no page error, no CSP violation

Playwright's ``launch`` starts the browser on a fresh, temporary user-data-dir and removes
it after. Every tab listens for dialogs (``alert`` from an injected script), page errors
and console errors: a hostile payload that ran, or a CSP violation, lands in ``alarms``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, sync_playwright

CHROMIUM: Final = Path("/usr/bin/chromium")
ARGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
PHONE: Final = 390
DESKTOP: Final = 1280
# Waits for the page to change (a live update, a navigation): generous, as the machine is
# shared; a test never asserts how long anything took.
WAIT_MS: Final = 30_000


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=list(ARGS), headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Tab:
    """A page in a browser context of its own (its own cookie jar: one signed-in person)."""

    page: Page
    base: str
    alarms: list[str] = field(default_factory=list)

    @classmethod
    def open(
        cls, browser: Browser, base: str, *, width: int = DESKTOP, bypass_csp: bool = False
    ) -> Tab:
        context = browser.new_context(
            viewport={"width": width, "height": 900}, bypass_csp=bypass_csp
        )
        context.set_default_timeout(WAIT_MS)
        tab = cls(context.new_page(), base)
        tab.page.on("dialog", tab._dialog)
        tab.page.on("console", tab._console)
        tab.page.on("pageerror", tab._error)
        return tab

    def _dialog(self, dialog: Dialog) -> None:
        self.alarms.append(f"dialog: {dialog.type}: {dialog.message}")
        dialog.dismiss()

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.alarms.append(f"console error: {message.text}")

    def _error(self, error: Exception) -> None:
        self.alarms.append(f"page error: {error}")

    def go(self, path: str) -> Page:
        self.page.goto(self.base + path)
        return self.page

    def sign_in(self, key: str) -> None:
        self.go("/console/signin")
        self.page.get_by_label("API key").fill(key)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url("**/console/jobs")

    def close(self) -> None:
        self.page.context.close()
