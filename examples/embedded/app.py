"""toren inside an existing Temporal app: one ordinary `Worker` runs the app and the agent.

`TorenPlugin` adds toren's workflows (`AgentRun`, `AgentThread`), its activities and the
reviewer agent's tools to the app's own `Worker`, beside the app's `RefundRequest` workflow and
`issue_refund` activity (`workflows.py`). Then it runs one `RefundRequest` and prints it.

    python examples/embedded/app.py A-1001            # the scripted mock model
    python examples/embedded/app.py A-1001 --model openai/gpt-4o-mini

It reads Temporal's own settings (`TEMPORAL_ADDRESS`, default localhost:7233, profiles, TLS).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.envconfig import ClientConfig
from temporalio.worker import Worker

from toren import AgentRuntime, TorenPlugin

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # `workflows` beside this file, however the script is started

from workflows import TASK_QUEUE, RefundRequest, issue_refund  # noqa: E402

AGENT = HERE / "reviewer"


async def main(order_id: str, model: str | None = None, client: Client | None = None) -> None:
    """Run one `RefundRequest` on a Worker that serves the app and the agent, and print it.

    `client` lets a caller (a test) pass its own; by default one is made from Temporal's env.
    """
    if client is None:
        config = ClientConfig.load_client_connect_config()
        config.setdefault("target_host", "localhost:7233")  # no TEMPORAL_ADDRESS, no profile
        client = await Client.connect(**config)
    runtime = AgentRuntime.load([AGENT], environ=os.environ, model_override=model)
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[RefundRequest],
        activities=[issue_refund],
        plugins=[TorenPlugin(runtime)],
    ):
        workflow_id = f"refund-{order_id}-{uuid.uuid4().hex[:6]}"
        result = await client.execute_workflow(
            RefundRequest.run, order_id, id=workflow_id, task_queue=TASK_QUEUE
        )
    print(f"workflow {workflow_id}")
    print(f"agent run {workflow_id}/reviewer")
    print(f"{result['order_id']}: {result['outcome']} ({result['reason']})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run one RefundRequest with the reviewer agent.")
    parser.add_argument("order_id", nargs="?", default="A-1001")
    parser.add_argument("--model", help="serve the agent with this model instead of agent.yaml's")
    args = parser.parse_args()
    asyncio.run(main(args.order_id, args.model))
