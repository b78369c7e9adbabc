"""The console (`toren serve` at `/`) in a real headless Chromium, against real runs.

The app is served by uvicorn on a free port in this event loop, the agents' worker runs in
process on scripted models, and selenium (synchronous) is driven from a thread
(`asyncio.to_thread`), so the loop stays free to serve the page and the worker.

`TOREN_SCREENSHOTS=1` writes the README's screenshots to docs/images/ (otherwise to tmp).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from temporalio.client import Client

from tests import browser
from tests.conftest import ROOT, result_of, wait_for
from tests.test_approvals import PAY, paid
from toren import client as toren_client
from toren.testing import free_port
from toren.web import Token, create_app
from toren.worker import serve

pytestmark = pytest.mark.skipif(
    not browser.available(),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver)",
)

IMAGES = ROOT / "docs" / "images"
CALL = "call_pay"
ADMIN = "alice-console-token"
"""A named token for every agent: its decisions are by alice."""


# -- the server and the browser -----------------------------------------------------------------


@asynccontextmanager
async def console(client: Client, tokens: list[Token]) -> AsyncIterator[str]:
    """The app under uvicorn on a free port, in this event loop."""
    app = create_app(client, tokens=tokens)
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await wait_for(lambda: server.started, timeout=10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    """One headless Chromium for the module (each test opens its own page)."""
    with browser.chromium() as chrome:
        yield chrome


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go: docs/images/ with TOREN_SCREENSHOTS=1, else the test's tmp."""
    return IMAGES if os.environ.get("TOREN_SCREENSHOTS") == "1" else tmp_path


class Page:
    """The console in the browser, used the way a person would."""

    def __init__(self, driver: Any, url: str) -> None:
        self.driver = driver
        self.url = url

    def until(self, condition: Callable[[], Any], what: str) -> Any:
        wait = WebDriverWait(
            self.driver, browser.TIMEOUT, poll_frequency=0.2, ignored_exceptions=browser.FLAKY
        )
        return wait.until(lambda _: condition(), message=f"timed out waiting for {what}")

    def find(self, css: str) -> WebElement | None:
        found = [e for e in self.driver.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()]
        return found[0] if found else None

    def text(self, css: str = "main") -> str:
        element = self.find(css)
        return element.text if element is not None else ""

    def size(self, width: int, height: int) -> None:
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
        )

    def login(self, token: str, who: str) -> None:
        """Open the console and type the token into the token box it shows."""
        self.size(1280, 800)
        self.driver.get(self.url + "/")
        box = self.until(lambda: self.find("#token-input"), "the token box")
        box.send_keys(token, Keys.ENTER)
        self.until(lambda: who in self.text("#who"), f"the header to say {who!r}")

    def go(self, hash_: str) -> None:
        self.driver.execute_script("location.hash = arguments[0]", hash_)

    def card(self, run_id: str, call_id: str) -> WebElement:
        def found() -> WebElement | None:
            for card in self.driver.find_elements(
                By.CSS_SELECTOR, f'article[data-call="{call_id}"]'
            ):
                if run_id in card.find_element(By.CSS_SELECTOR, "h3").text:
                    return card
            return None

        return self.until(found, f"the inbox card of {call_id} in {run_id}")

    def event(self, type_: str, containing: str = "") -> str:
        """The text of the timeline's first `type_` event containing `containing`.

        Read inside the wait: the timeline is drawn again as the run's items arrive, so an
        element found one moment may be gone the next (the wait retries a stale one).
        """

        def found() -> str | None:
            for li in self.driver.find_elements(By.CSS_SELECTOR, f'li[data-type="{type_}"]'):
                text = str(li.text)
                if containing in text:
                    return text
            return None

        text: str = self.until(found, f"a {type_} event with {containing!r} on the timeline")
        return text

    def shot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        assert self.driver.save_screenshot(str(path)), f"could not save {path}"

    def leave(self) -> None:
        """Close the page's streams before the server stops."""
        self.driver.get("about:blank")


def pay_agent(make_agent: Callable[..., Path], tmp_path: Path, **config: Any) -> Path:
    return make_agent(
        tools={"pay": PAY},
        script=[
            {"tool_calls": [{"id": CALL, "name": "pay", "args": {"amount": 500}}]},
            "result: {last_tool_result}",
        ],
        env={"required": ["PAY_LOG"]},
        **config,
    )


async def park(client: Client, agent: str) -> str:
    handle = await toren_client.start_run(client, agent, "pay the supplier")
    calls = await wait_for(lambda: toren_client.pending(client, handle.id))
    assert [c.call_id for c in calls] == [CALL]
    return handle.id


# -- the tests ----------------------------------------------------------------------------------


