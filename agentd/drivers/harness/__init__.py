"""The model harness: the Anthropic tool loop, its tools, and its durable transcript."""
