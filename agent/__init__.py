"""The coding agent: OpenAI-compatible client, tools, approvals, loop, sessions, context, Slipstream."""