async def test_approve_from_the_inbox_and_see_the_run_complete_on_its_timeline(
    client: Client, driver: Any, make_agent: Callable[..., Path], tmp_path: Path, shots: Path
) -> None:
    folder = pay_agent(make_agent, tmp_path)
    log = tmp_path / "pay.jsonl"
    tokens = [Token(ADMIN, None, "alice")]
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        run_id = await park(client, folder.name)
        async with console(client, tokens) as url:
            page = Page(driver, url)

            def person() -> tuple[str, str, str]:
                page.login(ADMIN, "alice")
                card = page.card(run_id, CALL)
                shown = card.text
                assert page.find("#token-box") is None  # the token box closes once it is taken
                page.shot(shots / "console-inbox.png")
                card.find_element(By.CSS_SELECTOR, "button.approve").click()
                # The flash, not the card: the inbox drops the card once the call stops waiting.
                said = page.until(
                    lambda: "Approved" in page.text("#flash") and page.text("#flash"),
                    "the approval to land",
                )
                page.go(f"#/runs/{run_id}")
                page.event("RunCompleted", "result: paid 500")
                resolved = page.event("ApprovalResolved")
                page.event("ApprovalRequested")
                page.driver.execute_script(
                    "document.querySelector('li[data-type=\"ApprovalRequested\"]').scrollIntoView()"
                )
                page.shot(shots / "console-run.png")
                page.leave()
                return shown, said, resolved

            shown, said, resolved = await asyncio.to_thread(person)
        result = await result_of(client.get_workflow_handle(run_id))
    text = result["text"] if isinstance(result, dict) else result.text

    assert shown.startswith(f"pay {CALL} in {run_id}")
    assert f"agent\n{folder.name}" in shown and "expires\nnever" in shown
    assert said == f"Approved pay ({CALL}) as alice."
    assert "alice" in resolved and "true" in resolved
    assert text == "result: paid 500"
    assert paid(log) == [{"amount": 500}]


