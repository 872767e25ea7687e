"""agentd's reconnect backoff: capped (so after a control-plane restart every agent is back within the
cap, well inside the lost window), and each dial starts from a fresh gRPC connection backoff."""

from __future__ import annotations

import pytest
import tenacity

from agentd.daemon import config
from agentd.daemon.connection import ChannelSettings, channel_options, reconnect_wait


@pytest.mark.parametrize("cap", [2.0, 30.0])
def test_the_wait_between_attempts_never_passes_the_cap(cap: float) -> None:
    wait = reconnect_wait(cap)
    waits = []
    for attempt in range(1, 40):
        state = tenacity.RetryCallState(None, None, (), {})
        state.attempt_number = attempt
        waits.append(wait(state))
    assert waits[0] <= 1.0
    assert max(waits) <= cap
    assert waits[-1] >= cap * 0.75, "it does grow to about the cap"


def test_the_cap_is_a_setting_with_a_sane_range() -> None:
    assert config.load(None, {}, {}).reconnect_max_seconds == 30.0
    assert config.load(None, {"DROVER_AGENTD_RECONNECT_MAX_SECONDS": "5"}, {}).reconnect_max_seconds == 5.0
    for bad in ("0", "-1", "900"):
        with pytest.raises(ValueError, match="reconnect_max_seconds"):
            config.load(None, {"DROVER_AGENTD_RECONNECT_MAX_SECONDS": bad}, {})


def test_each_dial_has_its_own_subchannel() -> None:
    """The process-wide subchannel pool carried the last channel's backoff (up to 120 s) into the next
    attempt: a restarted control plane was refused for minutes after it listened again."""
    options = dict(channel_options(ChannelSettings("127.0.0.1:1")))
    assert options["grpc.use_local_subchannel_pool"] == 1
    assert options["grpc.max_reconnect_backoff_ms"] <= 30_000
