"""What a user declares, and the contract every side reads: runs anywhere, does no I/O on import.

`define_tool` and `Tool` (`_tool`), what a handler gets and returns (`_context`: `ToolContext`,
`ToolResult`, `Attachment`), agent.yaml's model (`_config`, its `mcp_servers` in `_mcp_config`,
problems in toren's words in `_problems`), JSON Schemas (`_schema`), and the types recorded in
history: run input and result, the tool spec, approvals (`_types`), with their JSON form
(`_converter`), the transcript digest (`_transcript`), payload cuts (`_payload_limits`), failed
attempts' records (`_attempts`) and the checked private SDK names toren relies on
(`_sdk_private`).

Workflow code imports the deterministic part of this package (`_types`, `_transcript`,
`_schema`, `_converter`, `_sdk_private`), so nothing here opens a file, a socket or a clock at
import. It imports only `toren.errors`; every other side imports it.
"""

__all__: list[str] = []
