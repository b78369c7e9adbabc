"""Scenario 4: model call failures from a fake OpenAI-compatible server.

The agent uses `model: openai/test-model`; its worker has OPENAI_BASE_URL pointing at
`fake_openai.FakeOpenAI` and OPENAI_API_KEY=dummy. Cases:

- `flaky` runs: the first model call gets 429 (Retry-After: 2), 500, a 3 s hang then 500, then
  a tool call; the second gets 500, then the answer. Temporal must retry each failure (honouring
  Retry-After) until the run completes: 4 and 2 attempts.
- `bad`: a 400 fails the run at once with `ModelCallFailed`, after exactly 1 attempt.
- run in the background while the other scenarios run:
  `timeout`: a hang past the client timeout (`TOREN_MODEL_TIMEOUT_S=5` on that worker): one
  retryable failure, then the answer;
  `death`: the worker SIGKILLed while a model call hangs; Temporal must retry it within the
  model activity's heartbeat timeout (10 s), not its 5-minute start-to-close.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

from bench.faults.agents import WORK_TOOL, write_agent
from bench.faults.common import Harness, await_outcome
from bench.faults.fake_openai import FakeOpenAI
from bench.faults.history import fetch_run_history
from bench.faults.report import Figure, info, must_equal, must_zero
from toren import client as toren_client

__all__ = ["run", "run_slow", "skipped_slow"]

NAME = "4 model failures"
TOOL_CALL = {"tool": "work", "args": {"which": "c1"}, "id": "c1"}
PLANS: dict[str, list[list[dict[str, Any]]]] = {
    "flaky": [
        [
            {"status": 429, "retry_after": "2"},
            {"status": 500},
            {"hang": 3.0, "then": {"status": 500}},
            TOOL_CALL,
        ],
        [{"status": 500}, {"text": "model done"}],
    ],
    "bad": [[{"status": 400}]],
    # Longer than the worker's 5 s client timeout (TOREN_MODEL_TIMEOUT_S); the answer goes nowhere.
    "timeout": [[{"hang": 30.0, "then": {"text": "late"}}, {"text": "model done"}]],
    # Held until the harness has killed the worker; the retry answers at once.
    "death": [[{"hang": 30.0, "then": {"status": 500}}, {"text": "model done"}]],
}
FLAKY_ATTEMPTS = [4, 2]
DEATH_WAIT = 120.0
"""Seconds the `death` case waits for the retried model call."""
HEARTBEAT_BOUND = 20.0
"""A dead worker's call should be retried within heartbeat timeout (10 s) plus slack."""


def _agent(base: Path, name: str) -> Path:
    # OPENAI_BASE_URL is declared so toren passes it to the provider: without the declaration
    # the worker's OPENAI_BASE_URL is ignored (the `base_url probe` row measures that).
    return write_agent(
        base,
        name,
        tools={"work": WORK_TOOL},
        model="openai/test-model",
        env_optional={"OPENAI_BASE_URL": ""},
    )


def _env(fake: FakeOpenAI, record: Path) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": "dummy",
        "FAULTS_RECORD": str(record),
    }


def base_url_probe(base: Path) -> Figure:
    """Does a worker's OPENAI_BASE_URL reach the provider when agent.yaml does not declare it?

    Loaded in-process with toren's own `AgentRuntime.load`: nothing is sent anywhere.
    """
    from toren.worker.activities._runtime import AgentRuntime

    folder = write_agent(base, "f4_probe", tools={}, model="openai/test-model")
    environ = {**os.environ, "OPENAI_API_KEY": "dummy", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
               "FAULTS_RECORD": "/dev/null"}  # fmt: skip
    provider = AgentRuntime.load([folder], environ).agents["f4_probe"].provider
    used = str(getattr(provider, "base_url", "?"))
    honoured = used == "http://127.0.0.1:9/v1"
    return Figure(
        NAME,
        "worker's OPENAI_BASE_URL used when agent.yaml does not declare it",
        f"{int(honoured)} (provider got {used})",
        "1",
        honoured,
        "must",
    )


