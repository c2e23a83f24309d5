"""capacity_sim's relaunch lane learns how long stockouts last through the controller's own
estimate (`controller.core.stockout_spells`, tested in tests/controller/core), not a copy of it:
the figures it prints describe the policy the controller runs."""

import importlib.util
import sys
from pathlib import Path

from controller.core import stockout_spells

_BENCH = Path(__file__).resolve().parents[2] / "bench"
_spec = importlib.util.spec_from_file_location("capacity_sim", _BENCH / "capacity_sim.py")
assert _spec is not None and _spec.loader is not None
sim = importlib.util.module_from_spec(_spec)
sys.modules["capacity_sim"] = sim  # dataclasses look their module up there
_spec.loader.exec_module(sim)


def test_the_relaunch_lane_folds_its_refusals_through_the_controllers_estimate():
    assert sim.Stockouts is stockout_spells.Stockouts
    assert isinstance(sim.Run().stockouts, stockout_spells.Stockouts)
