"""The demo's progress lines come from the trainer's own log records, as they are appended."""

import json

from controller.cli.demo_progress import ChiefLog, describe


def test_the_chief_log_yields_each_complete_record_once_as_the_log_grows(tmp_path):
    path = tmp_path / "workerpool0-0.log"
    follower = ChiefLog(path)
    assert follower.new_records() == []  # not written yet
    first = json.dumps({"message": "train", "step": 10, "loss": 4.5})
    path.write_text(first + "\nnot json: a warning from a library\n" + '{"message": "tr')
    assert [r["step"] for r in follower.new_records()] == [10]
    with open(path, "a") as log:
        log.write('ain", "step": 20, "loss": 4.25}\n')
    assert [r["step"] for r in follower.new_records()] == [20]
    assert follower.new_records() == []


def test_progress_lines_say_the_step_of_the_total_and_the_resume_point():
    assert describe({"message": "train", "step": 40, "loss": 3.14159}, 200) == "step 40/200, loss 3.142"
    assert describe({"message": "resumed", "from_step": 60, "world_size": 4}, 200) == (
        "training resumed from step 60 (world size 4)"
    )
    assert describe({"message": "numerics"}, 200) is None
