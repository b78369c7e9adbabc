"""The performance benchmark: toren's `AgentRun` against a bare-Temporal floor (see `run`)."""
