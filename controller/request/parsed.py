"""Parsed requests (`JobRequest`, `CancelRequest`) and `parse_request`, the one entry point."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    ValidationError,
)

from controller.core.adaptive_interval import IntervalSetting
from controller.core.elastic import ElasticPolicy
from controller.core.placement import Objective, Placement
from controller.core.policy import RestartPolicy
from controller.core.prices import PriceTable
from controller.request.elastic import elastic_policy, split_min_replicas, with_min_replicas
from controller.request.fields import (
    CancelRequestModel,
    JobRequestModel,
    problems_from_pydantic,
)
from controller.request.jobspec import parse_job_spec, spec_to_rest
from controller.request.limits import (
    EXPLICIT_SCHEDULING_FIELDS,
    MAX_USER_ENV,
    RELAUNCH_ENV_NAMES,
    VERTEX_MAX_ENV,
)
from controller.request.loading import load_document
from controller.request.placements import parse_placements, placement_problems, placement_to_json
from controller.request.problems import Problem, RequestInvalid, kind_of
from trainer.layout import CHECKPOINT_INTERVAL_ENV


@dataclass(frozen=True)
class CancelRequest:
    """`{jobId, action: cancel}`: stop the job for good."""

    job_id: str

    def to_json(self) -> dict:
        return {"jobId": self.job_id, "action": "cancel"}


@dataclass(frozen=True)
class JobRequest:
    """A valid job request. `job_spec` is shared, never mutate it (render copies it first)."""

    job_id: str
    display_name: str | None
    job_spec: Any = field(repr=False)  # google.cloud.aiplatform_v1.CustomJobSpec
    # The jobSpec as written: a proto3 bool cannot tell `false` from unset, and whether the user
    # chose Vertex's retry behaviour (render.py) depends on that difference.
    job_spec_rest: dict = field(compare=False, repr=False)
    checkpoint_uri: str
    restart_policy: RestartPolicy
    labels: dict[str, str]
    # `checkpoint.interval`: None leaves the trainer's own flags in charge.
    checkpoint_interval: IntervalSetting | None = None
    # minReplicaCount on some pool: the job may run smaller than requested (controller.core.elastic).
    elastic: ElasticPolicy | None = None
    # `placements`: empty, every attempt runs as the jobSpec says (as before placements existed).
    placements: tuple[Placement, ...] = ()
    objective: Objective | None = None
    deadline: str | None = None
    # Placements priced by the controller's price table (name -> its date and source): the
    # price is not the request's, so the canonical form leaves it out.
    price_sources: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        """Canonical camelCase form; `parse_request` accepts it back and yields an equal request."""
        policy = self.restart_policy
        document = {"jobId": self.job_id}
        if self.display_name is not None:
            document["displayName"] = self.display_name
        document["jobSpec"] = with_min_replicas(spec_to_rest(self.job_spec), self.elastic)
        # Keep explicit retry choices (false included) in the canonical form, so a request
        # parsed back from storage renders the same CustomJob.
        written = self.job_spec_rest.get("scheduling") or {}
        chosen = {
            canonical: written[spelling]
            for canonical, spellings in EXPLICIT_SCHEDULING_FIELDS.items()
            for spelling in spellings
            if spelling in written
        }
        if chosen:
            document["jobSpec"]["scheduling"] = {**document["jobSpec"].get("scheduling", {}), **chosen}
        document["checkpoint"] = {"uri": self.checkpoint_uri}
        if self.checkpoint_interval is not None:
            document["checkpoint"]["interval"] = self.checkpoint_interval.to_json()
        document["restartPolicy"] = policy.to_request_json()
        if self.elastic is not None:
            document["elastic"] = self.elastic.to_request_json()
        if self.placements:
            document["placements"] = [
                placement_to_json(p, from_table=p.name in self.price_sources) for p in self.placements
            ]
            document["objective"] = (self.objective or Objective.LOWEST_COST).value
            if self.deadline is not None:
                document["deadline"] = self.deadline
        document["labels"] = dict(sorted(self.labels.items()))
        return document

    def fingerprint(self, canonical_form: dict | None = None) -> str:
        """sha256 of the canonical JSON: equal for the same request however it was spelled
        (key order, defaults written out or not), different when anything meaningful changes.
        `canonical_form`: this request's `to_json()`, when the caller has made it already."""
        document = self.to_json() if canonical_form is None else canonical_form
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def parse_request(
    raw: bytes | str | Mapping, *, allow_local_checkpoints: bool = False, prices: PriceTable | None = None
) -> JobRequest | CancelRequest:
    """Parse and validate a job or cancel request; raise `RequestInvalid` listing every problem.

    Text is JSON when it starts with `{` or `[`, YAML otherwise. `allow_local_checkpoints`
    admits `file:///abs/path` checkpoint URIs (local runs only; production must leave it off).

    Whatever `raw` holds, the outcome is a request or `RequestInvalid`: the loader maps every
    failure it knows of to a field and a reason, and anything else a decoder or validator raises
    (a bug, or exhausted memory) becomes a reason too, never an exception the caller must know.
    `prices` is the controller's price table: a placement without `pricePerNodeHour` takes its
    price from it, and one the table does not price either is a field error.
    """
    try:
        return _parse(raw, allow_local_checkpoints, prices or PriceTable())
    except RequestInvalid:
        raise
    except MemoryError:
        raise RequestInvalid([Problem("request", "is too large to read (out of memory)")]) from None
    except RecursionError:
        raise RequestInvalid([Problem("request", "is nested too deeply")]) from None
    except Exception as error:
        reason = (
            f"could not be read: internal error {type(error).__name__} (a bug in Relaunch; please report it)"
        )
        raise RequestInvalid([Problem("request", reason)]) from error


