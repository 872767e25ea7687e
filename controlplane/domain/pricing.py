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


def worst_case_micros(input_tokens: int, max_output_tokens: int, price: Price) -> int:
    """What a call may cost at most, so its reservation bounds whatever its usage report claims:
    every input token at the dearest input rate (a cache write, as a rule: 1.25x input) and every
    output token used. A usage report splits the prompt into input, cache writes and cache reads,
    never more tokens than the prompt has, so no split costs more than this; a report that claims
    more than the prompt anyway is capped at the reservation when it settles (`settled_micros`)."""
    dearest_input = max(price.input, price.cache_write, price.cache_read)
    return _round(max(input_tokens, 0) * dearest_input + max(max_output_tokens, 0) * price.output)


@dataclasses.dataclass(frozen=True)
class Settled:
    """What a settle applies: the reported cost, capped at the reservation."""

    applied: int
    """Counted on the call and its meters: min(reported, reserved)."""
    excess: int
    """What the report claimed above its reservation (0 as a rule); never applied, only reported."""


def settled_micros(reported: int, reserved: int) -> Settled:
    """A settle never applies more than was reserved: a meter's reservations stay within its limit,
    so its settles do too, whatever a usage report says."""
    applied = min(max(reported, 0), max(reserved, 0))
    return Settled(applied, max(reported, 0) - applied)


def price_for(model: str, prices: Mapping[str, Price]) -> Price:
    return prices.get(model) or DEFAULT_PRICES.get(model) or FALLBACK_PRICE
