"""Precision from the device, refusal to resume at another precision, determinism errors."""

import pytest

from tests.support.gang import TINY
from trainer import layout, storage
from trainer.config import ConfigError, parse_config
from trainer.numerics import check_resume_precision, is_nondeterministic_op_error, resolve_precision


@pytest.mark.parametrize(
    "device_type,capability,expected",
    [
        ("cuda", (9, 0), "bf16"),  # H100
        ("cuda", (8, 0), "bf16"),  # A100
        ("cuda", (7, 5), "fp16"),  # T4: bf16 would be emulated
        ("cuda", (7, 0), "fp16"),  # V100
        ("cpu", None, "fp32"),
    ],
)
def test_auto_precision_follows_the_device(device_type, capability, expected):
    assert resolve_precision("auto", device_type, capability) == expected


def test_an_explicit_precision_wins_and_fp16_needs_a_gpu():
    assert resolve_precision("fp32", "cuda", (9, 0)) == "fp32"
    assert resolve_precision("bf16", "cpu", None) == "bf16"
    with pytest.raises(ConfigError, match="fp16 needs a GPU"):
        resolve_precision("fp16", "cpu", None)
    assert parse_config(["--steps", "1"], env={}).precision == "auto"
    with pytest.raises(ConfigError):
        parse_config(["--steps", "1", "--precision", "fp8"], env={})


def test_resuming_at_another_precision_is_refused_with_the_way_out():
    check_resume_precision("bf16", "bf16", 40)
    check_resume_precision(None, "fp32", 40)  # a marker from before precision was recorded
    with pytest.raises(ConfigError) as caught:
        check_resume_precision("bf16", "fp16", 40)
    assert str(caught.value) == (
        "checkpoint step 40 was trained at bf16 but this run trains at fp16: resume with "
        "--precision bf16 (or start a new job to change precision)"
    )


def test_an_op_without_a_deterministic_implementation_is_recognised():
    # torch's wording (no CPU op raises it, so the text is quoted here; the GPU check meets the real one)
    raised = RuntimeError(
        "embedding_bag_backward_cuda_max does not have a deterministic implementation, but you set "
        "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this operation"
    )
    assert is_nondeterministic_op_error(raised)
    assert not is_nondeterministic_op_error(RuntimeError("CUDA out of memory"))


@pytest.mark.slow
def test_the_marker_records_the_precision_and_a_resume_at_another_one_is_refused(start_gang, tmp_path):
    root = f"file://{tmp_path}/ckpt"
    first = start_gang(["--steps", "2", *TINY], nproc=1, checkpoint_uri=root)
    assert first.wait() == [0], first.chief.output()
    assert storage.latest_committed(root).precision == "fp32"  # auto on CPU

    again = start_gang(
        ["--steps", "4", "--precision", "bf16", *TINY], nproc=1, attempt=2, checkpoint_uri=root
    )
    assert again.wait() == [layout.EXIT_CONFIG], again.chief.output()
    assert "checkpoint step 2 was trained at fp32 but this run trains at bf16" in again.chief.output()
    assert storage.read_exit_record(root, 2).reason == "config_error"
    assert storage.latest_committed(root).step == 2  # nothing trained on top of it
