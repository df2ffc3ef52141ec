"""A real LangGraph chat front end against `waypoint serve`: a page on the langgraph-sdk's React hook
`useStream` (tests/chat_ui: React and the SDK from npm, bundled by esbuild when the session starts),
served from an origin of its own (so CORS is what lets it in), in Debian's chromium through
Playwright, with a real uvicorn, a worker and the fake OpenAI server streaming token deltas.

Skips, saying why, when there is no node/npm or chromium. The npm install (~10 s on a warm npm
cache) and the bundle (<1 s) happen once per test process."""

from __future__ import annotations

import functools
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.agents import EFFECTS, delete_file
from tests.browser import CHROMIUM, STEP_MS
from tests.conftest import ApiServer
from waypoint.agents import Agent, AgentRegistry
from waypoint.config import Settings
from waypoint.testing.fake_openai import FakeOpenAI, Turn

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary: `apt-get install -y chromium` (.ci/run does it)"),
    pytest.mark.skipif(
        shutil.which("npm") is None,
        reason="no npm: the chat page is bundled from npm packages (`apt-get install -y nodejs npm`; .ci/run does it)",
    ),
]

PAGE = Path(__file__).parent / "chat_ui"

chat = Agent(
    name="chat",
    instructions="You chat, and delete files when asked (a human approves).",
    model="openai:fake-model",
    tools=(delete_file,),
    memory=False,
)