def _parse(
    raw: bytes | str | Mapping, allow_local_checkpoints: bool, prices: PriceTable
) -> JobRequest | CancelRequest:
    document = load_document(raw)
    if not isinstance(document, dict):
        raise RequestInvalid(
            [
                Problem(
                    "request",
                    f"must be an object with fields such as jobId and jobSpec (got {kind_of(document)})",
                )
            ]
        )
    if "action" in document:
        return _parse_cancel(document)
    return _parse_job(document, allow_local_checkpoints, prices)


def _parse_cancel(document: dict) -> CancelRequest:
    try:
        model = CancelRequestModel.model_validate(document)
    except ValidationError as error:
        problems = []
        for problem in problems_from_pydantic(error, CancelRequestModel):
            if problem.reason.startswith("unknown field"):
                problem = Problem(problem.field, "not allowed in a cancel request (only jobId and action)")
            problems.append(problem)
        raise RequestInvalid(problems) from None
    return CancelRequest(job_id=model.job_id)


def _parse_job(document: dict, allow_local_checkpoints: bool, prices: PriceTable) -> JobRequest:
    problems: list[Problem] = []
    model = None
    try:
        model = JobRequestModel.model_validate(
            document, context={"allow_local_checkpoints": allow_local_checkpoints}
        )
    except ValidationError as error:
        problems.extend(problems_from_pydantic(error, JobRequestModel))

    spec = None
    spec_rest = document.get("jobSpec")
    # Vertex has no minReplicaCount: it is Relaunch's, taken out before the Vertex library looks.
    vertex_rest, minimums, min_problems = split_min_replicas(spec_rest)
    problems.extend(min_problems)
    if isinstance(vertex_rest, dict):
        spec, spec_problems = parse_job_spec(vertex_rest, path=("jobSpec",))
        problems.extend(spec_problems)

    elastic = None
    if spec is not None and model is not None:
        elastic, elastic_problems = elastic_policy(
            spec, minimums, model.elastic if model is not None else None, "elastic" in document
        )
        problems.extend(elastic_problems)

    if model is not None and spec is not None and model.checkpoint.interval_setting is not None:
        problems.extend(_interval_env_problems(spec))

    placement_models, placement_field_problems = parse_placements(document.get("placements"))
    problems.extend(placement_field_problems)
    if model is not None and spec is not None and not placement_field_problems:
        problems.extend(
            placement_problems(placement_models, model.objective, model.deadline, spec, minimums, prices)
        )

    if problems or model is None or spec is None:
        raise RequestInvalid(problems or [Problem("request", "is not a valid job request")])
    return JobRequest(
        job_id=model.job_id,
        display_name=model.display_name,
        job_spec=spec,
        job_spec_rest=spec_rest,
        checkpoint_uri=model.checkpoint.uri,
        restart_policy=model.restart_policy.to_policy(),
        labels=dict(model.labels),
        checkpoint_interval=model.checkpoint.interval_setting,
        elastic=elastic,
        placements=tuple(p.to_placement(prices) for p in placement_models or ()),
        objective=Objective(model.objective) if model.objective is not None else None,
        deadline=model.deadline,
        price_sources={
            p.name: priced.source for p in placement_models or () if (priced := p.priced(prices)) is not None
        },
    )


def _interval_env_problems(spec: Any) -> list[Problem]:
    """With `checkpoint.interval` Relaunch sets one more variable in every container, so one
    fewer of the user's fits in Vertex's limit."""
    problems = []
    limit = MAX_USER_ENV - 1
    ours = {*RELAUNCH_ENV_NAMES, CHECKPOINT_INTERVAL_ENV}
    for index, pool in enumerate(spec.worker_pool_specs):
        for kind, camel in (
            ("container_spec", "containerSpec"),
            ("python_package_spec", "pythonPackageSpec"),
        ):
            if kind not in pool:
                continue
            env = getattr(pool, kind).env
            count = sum(1 for entry in env if entry.name not in ours)
            if count > limit:
                problems.append(
                    Problem(
                        f"jobSpec.workerPoolSpecs[{index}].{camel}.env",
                        f"at most {limit} entries with checkpoint.interval set: Vertex allows "
                        f"{VERTEX_MAX_ENV} and Relaunch adds {len(ours)} RELAUNCH_* variables (got {count})",
                    )
                )
    return problems
