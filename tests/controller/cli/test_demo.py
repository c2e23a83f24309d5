"""The README's demo path, end to end: devstack + controller process + 2x2 DDP trainer job."""

from controller.cli.main import main


def test_demo_preempts_recovers_and_matches_the_uninterrupted_run(tmp_path, capsys):
    code = main(["demo", "--steps", "100", "--dir", str(tmp_path / "demo"), "--timeout", "300"])
    out = capsys.readouterr().out
    assert code == 0, out[-4000:]
    assert "SPOT RECLAIM 1" in out and "SPOT RECLAIM 2" in out
    # Progress while it waits: each stand-in as it comes up, the trainer's own steps.
    assert "devstack: Vertex AI stand-in listening on" in out
    assert "demo-gpt attempt 1: step 10/100, loss" in out
    assert "demo-gpt attempt 2: training resumed from step" in out
    assert "restarted in place, resumed from the emergency checkpoint it wrote" in out
    assert "attempt 1: started from scratch, ended preempted" in out
    assert "attempt 2: resumed from step" in out
    assert "identical: the resumed run ended exactly where an uninterrupted run ends" in out
