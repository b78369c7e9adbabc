"""The commands and snippets of README.md and of every page under docs/ run as written, against a
real dev server.

Which blocks run: a fenced block right after the line `<!-- readme-test: run -->` (an HTML
comment, invisible on GitHub and on the docs site) is executed; one after
`<!-- readme-test: skip -->` is not and must be listed in `SKIPPED` with the reason. Every
```bash block carries one of the two marks, so a new command cannot slip in untested. A block
that appears word for word on two pages (the README's example is also in Get started) runs once.

- a ```python block runs as one coroutine (top-level `await` allowed) with `TEMPORAL_ADDRESS`
  set to the session's dev server and a worker serving `examples/support` (with
  `SUPPORT_DESK_TOKEN` set) in this process;
- a ```bash block runs line by line in a shell from the repository root, with `.venv/bin`
  first on the PATH and `TEMPORAL_ADDRESS` set; each line must exit 0.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from toren.client import wait_for_approval
from toren.testing import DevServer
from toren.worker import serve

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
"""Every Markdown file whose blocks are checked: the README, then the docs site's pages."""

SKIPPED = {
    "toren new agents/helpdesk": (
        "writes a folder into the repository; tests/test_new.py runs the same three commands in "
        "a temporary folder (new, check, and the generated test with its own dev server)"
    ),
    "pip install 'toren[bedrock]'": "installs into the current environment; the dev extras hold it",
    "pip install 'toren[gemini]'": "installs into the current environment; the dev extras hold it",
    "export OPENAI_BASE_URL=http://localhost:11434/v1": (
        "needs a local model server; tests/test_llamacpp_recording.py replays a llama.cpp "
        "server's recorded exchanges through the same provider"
    ),
    "temporal workflow query --workflow-id RUN_ID --type pending_approvals": (
        "needs a run's id; tests/test_approval_policies.py approves with the temporal CLI's "
        "signal and tests/test_questions.py answers with it, both on the dev server"
    ),
    "./demo.sh": "installs into .venv and starts a dev server on 7233; the demo's own test is "
    "tests/test_example.py (the agent) and tests/test_dev_script.py (the server)",
    "TOREN_STORE=/mnt/shared/toren": (
        "settings, not commands; tests/test_store.py checks both kinds of store and "
        "tests/test_many_hosts.py runs two hosts over each"
    ),
    "TOREN_PAYLOAD_CODEC=myteam.crypto:codec toren worker examples/support": (
        "needs a team's codec and codec server; tests/test_codec.py runs each setting through "
        "a real codec and codec server"
    ),
    "toren worker examples/support --deployment support --build-id v1": (
        "workers that run until stopped, on port 7233; tests/test_versioning.py runs two versions "
        "with the same temporal commands and checks what each run and thread ran on"
    ),
    "toren deploy check examples/support": (
        "the same command runs in the CLI section's block; tests/test_deploy_check.py shows "
        "both verdicts and every exit status"
    ),
    "toren deploy move-threads examples/support": (
        "needs a versioned deployment with a thread on its old version; tests/test_versioning.py "
        "runs the same command after a switch and checks the thread moved and v1 can stop"
    ),
    "toren fork support-a1001 --at-step 2": (
        "needs a finished run's id and, for --agent, a changed agent folder; tests/test_fork.py "
        "forks runs, across continue-as-new and of a thread's execution, and runs `toren fork "
        "--agent DIR --model mock/echo` through the command"
    ),
    "cp -r examples/support /tmp/support-v2": (
        "needs recorded runs and an edited copy of the folder; tests/test_eval.py runs `toren "
        "eval` through the command on recorded runs, and bench/perf/eval_support.py runs this example"
    ),
    "toren worker examples/research examples/research/specialists/web "
    "examples/research/specialists/data": (
        "workers that run until stopped, and a run id to approve; tests/test_example_research.py "
        "runs the example and approves the specialist's call through the research run"
    ),
    "toren workspace RUN_ID ./out": (
        "needs a finished run's id; tests/test_workspace_cli.py runs both commands on a real run"
    ),
    "TOREN_WEB_TOKENS='s3cret,ops-token:support' toren serve --host 0.0.0.0 --port 8000": (
        "a server that runs until stopped; tests/test_web.py drives the same endpoints through "
        "the app and through uvicorn"
    ),
}
"""First line of each block marked skip → why a test cannot run it."""

_BLOCK = re.compile(r"^<!-- readme-test: (run|skip) -->\n```(\w+)\n(.*?)^```", re.M | re.S)


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _all_blocks(mark: str, lang: str) -> dict[str, str]:
    """Each distinct block with this mark and language → the first page that has it."""
    found: dict[str, str] = {}
    for page in PAGES:
        for m, lg, code in _BLOCK.findall(page.read_text()):
            if m == mark and lg == lang:
                found.setdefault(code, _name(page))
    return found


def _blocks(mark: str, lang: str) -> list[str]:
    return list(_all_blocks(mark, lang))


def _ids(mark: str, lang: str) -> list[str]:
    return [f"{page}-{i}" for i, page in enumerate(_all_blocks(mark, lang).values())]


