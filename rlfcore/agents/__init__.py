"""Training an agent program the user already has: rlf serves it an OpenAI-compatible endpoint
during rollouts and records the exact tokens of every request (docs/agents.md)."""
