"""A headless Chromium (Debian's `chromium` + `chromium-driver`) driving the Temporal Web UI.

Selectors are the Web UI's own (checked against UI 2.54.1): `data-testid` attributes for the
tabs, menu items, modal and buttons; the Markdown of the current details is rendered inside an
`<iframe id="user-metadata-current-details">`; the signal's Data field is a CodeMirror editor
(`[role=textbox][aria-label=Data]`). Every step waits for an explicit condition.

Selenium is synchronous: call it from a thread (`asyncio.to_thread`), never on the event loop
that runs the in-process worker, or the UI's queries to the workflow cannot be answered.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    ElementNotInteractableException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTH, HEIGHT = 1400, 1000
TIMEOUT = 60.0  # the UI can be slow on a 2-core machine
FLAKY = (
    NoSuchElementException,
    StaleElementReferenceException,
    ElementNotInteractableException,
    ElementClickInterceptedException,
)

T = TypeVar("T")


def available() -> bool:
    """Whether Debian's chromium and chromedriver are installed."""
    return CHROMIUM.exists() and CHROMEDRIVER.exists()


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A headless Chromium with a fresh profile and a 1400x1000 viewport."""
    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={WIDTH},{HEIGHT}",
    ):
        options.add_argument(arg)
    with tempfile.TemporaryDirectory(prefix="toren-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        try:
            # --window-size includes the (emulated) window frame; pin the viewport itself.
            driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
            )
            yield driver
        finally:
            driver.quit()


class WorkflowPage:
    """One workflow's page in the Web UI, operated the way a person would."""

    def __init__(self, driver: webdriver.Chrome, ui_port: int, workflow_id: str) -> None:
        self.driver = driver
        self.url = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/{workflow_id}"
        self.workflow_id = workflow_id
        self.signal_descriptions: dict[str, str] = {}
        """The signal dropdown's options (name → description), as last opened."""

    # -- waiting -------------------------------------------------------------------------------

    def until(self, condition: Callable[[], T | None], what: str, timeout: float = TIMEOUT) -> T:
        """Wait until `condition()` returns something truthy (DOM churn is retried)."""
        wait = WebDriverWait(self.driver, timeout, poll_frequency=0.2, ignored_exceptions=FLAKY)
        return cast(T, wait.until(lambda _: condition(), message=f"timed out waiting for {what}"))

    def visible(self, css: str, within: WebElement | None = None) -> WebElement | None:
        """The first displayed element matching `css`, if any (the UI renders some twice)."""
        root: Any = within or self.driver
        return next((e for e in root.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()), None)

    def click(self, find: Callable[[], WebElement | None], what: str) -> None:
        """Click what `find` returns once it is displayed and enabled; retry while it churns."""

        def attempt() -> bool:
            element = find()
            if element is None or not element.is_displayed() or not element.is_enabled():
                return False
            element.click()
            return True

        self.until(attempt, f"{what} to be clickable")

    # -- the page ------------------------------------------------------------------------------

    def open(self) -> None:
        """Load the workflow's page and wait for its heading."""
        self.driver.get(self.url)
        self.until(
            lambda: self.workflow_id in self.text_of('[data-testid="workflow-id-heading"]'),
            "the workflow's heading",
        )

    def text_of(self, css: str) -> str:
        """The visible text of the first displayed element matching `css` ("" if none)."""
        element = self.visible(css)
        return element.text if element is not None else ""

    def current_details(self) -> str:
        """Open User Metadata and return the current details as rendered (the iframe's text)."""
        self.click(lambda: self.visible('[data-testid="user-metadata-tab"]'), "User Metadata tab")
        frame = self.until(
            lambda: self.visible("iframe#user-metadata-current-details"), "the current details"
        )
        self.driver.switch_to.frame(frame)
        try:
            # The Markdown is rendered by the UI's /render page: wait for its text to appear.
            text: str = self.until(
                lambda: self.driver.find_element(By.TAG_NAME, "body").text.strip() or None,
                "the rendered current details",
            )
        finally:
            self.driver.switch_to.default_content()
        return text

    def show_heading_and_details(self) -> None:
        """Scroll so the run's heading is at the top and the details fill the rest."""
        heading = self.visible('[data-testid="workflow-id-heading"]')
        assert heading is not None
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", heading)

    def open_signal_dialog(self, signal: str) -> WebElement:
        """More Actions → Send a Signal → choose `signal`; returns the open dialog."""
        self.click(
            lambda: next(
                (
                    b
                    for b in self.driver.find_elements(
                        By.XPATH, '//button[normalize-space(.)="More Actions"]'
                    )
                    if b.is_displayed()
                ),
                None,
            ),
            "More Actions",
        )
        self.click(lambda: self.visible('[data-testid="signal-button"]'), "Send a Signal")
        dialog = self.until(
            lambda: self.visible('dialog[data-testid="signal-confirmation-modal"][open]'),
            "the Send a Signal dialog",
        )
        self.click(
            lambda: self.visible('[data-testid="signal-select-button"]', dialog), "Signal name"
        )
        # Options list the workflow's signals (with their descriptions) once the UI has asked
        # the worker for the workflow's metadata; "Custom" is always there.
        self.until(lambda: self._option(dialog, signal), f"the {signal!r} option")
        self.signal_descriptions = self._descriptions(dialog)
        self.click(lambda: self._option(dialog, signal), f"the {signal!r} option")
        self.until(
            lambda: (
                dialog.find_element(By.CSS_SELECTOR, "input#signal-select").get_attribute("value")
                == signal
            ),
            f"{signal!r} to be selected",
        )
        return dialog

    def fill_data(self, dialog: WebElement, data: str) -> None:
        """Paste `data` into the Data editor, then blur it so the editor commits its value."""
        editor = self.until(
            lambda: self.visible('[role="textbox"][aria-label="Data"]', dialog), "the Data editor"
        )
        editor.click()
        # Like a paste: one insertText, so CodeMirror's bracket auto-closing does not interfere.
        self.driver.execute_cdp_cmd("Input.insertText", {"text": data})
        self.until(lambda: _json_or_none(editor.text) == json.loads(data), "the pasted JSON")
        # Blur with Tab (focus moves on to the Encoding radio). The editor then pretty-prints
        # the JSON and the dialog re-centres; a click meant to blur can land elsewhere after
        # that shift (a click on the dialog's title then closes the dialog), and a click on
        # Submit straight after typing is lost.
        editor.send_keys(Keys.TAB)
        self.until(lambda: "\n" in editor.text, "the editor to reformat on blur")
        self.until(
            lambda: (
                not self.driver.execute_script(
                    "return arguments[0].contains(document.activeElement)", editor
                )
            ),
            "the editor to lose focus",
        )

    def submit(self, dialog: WebElement) -> None:
        """Submit the dialog and wait for the UI's "Workflow signaled." toast."""
        self.click(lambda: self.visible('[data-testid="confirm-modal-button"]', dialog), "Submit")
        self.until(
            lambda: "Workflow signaled" in self.driver.find_element(By.TAG_NAME, "body").text,
            'the "Workflow signaled." toast',
        )

    def screenshot(self, path: Path) -> None:
        """Save the viewport as a PNG."""
        path.parent.mkdir(parents=True, exist_ok=True)
        assert self.driver.save_screenshot(str(path)), f"could not save {path}"

    @staticmethod
    def _descriptions(dialog: WebElement) -> dict[str, str]:
        """The dropdown's options: signal name → description (as the UI shows them)."""
        out: dict[str, str] = {}
        for option in dialog.find_elements(By.CSS_SELECTOR, '[role="option"]'):
            name = option.find_element(By.CSS_SELECTOR, "span").text.strip()
            described = option.find_elements(By.CSS_SELECTOR, ".menu-item-description")
            out[name] = described[0].text.strip() if described else ""
        return out

    @staticmethod
    def _option(dialog: WebElement, signal: str) -> WebElement | None:
        for option in dialog.find_elements(By.CSS_SELECTOR, '[role="option"]'):
            name = option.find_element(By.CSS_SELECTOR, "span").text.strip()
            if name == signal and option.is_displayed():
                return option
        return None


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def pasted_json(details: str, label: str) -> list[str]:
    """The JSON blocks the rendered details label `label:` (e.g. "approve"), in order.

    The Markdown puts each block on its own line right after a `label:` line, which is also
    how the rendered text reads.
    """
    return re.findall(rf"^{re.escape(label)}:\s*\n(\{{.*\}})\s*$", details, flags=re.MULTILINE)
