"""What `toren run` and `toren events --follow` print of a run's live items, line by line."""

from __future__ import annotations

import io

from toren.cli._live_print import LivePrinter
from toren.client._stream import StreamEvent


def shown(*items: dict[str, object]) -> str:
    out = io.StringIO()
    printer = LivePrinter(out)
    for offset, item in enumerate(items):
        printer.show(StreamEvent(offset=offset, type=str(item["type"]), data=dict(item)))
    return out.getvalue()


def test_questions_and_handoffs_say_what_happened_and_how_to_answer() -> None:
    text = shown(
        {"type": "text_delta", "text": "Let me ask."},
        {"type": "question_asked", "run_id": "r-1", "question_id": "q_c1_1",
         "question": "Which size?", "choices": ["S", "M"]},
        {"type": "question_answered", "question_id": "q_c1_1", "text": "M", "by": "alice"},
        {"type": "handed_off", "from": "triage", "to": "billing", "reason": "an invoice"},
    )  # fmt: skip
    assert text.splitlines() == [
        "  ▸ Let me ask.",
        "  ?  asks a person: Which size? [S / M] — answer with: toren answer r-1 q_c1_1 'TEXT'",
        "  ✓  alice answered: M",
        "  →  handed off from triage to billing: an invoice",
    ]
