"""The price table (`controller.core.prices`): looking a placement's price up, and refusing a
table that cannot be trusted (no date, no source, two prices for one key)."""

from __future__ import annotations

import pytest

from controller.core.placement import Pool
from controller.core.prices import PriceTable, PriceTableInvalid

PRICING = "https://cloud.google.com/vertex-ai/pricing"
H100 = Pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8, 1)
CPU = Pool("n2-standard-8", "", 0, 2)


def entry(**fields) -> dict:
    base = {
        "region": "us-central1",
        "machineType": "a3-highgpu-8g",
        "acceleratorType": "NVIDIA_H100_80GB",
        "strategy": "SPOT",
        "pricePerNodeHour": 30.0,
        "date": "2026-11-20",
        "source": PRICING,
    }
    return {**base, **fields}


def table(*entries: dict) -> PriceTable:
    return PriceTable.from_json({"prices": list(entries)})


def test_a_placement_is_priced_by_its_region_machines_and_strategy_with_date_and_source():
    prices = table(entry(), entry(strategy="STANDARD", pricePerNodeHour=88.0), entry(region="europe-west4"))
    spot = prices.price("us-central1", (H100,), "SPOT")
    assert spot is not None and spot.price_per_node_hour == 30.0
    assert spot.source == f"price table (2026-11-20, {PRICING})"
    standard = prices.price("us-central1", (H100,), "STANDARD")
    assert standard is not None and standard.price_per_node_hour == 88.0
    assert prices.price("asia-east1", (H100,), "SPOT") is None  # no entry for the region
    assert prices.price("us-central1", (H100,), "FLEX_START") is None  # nor for the strategy


def test_pools_of_different_machines_are_priced_so_that_nodes_times_price_is_their_hourly_cost():
    other = "https://cloud.google.com/compute/all-pricing"
    prices = table(
        entry(), entry(machineType="n2-standard-8", acceleratorType="", pricePerNodeHour=0.5, source=other)
    )
    priced = prices.price("us-central1", (H100, CPU), "SPOT")
    assert priced is not None
    assert priced.price_per_node_hour * 3 == pytest.approx(30.0 + 2 * 0.5)  # 1 + 2 nodes
    assert PRICING in priced.source and other in priced.source


def test_missing_names_each_pool_the_table_cannot_price():
    prices = table(entry())
    assert prices.missing("us-central1", (H100, CPU), "SPOT") == [1]
    assert prices.price("us-central1", (H100, CPU), "SPOT") is None
    assert PriceTable().missing("us-central1", (H100,), "SPOT") == [0]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (entry(date="last week"), "prices[0].date"),
        (entry(source="the console"), "prices[0].source"),
        (entry(pricePerNodeHour=-1), "prices[0].pricePerNodeHour"),
        (entry(pricePerNodeHour="30"), "prices[0].pricePerNodeHour"),
        (entry(strategy="PREEMPTIBLE"), "prices[0].strategy"),
        (entry(zone="us-central1-a"), "unknown field"),
        ({k: v for k, v in entry().items() if k != "source"}, "prices[0].source is required"),
    ],
)
def test_an_entry_without_a_trustworthy_price_date_or_source_is_refused_by_name(bad, says):
    with pytest.raises(PriceTableInvalid, match=says.replace("[", r"\[").replace("]", r"\]")):
        table(bad)


def test_two_prices_for_one_key_are_refused():
    with pytest.raises(PriceTableInvalid, match=r"prices\[1\] repeats prices\[0\]"):
        table(entry(), entry(pricePerNodeHour=31.0))
    with pytest.raises(PriceTableInvalid, match="prices"):
        PriceTable.from_json([entry()])
