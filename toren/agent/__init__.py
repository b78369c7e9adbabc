"""What a user declares, and the contract every side reads: runs anywhere, does no I/O on import.

`define_tool` (`_define`) and the `Tool` it declares (`_tool`); what a handler gets and returns
(`_context`: `ToolContext`, `ToolResult`, `Attachment`; `_code_run` for `ctx.run_code`);
agent.yaml's model (`_config`, its smaller blocks in `_config_blocks`, `mcp_servers` in
`_mcp_config`, `context` in `_context_config`, problems in toren's words in `_problems`); JSON
Schemas (`_schema`); and the types recorded in history: the agent's spec with the one tool
contract, `ToolSpec` (`_spec`), run input and result, approvals, threads (`_types`), their JSON
form (`_converter`), the transcript digest (`_transcript`) and the model's compacted view of it
(`_context_plan`), payload cuts (`_payload_limits`), failed attempts' records (`_attempts`) and
the checked private SDK names toren relies on (`_sdk_private`).

Workflow code imports the deterministic part of this package (`_types`, `_spec`,
`_transcript`, `_context_plan`, `_schema`, `_converter`, `_sdk_private`), so nothing here opens
a file, a socket or a clock at import. It imports only `toren.errors`; every other side imports
it.
"""

__all__: list[str] = []
