"""The intake checks and prices placements with the controller's price table
(RELAUNCH_PRICE_TABLE): a placement the table prices is accepted without a price of its own; one
priced neither way is dead-lettered with the field and the reason. The real intake on a real
SQLite store; no Pub/Sub or Vertex call is made (the intake only records)."""

from __future__ import annotations

import json

from controller.service.alerts import AlertSink
from controller.service.intake import Intake
from controller.settings import Settings
from controller.store.keys import job_key
from controller.store.sqlite import SqliteStateStore

TABLE = {
    "prices": [
        {
            "region": "us-central1",
            "machineType": "a2-highgpu-1g",
            "acceleratorType": "NVIDIA_TESLA_A100",
            "strategy": "SPOT",
            "pricePerNodeHour": 1.25,
            "date": "2026-11-20",
            "source": "https://cloud.google.com/vertex-ai/pricing",
        }
    ]
}


def request(job_id: str, region: str) -> bytes:
    machine = {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}
    pool = {
        "machineSpec": machine,
        "replicaCount": 1,
        "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/t:1"},
    }
    placement = {
        "name": "spot",
        "region": region,
        "strategy": "SPOT",
        "workerPools": [{**machine, "replicaCount": 1}],
    }
    document = {
        "jobId": job_id,
        "jobSpec": {"workerPoolSpecs": [pool]},
        "checkpoint": {"uri": f"gs://ckpt/{job_id}"},
        "placements": [placement],
    }
    return json.dumps(document).encode()


def test_the_intake_prices_placements_from_the_table_and_dead_letters_one_it_cannot_price(tmp_path):
    settings = Settings(vertex_endpoint="127.0.0.1:9", price_table=json.dumps(TABLE))
    store = SqliteStateStore(tmp_path / "state.db")
    dead_letters: list[tuple[bytes, str]] = []
    intake = Intake(
        store,
        settings,
        AlertSink(None, None, cooldown_seconds=0),
        dead_letter=lambda data, reason: dead_letters.append((data, reason)),
    )
    assert intake.accept(request("priced", "us-central1")).status == "accepted"
    stored = store.get(job_key("priced"))
    assert stored is not None and "pricePerNodeHour" not in json.dumps(stored.document["request"])

    result = intake.accept(request("unpriced", "asia-east1"))
    assert result.status == "invalid"
    assert result.reason.startswith("placements[0].pricePerNodeHour: is required")
    assert "SPOT price in asia-east1" in result.reason
    assert [reason for _, reason in dead_letters] == [result.reason]
    assert store.get(job_key("unpriced")) is None
