"""Hostile messages mixed with valid ones, published with the real Pub/Sub client to a real
controller on devstack (issue 28): each hostile one is dead-lettered with a reason, each valid one
accepted, the subscription ends empty, the intake never pauses, /healthz answers throughout.

Among the hostile ones: numbers beyond Python's int-conversion limit and lone surrogates (both
crashed the parser and paused intake), messages of 4.3, 6 and 9.5 MB (over gRPC's 4 MiB default:
the controller's subscriber could not receive them from an emulator, and the requests behind them
waited), and one over Pub/Sub's 10 MB limit, which Pub/Sub refuses at publish.
The benchmark bench/hostile_flood.py runs the same flood at 2,000 and prints the latencies.
"""

from __future__ import annotations

import pytest

from tests.support.flood import FloodConfig, HostileFlood

pytestmark = pytest.mark.slow


def test_hostile_messages_are_dead_lettered_with_reasons_and_valid_ones_accepted(devstack, tmp_path):
    report = HostileFlood(devstack, tmp_path, FloodConfig(hostile=200, valid=5)).run()
    assert report.problems == []
    assert (report.dead_lettered_with_reason, report.accepted) == (200, 5)
    assert len(report.large_latencies) == 3  # each large message reached the controller