async def run(h: Harness, flaky_runs: int) -> list[Figure]:
    """The fast cases: `flaky_runs` flaky runs and one `bad` run."""
    began = time.monotonic()
    base = h.workdir / "s4"
    record = base / "records.jsonl"
    fake = FakeOpenAI(PLANS).start()
    try:
        probe = base_url_probe(base)
        folder = _agent(base, "f4_model")
        worker = h.worker(folder, **_env(fake, record)).start()
        await worker.ready()
        flaky = [f"f4-flaky-{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(flaky_runs)]
        bad = f"f4-bad-{uuid.uuid4().hex[:6]}"
        handles = [
            await toren_client.start_run(
                h.client, folder.name, f"run={wid} plan={'bad' if wid == bad else 'flaky'}",
                run_id=wid, arguments={"c1": 0.1},
            )
            for wid in [*flaky, bad]
        ]  # fmt: skip
        outcomes = await asyncio.gather(*(await_outcome(hd, timeout=120.0) for hd in handles))
        worker.stop()
        histories = {hd.id: await fetch_run_history(h.client, hd.id) for hd in handles}
    finally:
        fake.stop()
    by_run = dict(zip([hd.id for hd in handles], outcomes, strict=True))
    attempts = {wid: [sum(r.step == s for r in fake.of(wid)) for s in (0, 1)] for wid in flaky}
    # Temporal's own count: the attempt that closed each toren.call_model activity.
    recorded = {wid: [a.attempt for a in histories[wid].model_calls()] for wid in flaky}
    gaps = []
    for wid in flaky:
        first = [r for r in fake.of(wid) if r.step == 0]
        if len(first) >= 2:
            gaps.append(first[1].t - first[0].answered_at)
    bad_requests = fake.of(bad)
    bad_outcome = by_run[bad]
    per_call = [f"{a[0]}+{a[1]}" for a in attempts.values()]
    completed = sum(by_run[w].status == "completed" for w in flaky)
    return [
        probe,
        must_equal(NAME, "flaky runs completed", completed, len(flaky)),
        info(NAME, "model attempts per run (call 1 + call 2)", ", ".join(per_call)),
        must_equal(NAME, "flaky runs with 4 + 2 attempts (429, 500, hang+500, ok; 500, ok)",
                   sum(a == FLAKY_ATTEMPTS for a in attempts.values()), len(flaky)),
        must_zero(NAME, "model calls whose history attempt differs from the server's count",
                  sum(recorded[w] != attempts[w] for w in flaky)),
        Figure(NAME, "seconds from the 429 to the retry (Retry-After: 2), min",
               f"{min(gaps):.2f}" if gaps else "none", ">= 2", bool(gaps) and min(gaps) >= 1.95,
               "must"),
        must_equal(NAME, "400: attempts", len(bad_requests), 1),
        Figure(NAME, "400: run failed with", bad_outcome.failure_type or bad_outcome.status,
               "ModelCallFailed", bad_outcome.failure_type == "ModelCallFailed", "must"),
        info(NAME, "400: seconds to the failure", f"{bad_outcome.seconds:.1f}"),
        info(NAME, "duration, s", f"{time.monotonic() - began:.0f}"),
    ]  # fmt: skip


async def run_slow(h: Harness) -> list[Figure]:
    """The slow cases, each with its own agent and worker: `timeout` and `death`."""
    base = h.workdir / "s4slow"
    record = base / "records.jsonl"
    fake = FakeOpenAI(PLANS).start()
    try:
        return list(await asyncio.gather(_timeout_case(h, fake, base, record),
                                         _death_case(h, fake, base, record)))  # fmt: skip
    finally:
        fake.stop()


async def _timeout_case(h: Harness, fake: FakeOpenAI, base: Path, record: Path) -> Figure:
    folder = _agent(base, "f4_timeout")
    worker = h.worker(folder, **_env(fake, record), TOREN_MODEL_TIMEOUT_S="5").start()
    await worker.ready()
    wid = f"f4-timeout-{uuid.uuid4().hex[:6]}"
    handle = await toren_client.start_run(h.client, folder.name, f"run={wid} plan=timeout",
                                          run_id=wid)  # fmt: skip
    outcome = await await_outcome(handle, timeout=120.0)
    worker.stop()
    reqs = fake.of(wid)
    waited = reqs[1].t - reqs[0].t if len(reqs) > 1 else 0.0
    ok = outcome.status == "completed" and len(reqs) == 2
    return Figure(
        NAME,
        "hang past the client timeout: attempts / s to the retry / run",
        f"{len(reqs)} / {waited:.0f} / {outcome.status}",
        "2 / ~5 / completed",
        ok,
        "must",
    )


async def _death_case(h: Harness, fake: FakeOpenAI, base: Path, record: Path) -> Figure:
    folder = _agent(base, "f4_death")
    worker = h.worker(folder, **_env(fake, record)).start()
    await worker.ready()
    wid = f"f4-death-{uuid.uuid4().hex[:6]}"
    handle = await toren_client.start_run(h.client, folder.name, f"run={wid} plan=death",
                                          run_id=wid)  # fmt: skip
    deadline = time.monotonic() + 60
    while not fake.of(wid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    _, killed_at = worker.kill()
    worker.start()
    await worker.ready()
    outcome = await await_outcome(handle, timeout=DEATH_WAIT)
    worker.stop()
    reqs = fake.of(wid)
    retry = reqs[1].t - killed_at if len(reqs) > 1 else None
    shown = f"{retry:.0f}" if retry is not None else f"none in {DEATH_WAIT:.0f}"
    return Figure(
        NAME,
        "worker killed mid model call: s to the retry / run",
        f"{shown} / {outcome.status}",
        f"<= {HEARTBEAT_BOUND:.0f}",
        retry is not None and retry <= HEARTBEAT_BOUND,
        "must",
    )


def skipped_slow() -> list[Figure]:
    """The rows of the slow cases when --short leaves them out."""
    return [
        Figure(NAME, "hang past the client timeout (120 s, not configurable)",
               "skipped in --short", kind="skip"),
        Figure(NAME, "worker killed mid model call (retry after 5 min)", "skipped in --short",
               kind="skip"),
    ]  # fmt: skip