# Records the newest AI message's text each time the DOM changes, as a person watching would see it.
WATCH_AI_TEXT = """
window.__aiTexts = [];
new MutationObserver(() => {
  const ai = [...document.querySelectorAll('#messages [data-type=ai]')].pop();
  const text = ai ? ai.textContent : null;
  if (text !== null && window.__aiTexts[window.__aiTexts.length - 1] !== text) window.__aiTexts.push(text);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


@pytest.fixture(scope="session")
def chat_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page, built: package.json's exact versions installed, src/app.jsx bundled into dist/."""
    build = tmp_path_factory.mktemp("chat-ui")
    shutil.copytree(PAGE / "src", build / "src")
    for name in ("package.json", "index.html"):
        shutil.copy(PAGE / name, build / name)
    npm = shutil.which("npm") or "npm"
    for command in ([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], [npm, "run", "--silent", "build"]):
        done = subprocess.run(command, cwd=build, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return build


@pytest.fixture(scope="session")
def page_origin(chat_page: Path) -> Iterator[str]:
    """The page's own static server: another origin than the API's."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(chat_page)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def settings(settings: Settings, page_origin: str) -> Settings:
    return settings.model_copy(update={"api_cors_origins": page_origin})


@pytest.fixture
def agents() -> AgentRegistry:
    return AgentRegistry([chat])


async def open_chat(browser, contexts: list, api: ApiServer, origin: str):  # noqa: F811
    context = await browser.new_context()
    contexts.append(context)
    page = await context.new_page()
    page.set_default_timeout(STEP_MS)
    await page.add_init_script(WATCH_AI_TEXT)
    query = urlencode({"api": api.url, "key": api.key, "assistant": "chat"})
    await page.goto(f"{origin}/index.html?{query}")
    page.on("console", lambda m: print(f"page console: {m.text}"))
    await page.locator("#threads").wait_for(state="attached")  # the thread list loaded: key and CORS work
    return page


async def say(page, text: str) -> None:
    await page.fill("#message", text)
    await page.click("#send")


@pytest.mark.timeout(150)  # npm, a browser, a stack and a worker under CI load; a hang still fails
async def test_a_conversation_streams_token_by_token_and_lists_threads_and_history(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    worker,
    fake_openai: FakeOpenAI,
    page_origin: str,
):
    answer = "Durable agents keep going when workers crash, one step at a time."
    fake_openai.answer(Turn(content=answer, chunk_delay=0.05), Turn(content="Still here.", chunk_delay=0.02))
    page = await open_chat(browser, contexts, api, page_origin)
    await say(page, "tell me about durable agents")
    await page.locator("#messages [data-type=ai]", has_text=answer).wait_for()
    await page.locator("#status", has_text="idle").wait_for()

    seen = await page.evaluate("window.__aiTexts")
    growing = [t for t in seen if t != f"ai: {answer}"]
    assert len(growing) >= 3, seen  # the answer grew in the DOM, not appeared whole
    assert all(f"ai: {answer}".startswith(t) for t in growing), seen  # each a prefix of the answer
    messages = await page.locator("#messages .message").all_inner_texts()
    assert messages == ["human: tell me about durable agents", f"ai: {answer}"]

    thread_id = await page.locator("#status").get_attribute("data-thread-id")
    assert thread_id
    await page.locator(f"#threads li[data-thread-id='{thread_id}'][data-status=idle]").wait_for()
    history = page.locator("#history li")
    await history.first.wait_for()
    ids = [await li.get_attribute("data-checkpoint-id") for li in await history.all()]
    assert ids[0].endswith(":1") and ids[-1].endswith(":0"), ids  # newest first: the answer, then the task
    assert "2 messages" in await history.first.inner_text()

    # A second message continues the same thread; its history grows.
    await say(page, "still there?")
    await page.locator("#messages [data-type=ai]", has_text="Still here.").wait_for()
    await page.locator("#status", has_text="idle").wait_for()
    assert await page.locator("#messages .message").count() == 4
    assert await page.locator("#status").get_attribute("data-thread-id") == thread_id
    await page.locator("#history li", has_text="4 messages").first.wait_for()

    # A fresh page (a reload) finds the thread in the list and opens it from its state.
    page = await open_chat(browser, contexts, api, page_origin)
    await page.click(f"#threads li[data-thread-id='{thread_id}'] button")
    await page.locator("#messages [data-type=ai]", has_text="Still here.").wait_for()
    assert await page.locator("#messages .message").count() == 4


@pytest.mark.timeout(150)  # npm, a browser, a stack and a worker under CI load; a hang still fails
async def test_an_approval_shows_as_an_interrupt_and_is_answered_from_the_page(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    worker,
    fake_openai: FakeOpenAI,
    page_origin: str,
):
    fake_openai.answer(
        Turn(tool_calls=[("delete_file", {"path": "a.txt"})]),
        Turn(content="Deleted a.txt.", chunk_delay=0.01),
        Turn(tool_calls=[("delete_file", {"path": "b.txt"})]),
        Turn(content="I left b.txt alone.", chunk_delay=0.01),
    )
    EFFECTS.clear()  # another test in this process may have deleted a.txt before (the audit log's does)
    page = await open_chat(browser, contexts, api, page_origin)
    await say(page, "delete a.txt")
    await page.locator("#interrupt").wait_for()
    asked = await page.locator("#interrupt-value").inner_text()
    assert "delete_file" in asked and "a.txt" in asked, asked
    thread_id = await page.locator("#status").get_attribute("data-thread-id")
    await page.locator(f"#threads li[data-thread-id='{thread_id}'][data-status=interrupted]").wait_for()
    assert "deleted a.txt" not in EFFECTS  # nothing ran before the approval

    await page.click("#approve")
    await page.locator("#messages [data-type=ai]", has_text="Deleted a.txt.").wait_for()
    await page.locator("#status", has_text="idle").wait_for()
    assert await page.locator("#interrupt").count() == 0
    assert "deleted a.txt" in EFFECTS
    await page.locator(f"#threads li[data-thread-id='{thread_id}'][data-status=idle]").wait_for()

    # Denied with a reason, on the same thread: the tool does not run, the model hears why.
    await say(page, "now delete b.txt")
    await page.locator("#interrupt-value", has_text="b.txt").wait_for()
    await page.fill("#deny-reason", "b.txt is still needed")
    await page.click("#deny")
    await page.locator("#messages [data-type=ai]", has_text="I left b.txt alone.").wait_for()
    tool = page.locator("#messages [data-type=tool]", has_text="b.txt is still needed")
    assert await tool.count() == 1
    assert "deleted b.txt" not in EFFECTS
