"""The ways a run's supervisor works a Task beyond a plain command: the built-in harness and the
external agent runtimes (Claude Code, opencode)."""
