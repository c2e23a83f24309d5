"""The CLI holds to the conventions gcloud and kubectl users expect: suggestions for a mistyped
verb, choice or option with the verb's own usage; failures as plain sentences; settings checked
per key with the key, the value and what is allowed; per-checkout devstack layers whose `down`
prints what undoes `up`; RFC 3339 times. None of these needs a stand-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller import userconfig as config
from controller.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_mistyped_verb_is_answered_with_the_closest_one(capsys):
    code, _, err = run(capsys, "stauts")
    assert code == 2
    assert "unknown verb 'stauts'; did you mean 'status'?" in err


def test_a_mistyped_option_shows_the_verbs_usage_and_the_closest_option(capsys):
    code, _, err = run(capsys, "status", "--jsn")
    assert code == 2
    assert err.startswith("usage: relaunch status ")
    assert "unknown option --jsn; did you mean '--json'?" in err


def test_a_mistyped_choice_and_sub_verb_get_suggestions(capsys):
    code, _, err = run(capsys, "wait", "job", "--for", "chekpoint")
    assert code == 2 and "did you mean 'checkpoint'?" in err
    code, _, err = run(capsys, "devstack", "stauts")
    assert code == 2 and "unknown sub-verb 'stauts'; did you mean 'status'?" in err


def test_failures_are_sentences_without_exception_class_names(capsys, tmp_path, monkeypatch):
    # No devstack anywhere: not in --dir, and none named by an earlier test's environment.
    monkeypatch.delenv("RELAUNCH_DEVSTACK_CONTROL", raising=False)
    code, _, err = run(capsys, "devstack", "status", "--dir", str(tmp_path / "none"))
    assert code == 1
    assert err.startswith("relaunch: error: no devstack is running")
    assert "relaunch devstack up" in err
    for name in ("RuntimeError", "ControlError", "ClientError", "JobNotFound", "ValidationError"):
        assert name not in err


def test_config_set_refuses_a_bad_value_naming_key_value_and_what_is_allowed(capsys, isolated_cli_config):
    code, _, err = run(capsys, "config", "set", "verdict_seconds", "abc")
    assert code != 0
    assert "verdict_seconds='abc'" in err and "number of seconds" in err
    code, _, err = run(capsys, "config", "set", "reconcile_seconds", "-5")
    assert code != 0 and "reconcile_seconds='-5'" in err and "greater than 0" in err
    code, _, err = run(capsys, "config", "set", "state_store", "/tmp/state.db")
    assert code != 0 and "sqlite:///" in err and "gs://" in err
    assert not (isolated_cli_config / "config.json").exists()  # nothing bad was kept
    assert run(capsys, "config", "set", "verdict_seconds", "5")[0] == 0


def test_a_bad_variable_is_named_with_its_value_by_every_verb(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RELAUNCH_VERDICT_SECONDS", "abc")
    monkeypatch.setenv("RELAUNCH_STATE_STORE", f"sqlite:///{tmp_path / 'state.db'}")
    code, _, err = run(capsys, "status")
    assert code == 1
    assert "verdict_seconds='abc' (from env RELAUNCH_VERDICT_SECONDS)" in err
    assert "could not convert" not in err


def test_the_controller_refuses_to_start_naming_the_variable_value_and_rule(tmp_path):
    env = {
        **os.environ,
        "RELAUNCH_RECONCILE_SECONDS": "abc",
        "RELAUNCH_STATE_STORE": f"sqlite:///{tmp_path / 'state.db'}",
        "RELAUNCH_CONFIG_DIR": str(tmp_path / "config"),
        "RELAUNCH_DEVSTACK_DIR": "",
    }
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli", "controller"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    # Every line is JSON (the first included), and the error names variable, value and rule.
    records = [json.loads(line) for line in lines]
    assert records[-1]["severity"] == "ERROR"
    assert "RELAUNCH_RECONCILE_SECONDS='abc'" in records[-1]["message"]
    assert "valid number" in records[-1]["message"]


def test_printing_the_settings_table_leaves_the_readme_alone(capsys):
    from controller.settings import _main, markdown_table

    readme = Path(__file__).resolve().parents[3] / "README.md"
    before = readme.read_text()
    assert _main([]) == 0
    assert capsys.readouterr().out.strip() == markdown_table()
    assert readme.read_text() == before


# ---- per-checkout devstack layers ------------------------------------------------------------


def _checkout_with_layer(root: Path, store: str) -> Path:
    (root / ".devstack").mkdir(parents=True)
    config.write_devstack_layer(root / ".devstack", {"state_store": store})
    return root


def test_each_checkout_sees_its_own_devstack_layer(tmp_path, monkeypatch):
    monkeypatch.delenv("RELAUNCH_DEVSTACK_DIR")
    monkeypatch.delenv("RELAUNCH_STATE_STORE", raising=False)
    first = _checkout_with_layer(tmp_path / "first", "sqlite:///first.db")
    second = _checkout_with_layer(tmp_path / "second", "sqlite:///second.db")
    (first / "examples").mkdir()
    monkeypatch.chdir(first / "examples")  # a folder inside the checkout finds its layer
    assert config.lookup("state_store") == ("sqlite:///first.db", "devstack")
    monkeypatch.chdir(second)
    assert config.lookup("state_store") == ("sqlite:///second.db", "devstack")
    # The shell that evaluated `up`'s lines keeps its devstack wherever it goes.
    monkeypatch.setenv("RELAUNCH_DEVSTACK_DIR", str(first / ".devstack"))
    assert config.get("state_store") == "sqlite:///first.db"
    # Taking one down leaves the other's in place.
    config.remove_devstack_layer(first / ".devstack")
    monkeypatch.delenv("RELAUNCH_DEVSTACK_DIR")
    assert config.get("state_store") == "sqlite:///second.db"


def test_down_prints_the_unset_line_for_eval(capsys, tmp_path):
    code, out, _ = run(capsys, "devstack", "down", "--dir", str(tmp_path / ".devstack"))
    assert code == 0
    assert out.startswith("unset ")
    names = out.split()[1:]
    for name in ("PUBSUB_EMULATOR_HOST", "STORAGE_EMULATOR_HOST", "RELAUNCH_DEVSTACK_DIR"):
        assert name in names


def test_up_that_fails_makes_its_eval_fail(tmp_path):
    """`eval "$(relaunch devstack up)"` must not exit 0 when nothing started."""
    not_a_devstack = tmp_path / "precious"
    not_a_devstack.mkdir()
    (not_a_devstack / "notes.txt").write_text("keep me")
    script = f'eval "$({sys.executable} -m controller.cli devstack up --fresh --dir {not_a_devstack})"'
    env = {**os.environ, "RELAUNCH_CONFIG_DIR": str(tmp_path / "config")}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "does not look like a devstack directory" in done.stderr
    assert (not_a_devstack / "notes.txt").read_text() == "keep me"


# ---- JSON ---------------------------------------------------------------------------------------


def test_json_times_are_rfc3339_in_utc():
    from controller.readmodel.times import rfc3339, with_rfc3339_times

    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    converted = with_rfc3339_times(
        {"createdAt": 1.5, "attempts": [{"startedAt": 60, "endedAt": None, "number": 1}], "time": 0}
    )
    assert converted == {
        "createdAt": "1970-01-01T00:00:01.500Z",
        "attempts": [{"startedAt": "1970-01-01T00:01:00.000Z", "endedAt": None, "number": 1}],
        "time": "1970-01-01T00:00:00.000Z",
    }


@pytest.mark.parametrize(
    "verb", ["submit", "cancel", "wait", "status", "events", "logs", "validate", "report"]
)
def test_every_job_verb_takes_json(verb, capsys):
    code, out, _ = run(capsys, verb, "--help")
    assert code == 0 and "--json" in out


def test_a_shell_left_with_a_downed_devstacks_variables_is_told_at_once(capsys, tmp_path, monkeypatch):
    """`relaunch devstack down` without the eval leaves the emulator variables: say so rather
    than wait for stand-ins that are gone."""
    gone = tmp_path / ".devstack"
    gone.mkdir()
    monkeypatch.setenv("RELAUNCH_DEVSTACK_DIR", str(gone))
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:9")
    code, _, err = run(capsys, "status")
    assert code == 1
    assert 'eval "$(relaunch devstack down)"' in err and "not running" in err