def test_every_shell_block_is_run_or_skipped_with_a_reason() -> None:
    for page in PAGES:
        bash = re.findall(r"^(<!-- readme-test: \w+ -->\n)?```bash\n", page.read_text(), re.M)
        assert all(bash), f"{_name(page)}: a ```bash block without <!-- readme-test: run|skip -->"
    skipped = {code.splitlines()[0].split("#")[0].strip() for code in _blocks("skip", "bash")}
    assert skipped == set(SKIPPED), "list each skipped block in SKIPPED with its reason"
    assert _blocks("run", "bash") and _blocks("run", "python")


def test_the_blocks_that_ran_from_the_readme_still_run() -> None:
    # Before the docs site, README.md held 5 runnable Python blocks and 3 shell blocks; they
    # moved to docs/ and must not be lost (or silently unmarked) on the way.
    assert len(_blocks("run", "python")) >= 5
    assert len(_blocks("run", "bash")) >= 3


@pytest.fixture
async def support_worker(client: Client, tmp_path: Path) -> AsyncIterator[None]:
    environ = {
        **os.environ,
        "SUPPORT_DESK_TOKEN": "readme-desk-token",
        "SUPPORT_OUTBOX": str(tmp_path / "outbox"),
    }
    async with serve(client, [ROOT / "examples" / "support"], environ=environ):
        yield


async def _run_python(code: str, page: str) -> str:
    compiled = compile(code, page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    out = io.StringIO()
    scope: dict[str, Any] = {}
    with contextlib.redirect_stdout(out):
        result = eval(compiled, scope)  # noqa: S307 - the docs' own snippet
        if asyncio.iscoroutine(result):
            await asyncio.wait_for(result, 120)
    return out.getvalue()


@pytest.mark.parametrize("index", range(len(_blocks("run", "python"))), ids=_ids("run", "python"))
async def test_python_snippet_runs(index: int, dev_server: DevServer, support_worker: None) -> None:
    code, page = list(_all_blocks("run", "python").items())[index]
    out = await _run_python(code, page)
    if "output_type=" in code:  # Typed outputs: tests/fixtures/refunds, fixed on its 2nd answer
        assert out.strip() == "refund 42.5 2", out
        return
    if "args={**call.args" in code:  # Approving with changes: the person's amount ran
        assert "'amount': 149.0" in out and "Done: refunded 80.00 on order A-1001" in out, out
        return
    # The scripted mock refunds A-1001 once the call is approved, whatever the prompt said.
    assert "Done: refunded 149.00 on order A-1001" in out, out
    if "start_thread" in code:
        assert "user Thanks. When will I see the money?" in out, out  # the follow-up ran
    else:
        assert "RunCompleted" in out, out


def _shell_lines(code: str) -> list[str]:
    lines: list[str] = []
    for raw in code.replace("\\\n", " ").splitlines():
        line = raw.split(" #")[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


@pytest.mark.parametrize("index", range(len(_blocks("run", "bash"))), ids=_ids("run", "bash"))
async def test_shell_block_runs(
    index: int, client: Client, dev_server: DevServer, support_worker: None
) -> None:
    # A fresh run id each time, so a rerun on the same server does not collide.
    suffix = uuid.uuid4().hex[:8]
    code, page = list(_all_blocks("run", "bash").items())[index]
    code = code.replace("readme-cli", f"readme-cli-{suffix}")
    code = code.replace("readme-thread", f"readme-thread-{suffix}")
    env = {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "TEMPORAL_ADDRESS": dev_server.address,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    started: list[str] = []
    for line in _shell_lines(code):
        proc = await asyncio.create_subprocess_shell(
            line,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        text = out.decode()
        assert proc.returncode == 0, f"{page}: line failed: {line}\n{text}"
        started += re.findall(r"^\s*WorkflowId\s+(\S+)", text, re.M)
        started += re.findall(rf"readme-(?:cli|thread)-{suffix}", line)
    assert started, "the block started no run"
    # Every run the block started reaches its approval: a worker served it, as written.
    for run_id in set(started):
        calls = await wait_for_approval(client, run_id, timeout=60)
        assert [c.call_id for c in calls] == ["call_refund"]
        await client.get_workflow_handle(run_id).terminate("docs test done")


def test_every_agent_yaml_block_in_the_docs_validates() -> None:
    """A block showing agent.yaml keys (`model:` or `modelSettings:`) is one toren loads: found
    in review, the reference's example set `thinkingBudgetTokens` on an `openai/` model."""
    import yaml

    from toren.agent._config import AgentConfig

    checked = 0
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        for found in re.finditer(r"```ya?ml[^\n]*\n(.*?)```", text, re.DOTALL):
            data = yaml.safe_load(found.group(1))
            if not isinstance(data, dict) or not {"model", "modelSettings"} & set(data):
                continue
            line = text[: found.start()].count("\n") + 1
            try:
                AgentConfig.model_validate({"name": "x", "model": "openai/gpt-4o", **data})
            except ValueError as err:
                raise AssertionError(f"{page.relative_to(ROOT)}:{line}: {err}") from None
            checked += 1
    assert checked >= 3, checked
