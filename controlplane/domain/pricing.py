"""Exact cost of a model call from its usage, in integer micro-dollars. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction

from drover.core.usage import Usage


@dataclasses.dataclass(frozen=True)
class Price:
    """List prices in USD per million tokens (a USD/MTok price is also micro-dollars per token)."""

    input: Fraction
    output: Fraction
    cache_write: Fraction
    cache_read: Fraction

    @classmethod
    def of(
        cls,
        input: float | str,
        output: float | str,
        cache_write: float | str | None = None,
        cache_read: float | str | None = None,
    ) -> Price:
        base = Fraction(str(input))
        return cls(
            base,
            Fraction(str(output)),
            Fraction(str(cache_write)) if cache_write is not None else base * Fraction(5, 4),
            Fraction(str(cache_read)) if cache_read is not None else base / 10,
        )


# Anthropic list prices per tier's default model (USD per million tokens); operators override them.
DEFAULT_PRICES: Mapping[str, Price] = {
    "claude-haiku-5-5": Price.of(1, 5),
    "claude-sonnet-5-5": Price.of(3, 15),
    "claude-opus-5-5": Price.of(5, 25),
}
FALLBACK_PRICE = Price.of(5, 25)  # an unknown model is priced as the most expensive tier


def _round(value: Fraction) -> int:
    """Half up, so a cost is never rounded down to free."""
    return int(value + Fraction(1, 2)) if value >= 0 else -int(-value + Fraction(1, 2))


def cost_micros(usage: Usage, price: Price) -> int:
    return _round(
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_input_tokens * price.cache_write
        + usage.cache_read_input_tokens * price.cache_read
    )


def estimate_micros(input_tokens: int, max_output_tokens: int, price: Price) -> int:
    """What a call may cost at most: its input uncached and every output token used."""
    return cost_micros(Usage(input_tokens=input_tokens, output_tokens=max_output_tokens), price)


def price_for(model: str, prices: Mapping[str, Price]) -> Price:
    return prices.get(model) or DEFAULT_PRICES.get(model) or FALLBACK_PRICE