async def test_deny_with_a_comment_and_the_model_reads_it(
    client: Client, driver: Any, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    folder = pay_agent(make_agent, tmp_path)
    log = tmp_path / "pay.jsonl"
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        run_id = await park(client, folder.name)
        async with console(client, [Token(ADMIN, None, "alice")]) as url:
            page = Page(driver, url)

            def person() -> str:
                page.login(ADMIN, "alice")
                card = page.card(run_id, CALL)
                card.find_element(By.CSS_SELECTOR, "input[type=text]").send_keys("over budget")
                card.find_element(By.CSS_SELECTOR, "button.deny").click()
                page.until(lambda: "Denied pay" in page.text("#flash"), "the denial to land")
                page.go(f"#/runs/{run_id}")
                answer = page.event("RunCompleted", "over budget")
                page.leave()
                return answer

            answer = await asyncio.to_thread(person)
        result = await result_of(client.get_workflow_handle(run_id))
    text = result["text"] if isinstance(result, dict) else result.text

    assert "result: denied by alice: over budget" in answer
    assert text == "result: denied by alice: over budget"
    assert paid(log) == []


async def test_approve_with_an_edited_amount_using_the_keyboard(
    client: Client, driver: Any, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    folder = pay_agent(make_agent, tmp_path)
    log = tmp_path / "pay.jsonl"
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        run_id = await park(client, folder.name)
        async with console(client, [Token(ADMIN, None, "alice")]) as url:
            page = Page(driver, url)

            def person() -> tuple[str, str, str]:
                page.login(ADMIN, "alice")
                card = page.card(run_id, CALL)
                args = card.find_element(By.CSS_SELECTOR, "textarea")
                assert json.loads(args.get_attribute("value") or "") == {"amount": 500}
                args.send_keys(Keys.CONTROL, "a")
                args.send_keys('{"amount": 80')  # not JSON yet: refused in the page
                card.find_element(By.CSS_SELECTOR, "button.approve").click()
                bad = page.until(
                    lambda: "not valid JSON" in card.text and card.text, "the JSON complaint"
                )
                args.send_keys("}", Keys.TAB, Keys.TAB)  # past the comment to Approve
                focused = page.driver.switch_to.active_element
                label = focused.text
                focused.send_keys(Keys.ENTER)
                page.until(lambda: "edited arguments" in page.text("#flash"), "the edited approval")
                page.go(f"#/runs/{run_id}")
                answer = page.event("RunCompleted", "paid 80")
                page.leave()
                return bad, label, answer

            bad, label, answer = await asyncio.to_thread(person)
        result = await result_of(client.get_workflow_handle(run_id))
    text = result["text"] if isinstance(result, dict) else result.text

    assert "Not sent: the arguments are not valid JSON" in bad
    assert label == "Approve"
    assert "result: paid 80" in answer
    assert text == "result: paid 80"
    assert paid(log) == [{"amount": 80}]  # ran once, with the person's amount


FIRST = "The first answer streams in small pieces, " * 6
SECOND = "And the second one answers the follow-up question."

OBSERVE = """
const bubble = document.querySelector("li.streaming");
window.streamLog = [];
new MutationObserver(() => window.streamLog.push(
  {state: bubble.dataset.state, text: bubble.textContent})
).observe(bubble, {childList: true, characterData: true, subtree: true, attributes: true});
"""


async def test_a_thread_streams_its_answer_and_takes_a_second_message(
    client: Client, driver: Any, make_agent: Callable[..., Path], shots: Path
) -> None:
    folder = make_agent(
        script=[{"text": FIRST, "stream_delay_ms": 40}, {"text": SECOND, "stream_delay_ms": 20}],
        stream={"batchMs": 100},
    )
    agent = folder.name
    tokens = [Token("carol-thread-token", frozenset({agent}), "carol")]
    async with serve(client, [folder]), console(client, tokens) as url:
        page = Page(driver, url)

        def person() -> tuple[list[dict[str, str]], list[str], str]:
            page.login("carol-thread-token", "carol")
            page.go("#/threads")
            page.until(
                lambda: page.driver.find_elements(By.CSS_SELECTOR, "#thread-agent option"),
                "the agent to pick",
            )
            page.find("form.start button").click()  # type: ignore[union-attr]
            page.until(lambda: "Thread with" in page.text("main p.muted"), "the new thread")
            thread_id = page.driver.execute_script("return location.hash").split("/")[-1]
            page.driver.execute_script(OBSERVE)
            page.find("#thread-input").send_keys("hello")  # type: ignore[union-attr]
            page.find("form.send button").click()  # type: ignore[union-attr]
            page.until(lambda: FIRST.strip() in page.text("ol.chat"), "the first answer")
            log: list[dict[str, str]] = page.driver.execute_script("return window.streamLog")
            page.find("#thread-input").send_keys("and then?")  # type: ignore[union-attr]
            page.find("form.send button").click()  # type: ignore[union-attr]
            page.until(lambda: SECOND in page.text("ol.chat"), "the second answer")
            page.until(lambda: page.find("li.streaming") is None, "the stream bubble to go")
            roles = [
                li.get_attribute("class") or ""
                for li in page.driver.find_elements(By.CSS_SELECTOR, "ol.chat li")
            ]
            page.shot(shots / "console-thread.png")
            page.leave()
            return log, roles, thread_id

        log, roles, thread_id = await asyncio.to_thread(person)
        messages = await toren_client.messages(client, thread_id)

    done = next(i for i, entry in enumerate(log) if entry["state"] == "done")
    partial = [e["text"] for e in log[:done] if e["state"] == "streaming"]
    # Text arrived in pieces before the message completed: some prefix, shorter than the whole.
    assert any(0 < len(t) < len(FIRST) and FIRST.startswith(t) for t in partial), log[: done + 1]
    assert roles == ["msg user", "msg assistant", "msg user", "msg assistant"]
    assert [m["content"] for m in messages] == ["hello", FIRST, "and then?", SECOND]


async def test_a_token_scoped_to_one_agent_sees_none_of_another_agents_runs(
    client: Client, driver: Any, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    mine = pay_agent(make_agent, tmp_path)
    theirs = pay_agent(make_agent, tmp_path, name=f"{mine.name}_b")
    log = tmp_path / "pay.jsonl"
    scoped = f"{mine.name}-only"
    tokens = [Token(ADMIN, None, "alice"), Token(scoped, frozenset({mine.name}), "ann")]
    async with serve(client, [mine, theirs], environ={"PAY_LOG": str(log)}):
        my_run = await park(client, mine.name)
        their_run = await park(client, theirs.name)
        async with console(client, tokens) as url:
            admin = {"Authorization": f"Bearer {ADMIN}"}
            async with httpx.AsyncClient(base_url=url, headers=admin, timeout=30) as http:

                async def listed() -> bool:
                    inbox = (await http.get("/v1/inbox")).json()["inbox"]
                    runs = (await http.get("/v1/runs")).json()["runs"]
                    ids = {i["run_id"] for i in inbox} & {r["run_id"] for r in runs}
                    return {my_run, their_run} <= ids

                # Both are waiting and listed for a token of every agent: what ann must not see.
                await wait_for(listed, timeout=60)
            page = Page(driver, url)

            def ann() -> tuple[str, str, str, list[str]]:
                page.login(scoped, "ann")
                page.card(my_run, CALL)
                inbox = page.text()
                page.go("#/runs")
                page.until(lambda: my_run in page.text("table"), "ann's run in the list")
                runs = page.text()
                options = [
                    o.get_attribute("value") or ""
                    for o in page.driver.find_elements(By.CSS_SELECTOR, "#start-agent option")
                ]
                page.go(f"#/runs/{their_run}")
                refused = page.until(lambda: "Refused" in page.text() and page.text(), "a refusal")
                page.size(390, 844)
                page.go("#/inbox")
                page.card(my_run, CALL)
                width = page.driver.execute_script("return document.documentElement.scrollWidth")
                page.leave()
                assert width <= 390, f"the inbox is {width}px wide at a phone's 390"
                return inbox, runs, refused, options

            inbox, runs, refused, options = await asyncio.to_thread(ann)
        for run_id in (my_run, their_run):
            await toren_client.deny(client, run_id, CALL, by="test")

    assert their_run not in inbox and theirs.name not in inbox
    assert their_run not in runs
    assert options == [mine.name]
    assert f"this token may not touch runs of agent {theirs.name!r}" in refused
