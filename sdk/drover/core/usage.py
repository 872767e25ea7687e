"""The tokens of one model call, as the Messages API reports them: what agentd meters, what the
control plane prices (controlplane.domain.pricing) and what a receipt records."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    """Uncached input."""
    output_tokens: int = 0
    """Thinking included."""
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
