"""The price table: what a node hour costs, by region, machines and scheduling strategy.

A placement may name its own `pricePerNodeHour`; one that does not takes the price from the table
in the controller's configuration (`RELAUNCH_PRICE_TABLE`, docs/requests.md *Placements*). Prices
change and differ by region, so every entry carries the date it was read and the page it was read
from, and the choice's reason names them: a figure compared on the timeline can be checked.

An entry is keyed by region x machine type x accelerator type x strategy (the capacity class of
`controller.core.checkpoint_interval`), and prices one replica (node) of that shape for an hour. A
placement whose pools differ in machines is priced pool by pool; its price per node hour is the
replica-weighted mean, so that nodes x price is exactly what its machines cost an hour (the form
`controller.core.placement` computes with). Pure: parsing is from already-loaded JSON values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date
from typing import Any

from controller.core.placement import STRATEGIES, Pool

PRICE_KEYS = ("region", "machineType", "acceleratorType", "strategy", "pricePerNodeHour", "date", "source")
_URL = re.compile(r"^https?://\S+$")


class PriceTableInvalid(ValueError):
    """The table cannot be read; the message names the entry and field."""


@dataclass(frozen=True)
class PriceEntry:
    region: str
    machine_type: str
    accelerator_type: str  # "" for a machine without accelerators
    strategy: str  # SPOT, FLEX_START or STANDARD
    price_per_node_hour: float  # dollars per replica-hour
    date: str  # YYYY-MM-DD, when the price was read
    source: str  # the URL it was read from

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.region, self.machine_type, self.accelerator_type, self.strategy)


@dataclass(frozen=True)
class Priced:
    """A placement's price from the table, and where it came from (for the reason)."""

    price_per_node_hour: float
    source: str  # e.g. "price table (2026-11-20, https://cloud.google.com/vertex-ai/pricing)"


@dataclass(frozen=True)
class PriceTable:
    entries: tuple[PriceEntry, ...] = ()

    def entry(
        self, region: str, machine_type: str, accelerator_type: str, strategy: str
    ) -> PriceEntry | None:
        for candidate in self.entries:
            if candidate.key == (region, machine_type, accelerator_type, strategy):
                return candidate
        return None

    def missing(self, region: str, pools: tuple[Pool, ...], strategy: str) -> list[int]:
        """The indexes of the pools the table has no price for."""
        return [
            k
            for k, p in enumerate(pools)
            if self.entry(region, p.machine_type, p.accelerator_type, strategy) is None
        ]

    def price(self, region: str, pools: tuple[Pool, ...], strategy: str) -> Priced | None:
        """The price per node hour of these pools, or None where a pool has no entry."""
        found = [self.entry(region, p.machine_type, p.accelerator_type, strategy) for p in pools]
        known = [e for e in found if e is not None]
        if len(known) != len(pools) or not pools:
            return None
        nodes = sum(p.replica_count for p in pools)
        dollars = sum(p.replica_count * e.price_per_node_hour for p, e in zip(pools, known, strict=True))
        cited = sorted({(e.date, e.source) for e in known})
        return Priced(dollars / nodes, "price table (" + "; ".join(f"{d}, {s}" for d, s in cited) + ")")

    @classmethod
    def from_json(cls, document: Any) -> PriceTable:
        """`{"prices": [{region, machineType, acceleratorType, strategy, pricePerNodeHour, date,
        source}, ...]}`; raises PriceTableInvalid naming the entry and field."""
        if not isinstance(document, dict) or not isinstance(document.get("prices"), list):
            raise PriceTableInvalid('must be an object {"prices": [...]}')
        if set(document) - {"prices"}:
            raise PriceTableInvalid(f"unknown field(s) {sorted(set(document) - {'prices'})}; only prices")
        entries: list[PriceEntry] = []
        seen: dict[tuple[str, str, str, str], int] = {}
        for index, item in enumerate(document["prices"]):
            entry = _entry(index, item)
            if entry.key in seen:
                raise PriceTableInvalid(
                    f"prices[{index}] repeats prices[{seen[entry.key]}]'s key {entry.key}"
                )
            seen[entry.key] = index
            entries.append(entry)
        return cls(tuple(entries))


def _entry(index: int, item: Any) -> PriceEntry:
    where = f"prices[{index}]"
    if not isinstance(item, dict):
        raise PriceTableInvalid(f"{where} must be an object")
    unknown = sorted(set(item) - set(PRICE_KEYS))
    if unknown:
        raise PriceTableInvalid(f"{where} has unknown field(s) {unknown}")
    for name in ("region", "machineType", "strategy", "date", "source"):
        if not isinstance(item.get(name), str) or not item[name]:
            raise PriceTableInvalid(f"{where}.{name} is required (a non-empty string)")
    accelerator = item.get("acceleratorType", "")
    if not isinstance(accelerator, str):
        raise PriceTableInvalid(f"{where}.acceleratorType must be a string ('' for none)")
    if item["strategy"] not in STRATEGIES:
        raise PriceTableInvalid(f"{where}.strategy must be one of {STRATEGIES} (got {item['strategy']!r})")
    price = item.get("pricePerNodeHour")
    if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price) or price < 0:
        raise PriceTableInvalid(f"{where}.pricePerNodeHour must be a number of dollars, at least 0")
    try:
        date.fromisoformat(item["date"])
    except ValueError:
        raise PriceTableInvalid(
            f"{where}.date must be a date such as 2026-11-20 (got {item['date']!r})"
        ) from None
    if not _URL.match(item["source"]):
        raise PriceTableInvalid(
            f"{where}.source must be the URL the price was read from (got {item['source']!r})"
        )
    return PriceEntry(
        item["region"],
        item["machineType"],
        accelerator,
        item["strategy"],
        float(price),
        item["date"],
        item["source"],
    )
