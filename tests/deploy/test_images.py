"""The images install what the tests ran with: constraints.txt (which every `pip install` in the
Dockerfile is held to) pins a version within pyproject.toml's range for each dependency of the
controller and the trainer, so an image build never fails to resolve nor drifts from `make test`."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from tests.deploy.deploy_scripts import REPO


def pins() -> dict[str, Version]:
    found = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        found[re.sub(r"[-_.]+", "-", name).lower()] = Version(version)
    return found


def image_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [
        Requirement(text) for text in project["dependencies"] + project["optional-dependencies"]["trainer"]
    ]


def test_every_image_dependency_is_pinned_within_its_declared_range():
    pinned = pins()
    outside = {}
    for requirement in image_requirements():
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        if name not in pinned or not requirement.specifier.contains(pinned[name], prereleases=True):
            outside[requirement.name] = (str(requirement.specifier), str(pinned.get(name)))
    assert outside == {}, "constraints.txt is stale: `make constraints` rewrites it from the tested venv"


def test_the_dockerfile_holds_every_dependency_install_to_the_constraints():
    installs = re.findall(r"^RUN .*?pip install ([^&\n]+)", (REPO / "Dockerfile").read_text(), re.M)
    assert len(installs) >= 4, installs
    for install in installs:
        assert (
            "--constraint constraints.txt" in install or "--no-deps" in install or "torch==2.13.0" in install
        ), install


def test_the_trainer_image_builds_deepspeed_ops_with_the_trainers_warm_up():
    """One way to build the ops: the image runs `python -m trainer.warmup` (timeout, stale-lock
    check, the accelerator's op list), not a builder call of its own that could drift from it."""
    dockerfile = (REPO / "Dockerfile").read_text()
    trainer_stage = dockerfile[dockerfile.index("AS trainer") :]
    runs = [line for line in trainer_stage.splitlines() if line.startswith("RUN ")]
    assert any(line.startswith("RUN python -m trainer.warmup") for line in runs), runs
    assert "op_builder" not in trainer_stage and "ShareMemCommBuilder" not in trainer_stage
