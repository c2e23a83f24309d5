"""A placement's price from the controller's price table, and FLEX_START's documented
requirements, checked at validate time with field errors."""

from __future__ import annotations

import json

import pytest

from controller.core.placement import JobCosts, Objective, Transfer, choose
from controller.core.placement_choice import PlacementInputs, with_price_sources
from controller.core.prices import PriceTable
from controller.request import RequestInvalid, parse_request
from controller.settings import InvalidSetting, Settings, environ_prices
from tests.controller.request.test_placements_field import placement, request

PRICING = "https://cloud.google.com/vertex-ai/pricing"


def priced_by_table(strategy: str = "SPOT", region: str = "us-central1", price: float = 31.5) -> dict:
    return {
        "region": region,
        "machineType": "a3-highgpu-8g",
        "acceleratorType": "NVIDIA_H100_80GB",
        "strategy": strategy,
        "pricePerNodeHour": price,
        "date": "2026-11-20",
        "source": PRICING,
    }


def unpriced(**extra) -> dict:
    document = placement(**extra)
    del document["pricePerNodeHour"]
    return document


def problems(document, prices: PriceTable | None = None) -> dict[str, str]:
    with pytest.raises(RequestInvalid) as caught:
        parse_request(document, prices=prices)
    return {p.field: p.reason for p in caught.value.problems}


def test_a_placement_without_a_price_takes_the_tables_and_says_where_it_came_from():
    table = PriceTable.from_json({"prices": [priced_by_table()]})
    parsed = parse_request(
        request(placements=[unpriced(), placement("own", region="europe-west4")]), prices=table
    )
    assert [p.price_per_node_hour for p in parsed.placements] == [31.5, 30.0]
    assert parsed.price_sources == {"central-spot": f"price table (2026-11-20, {PRICING})"}
    # The canonical form keeps the request's own words: the table's price is not written into it,
    # so the fingerprint of a re-publication does not change when the table does.
    written = parsed.to_json()["placements"]
    assert "pricePerNodeHour" not in written[0] and written[1]["pricePerNodeHour"] == 30.0
    dearer = PriceTable.from_json({"prices": [priced_by_table(price=40.0)]})
    again = parse_request(parsed.to_json(), prices=dearer)
    assert again.fingerprint() == parsed.fingerprint() and again.placements[0].price_per_node_hour == 40.0


def test_a_placement_with_neither_a_price_nor_a_table_entry_is_a_field_error():
    table = PriceTable.from_json({"prices": [priced_by_table(strategy="STANDARD")]})
    found = problems(request(placements=[unpriced()]), table)
    assert set(found) == {"placements[0].pricePerNodeHour"}
    assert "RELAUNCH_PRICE_TABLE" in found["placements[0].pricePerNodeHour"]
    assert "SPOT price in us-central1" in found["placements[0].pricePerNodeHour"]
    assert "workerPools[0]" in found["placements[0].pricePerNodeHour"]
    assert set(problems(request(placements=[unpriced()]))) == {"placements[0].pricePerNodeHour"}


def test_the_choices_reason_names_where_each_price_came_from():
    table = PriceTable.from_json({"prices": [priced_by_table()]})
    parsed = parse_request(
        request(placements=[unpriced(), placement("own", region="europe-west4")]), prices=table
    )
    inputs = PlacementInputs(
        placements=parsed.placements,
        objective=Objective.LOWEST_COST,
        deadline_at=None,
        rates={},
        costs=JobCosts(30.0, 120.0, 300.0, 1e6),
        transfer=Transfer(None),
        price_sources=dict(parsed.price_sources),
    )
    plain = choose(inputs.placements, {}, inputs.costs, inputs.transfer, inputs.objective)
    reason = with_price_sources(plain, inputs).reason
    assert reason.startswith(plain.reason)
    assert f"from price table (2026-11-20, {PRICING}): central-spot $31.5" in reason
    assert "from the request: own $30" in reason


def test_the_price_table_is_read_from_inline_json_or_a_file_and_a_bad_one_names_the_variable(
    tmp_path, monkeypatch
):
    inline = json.dumps({"prices": [priced_by_table()]})
    assert Settings(price_table=inline).prices.entries[0].price_per_node_hour == 31.5
    path = tmp_path / "prices.json"
    path.write_text(inline)
    assert Settings(price_table=str(path)).prices == Settings(price_table=inline).prices
    assert Settings().prices == PriceTable()
    monkeypatch.setenv(
        "RELAUNCH_PRICE_TABLE", json.dumps({"prices": [{**priced_by_table(), "date": "soon"}]})
    )
    with pytest.raises(InvalidSetting, match=r"RELAUNCH_PRICE_TABLE=.*prices\[0\]\.date"):
        environ_prices()
    monkeypatch.setenv("RELAUNCH_PRICE_TABLE", str(tmp_path / "absent.json"))
    with pytest.raises(InvalidSetting, match="cannot read the price table file"):
        environ_prices()


def test_flex_start_needs_the_gpus_vertex_documents_for_the_dynamic_workload_scheduler():
    def cpu_request() -> dict:
        document = request()
        for pool in document["jobSpec"]["workerPoolSpecs"]:
            pool["machineSpec"] = {"machineType": "n2-standard-8"}
        return document

    flex = placement("flex", strategy="FLEX_START", accelerators=0, maxWait="1h")
    for pool in flex["workerPools"]:
        pool.update(machineType="n2-standard-8", acceleratorType="")
    found = problems({**cpu_request(), "placements": [flex]})
    assert set(found) == {
        "placements[0].workerPools[0].acceleratorType",
        "placements[0].workerPools[1].acceleratorType",
    }
    assert "NVIDIA_L4" in found["placements[0].workerPools[0].acceleratorType"]
    t4 = placement("flex", strategy="FLEX_START")
    for pool in t4["workerPools"]:
        pool.update(machineType="n1-standard-8", acceleratorType="NVIDIA_TESLA_T4")
    assert "placements[0].workerPools[1].acceleratorType" in problems(request(placements=[t4]))
    # SPOT has no such rule: the same CPU machines are a valid Spot placement.
    spot = {**flex, "strategy": "SPOT", "name": "spot"}
    del spot["maxWait"]
    assert parse_request({**cpu_request(), "placements": [spot]}).placements[0].strategy == "SPOT"


def test_flex_start_needs_one_machine_configuration_in_every_pool_and_a_timeout_of_7_days_at_most():
    mixed = placement("flex", strategy="FLEX_START")
    mixed["workerPools"][1]["machineType"] = "a3-megagpu-8g"
    assert set(problems(request(placements=[mixed]))) == {"placements[0].workerPools[1]"}
    long = request(placements=[placement("flex", strategy="FLEX_START")])
    long["jobSpec"]["scheduling"] = {"timeout": f"{8 * 86400}s"}
    found = problems(long)
    assert set(found) == {"placements[0].strategy"} and "7 days" in found["placements[0].strategy"]
    long["jobSpec"]["scheduling"] = {"timeout": f"{7 * 86400}s"}
    assert parse_request(long).placements[0].strategy == "FLEX_START"
