"""`relaunch validate` and `relaunch render`, in-process and through the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cli.main import main
from controller.request import request_json_schema

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
VALID_EXAMPLES = sorted(p for p in EXAMPLES.glob("*") if p.suffix in (".yaml", ".json"))
INVALID_EXAMPLES = sorted(p for p in (EXAMPLES / "invalid").glob("*") if p.suffix in (".yaml", ".json"))


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_there_are_examples_of_both_kinds():
    assert {p.name for p in VALID_EXAMPLES} >= {"demo.yaml", "llama-finetune-spot.yaml", "cancel.json"}
    assert INVALID_EXAMPLES


@pytest.mark.parametrize("example", VALID_EXAMPLES, ids=lambda p: p.name)
def test_valid_examples_pass(capsys, example):
    code, out, err = run_cli(capsys, "validate", str(example))
    assert (code, out, err) == (0, f"{example}: ok\n", "")


@pytest.mark.parametrize("example", INVALID_EXAMPLES, ids=lambda p: p.name)
def test_invalid_examples_fail_with_the_expected_lines(capsys, example):
    expected = example.with_suffix(".expected").read_text().splitlines()
    code, out, err = run_cli(capsys, "validate", str(example))
    assert code == 2
    assert out == ""
    assert err.splitlines() == [f"{example}: {line}" for line in expected]


def test_validate_reports_each_file_and_fails_if_any_is_bad(capsys, tmp_path):
    good = EXAMPLES / "demo.yaml"
    missing = tmp_path / "nope.yaml"
    code, out, err = run_cli(capsys, "validate", str(good), str(missing))
    assert code == 2
    assert out == f"{good}: ok\n"
    assert err.startswith(f"{missing}: file: cannot be read")


def test_validate_syntax_error_points_at_the_line(capsys, tmp_path):
    broken = write(tmp_path, "broken.yaml", "jobId: x\njobSpec: [\n")
    code, _, err = run_cli(capsys, "validate", str(broken))
    assert code == 2
    assert err.startswith(f"{broken}: request: invalid YAML at line 3")


def test_validate_local_switch_admits_file_checkpoints(capsys, tmp_path):
    text = (
        (EXAMPLES / "demo.yaml")
        .read_text()
        .replace("gs://relaunch-demo/checkpoints/demo-gpt", "file:///tmp/relaunch/demo-gpt")
    )
    local = write(tmp_path, "local.yaml", text)
    assert run_cli(capsys, "validate", str(local))[0] == 2
    assert run_cli(capsys, "validate", "--local", str(local))[0] == 0


def test_render_prints_the_custom_job_for_the_attempt(capsys):
    code, out, err = run_cli(
        capsys,
        "render",
        str(EXAMPLES / "demo.yaml"),
        "--attempt",
        "3",
        "--resume-from",
        "gs://relaunch-demo/checkpoints/demo-gpt/step-0000000020",
    )
    assert (code, err) == (0, "")
    job = json.loads(out)
    assert job["displayName"] == "Demo GPT on Spot [attempt 3]"
    assert job["labels"]["relaunch-attempt"] == "3"
    assert job["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    env = {e["name"]: e["value"] for e in job["jobSpec"]["workerPoolSpecs"][1]["containerSpec"]["env"]}
    assert env["RELAUNCH_RESUME_FROM"] == "gs://relaunch-demo/checkpoints/demo-gpt/step-0000000020"
    assert out.startswith("{\n  ")  # indented for people


def test_render_on_demand(capsys):
    code, out, _ = run_cli(capsys, "render", str(EXAMPLES / "llama-finetune-spot.yaml"), "--on-demand")
    assert code == 0
    assert json.loads(out)["jobSpec"]["scheduling"]["strategy"] == "STANDARD"


def test_render_of_an_invalid_file_reports_like_validate(capsys):
    example = INVALID_EXAMPLES[0]
    _, _, validate_err = run_cli(capsys, "validate", str(example))
    code, out, err = run_cli(capsys, "render", str(example))
    assert (code, out) == (2, "")
    assert err == validate_err


def test_render_refuses_a_cancel_request(capsys):
    code, out, err = run_cli(capsys, "render", str(EXAMPLES / "cancel.json"))
    assert (code, out) == (2, "")
    assert "cancel request" in err


@pytest.mark.parametrize("attempt", ["0", "two"])
def test_render_rejects_a_bad_attempt_number(capsys, attempt):
    code, _, err = run_cli(capsys, "render", str(EXAMPLES / "demo.yaml"), "--attempt", attempt)
    assert code == 2
    assert "--attempt" in err


def test_help_lists_the_verbs(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    assert "validate" in out and "render" in out


@pytest.mark.parametrize("verb", ["validate", "render"])
def test_each_verb_explains_itself_with_an_example(capsys, verb):
    code, out, _ = run_cli(capsys, verb, "--help")
    assert code == 0
    assert "Example:" in out and f"relaunch {verb} examples/" in out


def test_no_verb_prints_usage_and_fails(capsys):
    code, _, err = run_cli(capsys)
    assert code == 2
    assert "usage: relaunch" in err


def test_unexpected_errors_are_one_line_without_traceback(capsys, monkeypatch):
    import controller.cli.commands.render as render_verb

    def explode(*args, **kwargs):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.delenv("RELAUNCH_DEBUG", raising=False)
    monkeypatch.setattr(render_verb, "load_request_file", explode)
    code, out, err = run_cli(capsys, "render", str(EXAMPLES / "demo.yaml"))
    assert code == 1
    assert err == "relaunch: error: disk on fire\n"  # a sentence, never the class name

    monkeypatch.setenv("RELAUNCH_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["render", str(EXAMPLES / "demo.yaml")])


def test_committed_json_schema_is_up_to_date():
    committed = json.loads((REPO / "docs" / "request-schema.json").read_text())
    assert committed == request_json_schema(), (
        "docs/request-schema.json is stale: run "
        "`.venv/bin/python -m controller.request > docs/request-schema.json`"
    )


def test_console_script_works():
    script = Path(sys.prefix) / "bin" / "relaunch"  # the console script of this virtual environment
    env = {k: v for k, v in os.environ.items() if k != "RELAUNCH_DEBUG"}
    validate = subprocess.run(
        [str(script), "validate", "examples/demo.yaml", "examples/invalid/bad-cancel.json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert validate.returncode == 2
    assert validate.stdout == "examples/demo.yaml: ok\n"
    assert "examples/invalid/bad-cancel.json: action: must be 'cancel'" in validate.stderr
    assert "Traceback" not in validate.stderr
