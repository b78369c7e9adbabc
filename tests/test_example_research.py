"""examples/research: a research agent asks two specialist agents in one turn; the data
specialist's gated query is approved through the research run, and the answer has both replies."""

from __future__ import annotations

from temporalio.client import Client

from tests.conftest import ROOT, fetch_history, result_of, task_failures
from toren import client as toren_client
from toren.worker import serve

EXAMPLE = ROOT / "examples" / "research"


async def test_research_asks_both_specialists_and_an_approval_reaches_it(client: Client) -> None:
    folders = [EXAMPLE, EXAMPLE / "specialists" / "web", EXAMPLE / "specialists" / "data"]
    async with serve(client, folders):
        handle = await toren_client.start_run(client, "research", "How are we doing in the EU?")
        waiting = await toren_client.wait_for_approval(client, handle.id, timeout=60)
        data_run = f"{handle.id}/ask_data/ask_data_1"
        assert [(c.tool, c.run_id, c.path) for c in waiting] == [
            ("query_sales", data_run, ["research", "research_data", "query_sales"])
        ]
        assert waiting[0].args == {"region": "EU", "year": 2024}
        # Decided through the research run: the client finds the call in its child.
        decision = await toren_client.decide(client, handle.id, waiting[0].call_id, True, by="qa")
        assert decision.approved
        result = await result_of(handle)
    assert result.text == (
        "Here is what the specialists found:\n"
        "Web: about 5.1 million e-bikes were sold in the EU in 2024 (industry association report).\n"
        "Data: we sold 41250 e-bikes in EU in 2024."
    )
    assert not task_failures(await fetch_history(client, handle.id))
