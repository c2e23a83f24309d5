"""The trainer command line (docs/contracts.md) parsed into one immutable config."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from trainer import layout

# Vertex does not document the SIGTERM grace of a reclaimed replica; GKE Autopilot (which its
# nodes resemble) gives user pods 15 s by default. 10 s of budget plus the launcher's 5 s
# hard-kill margin (trainer/launch.py) fits in that.
DEFAULT_GRACE_SECONDS = 10.0


class ConfigError(Exception):
    """Bad arguments or a bad factory: not retryable, exit code 64."""


@dataclass(frozen=True)
class TrainConfig:
    model: str
    data: str
    engine: str
    zero_stage: int
    deepspeed_config: str | None
    steps: int
    batch_size: int
    lr: float
    seed: int
    grad_accum: int
    warmup_steps: int
    checkpoint_every_steps: int
    checkpoint_every_seconds: float
    keep_last: int
    nproc_per_node: int | None
    log_every: int
    grace_seconds: float
    rendezvous_timeout: int
    checkpoint_uri: str | None
    resume_from: str | None
    synchronous_checkpoints: bool = False
    # Samples per optimizer step, constant whatever the world size (elastic resume); None: the
    # global batch is batch_size x world size x grad_accum, as it always was.
    global_batch_size: int | None = None
    universal_conversion_timeout: float = 600.0
    peer_timeout: float = 15.0
    precision: str = "auto"  # auto, bf16, fp16, fp32 (trainer/numerics.py)
    deterministic: bool = False


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit 2; the contract says 64
        raise ConfigError(message)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _non_negative(kind):
    def parse(text: str):
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m trainer", description="Relaunch trainer: one replica of a training job.")
    p.add_argument(
        "--model", default="trainer.examples.gpt:build_model", help="model factory, module:function"
    )
    p.add_argument(
        "--data", default="trainer.examples.gpt:build_dataset", help="dataset factory, module:function"
    )
    p.add_argument("--engine", choices=("ddp", "deepspeed"), default="ddp")
    p.add_argument("--zero-stage", type=int, choices=(1, 2, 3), default=2)
    p.add_argument("--deepspeed-config", default=None, help="DeepSpeed JSON config file, used as is")
    p.add_argument("--steps", type=_positive_int, required=True, help="optimizer steps in total")
    p.add_argument("--batch-size", type=_positive_int, default=8, help="samples per rank per micro-step")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--grad-accum", type=_positive_int, default=None, help="micro-steps per optimizer step (default 1)"
    )
    p.add_argument(
        "--global-batch-size",
        type=_positive_int,
        default=None,
        help="samples per optimizer step at any world size: accumulation = G / (batch size x world size)",
    )
    p.add_argument(
        "--universal-conversion-timeout",
        type=_positive_int,
        default=600,
        help="seconds allowed to convert a DeepSpeed checkpoint written at another world size",
    )
    p.add_argument("--warmup-steps", type=_non_negative(int), default=0)
    p.add_argument("--checkpoint-every-steps", type=_non_negative(int), default=0, help="0 = off")
    p.add_argument(
        "--checkpoint-every-seconds",
        type=_non_negative(float),
        default=None,
        help=f"0 = off; default ${layout.CHECKPOINT_INTERVAL_ENV} (set by the controller per attempt), else 0",
    )
    p.add_argument("--keep-last", type=_positive_int, default=3)
    p.add_argument("--nproc-per-node", type=_positive_int, default=None, help="default: GPUs, or 1 on CPU")
    p.add_argument("--log-every", type=_positive_int, default=10)
    p.add_argument(
        "--grace-seconds",
        type=_non_negative(float),
        default=DEFAULT_GRACE_SECONDS,
        help="budget after the first SIGTERM any rank got: finish or skip the emergency save, exit",
    )
    p.add_argument("--rendezvous-timeout", type=_positive_int, default=300)
    p.add_argument(
        "--peer-timeout",
        type=_positive_float,
        default=15.0,
        help="seconds without a heartbeat from a peer rank before the gang counts as broken (exit 70)",
    )
    p.add_argument("--checkpoint-uri", default=None, help="default: $RELAUNCH_CHECKPOINT_URI")
    p.add_argument("--resume-from", default=None, help="default: $RELAUNCH_RESUME_FROM")
    p.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp16", "fp32"),
        default="auto",
        help="auto: bf16 on GPUs with bf16 units, fp16 on older GPUs, fp32 on CPU",
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic algorithms only (an op without one fails the run, exit 64): bitwise "
        "reproducible on GPU for the same GPU type and count",
    )
    p.add_argument(
        "--synchronous-checkpoints",
        action="store_true",
        help="upload in the training loop instead of a background thread (benchmarks, debugging)",
    )
    return p


def parse_config(argv: list[str], env: dict[str, str] | None = None) -> TrainConfig:
    env = os.environ if env is None else env
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help
        raise SystemExit(exc.code) from None
    for flag, value in (("--model", args.model), ("--data", args.data)):
        module, _, func = value.partition(":")
        if not module or not func:
            raise ConfigError(f"{flag} must look like module:function, got {value!r}")
    if args.deepspeed_config and args.engine != "deepspeed":
        raise ConfigError("--deepspeed-config needs --engine deepspeed")
    if args.deepspeed_config and not os.path.isfile(args.deepspeed_config):
        raise ConfigError(f"--deepspeed-config: no such file {args.deepspeed_config!r}")
    if args.global_batch_size is not None:
        if args.grad_accum is not None:
            raise ConfigError(
                "--grad-accum and --global-batch-size exclude each other: with --global-batch-size the "
                "accumulation is derived from the world size"
            )
        if args.global_batch_size % args.batch_size:
            raise ConfigError(
                f"--global-batch-size {args.global_batch_size} is not a multiple of --batch-size "
                f"{args.batch_size}: no world size can split it"
            )
    return TrainConfig(
        model=args.model,
        data=args.data,
        engine=args.engine,
        zero_stage=args.zero_stage,
        deepspeed_config=args.deepspeed_config,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        grad_accum=args.grad_accum or 1,
        warmup_steps=args.warmup_steps,
        checkpoint_every_steps=args.checkpoint_every_steps,
        checkpoint_every_seconds=(
            args.checkpoint_every_seconds
            if args.checkpoint_every_seconds is not None
            else _interval_from_env(env)
        ),
        keep_last=args.keep_last,
        nproc_per_node=args.nproc_per_node,
        log_every=args.log_every,
        grace_seconds=args.grace_seconds,
        rendezvous_timeout=args.rendezvous_timeout,
        checkpoint_uri=args.checkpoint_uri or env.get("RELAUNCH_CHECKPOINT_URI") or None,
        resume_from=args.resume_from or env.get("RELAUNCH_RESUME_FROM") or None,
        synchronous_checkpoints=args.synchronous_checkpoints,
        global_batch_size=args.global_batch_size,
        universal_conversion_timeout=float(args.universal_conversion_timeout),
        peer_timeout=args.peer_timeout,
        precision=args.precision,
        deterministic=args.deterministic,
    )


def workable_world_sizes(global_batch_size: int, batch_size: int) -> list[int]:
    """The world sizes at which `global_batch_size` splits into whole micro-batches on every rank."""
    per_rank = global_batch_size // batch_size
    return [size for size in range(1, per_rank + 1) if per_rank % size == 0]


def micro_steps_per_step(cfg: TrainConfig, world_size: int) -> int:
    """Gradient-accumulation micro-steps per optimizer step at this world size.

    With --global-batch-size the optimizer sees the same number of samples per step at every
    world size: fewer ranks accumulate more micro-batches. A world size that cannot split the
    global batch is a config error (exit 64) that names the sizes that would work.
    """
    if cfg.global_batch_size is None:
        return cfg.grad_accum
    per_micro_step = cfg.batch_size * world_size
    if cfg.global_batch_size % per_micro_step:
        raise ConfigError(
            f"--global-batch-size {cfg.global_batch_size} cannot be split over {world_size} ranks with "
            f"--batch-size {cfg.batch_size}: {cfg.global_batch_size} is not a multiple of "
            f"{cfg.batch_size} x {world_size} = {per_micro_step}; world sizes that work: "
            f"{workable_world_sizes(cfg.global_batch_size, cfg.batch_size)}"
        )
    return cfg.global_batch_size // per_micro_step


def _interval_from_env(env) -> float:
    text = (env.get(layout.CHECKPOINT_INTERVAL_ENV) or "").strip()
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{layout.CHECKPOINT_INTERVAL_ENV} must be a number, got {text!r}") from None
    if not value >= 0:  # also rejects NaN
        raise ConfigError(f"{layout.CHECKPOINT_INTERVAL_ENV} must be >= 0, got {text!r}")
    return value


@dataclass(frozen=True)
class JobIdentity:
    """Who this run is, as the controller tells it through RELAUNCH_* variables."""

    job_id: str
    attempt: int
    vertex_job_id: str | None = None  # CLOUD_ML_JOB_ID: keys this CustomJob's exit records

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> JobIdentity:
        env = os.environ if env is None else env
        try:
            attempt = int(env.get("RELAUNCH_ATTEMPT") or 1)
        except ValueError:
            raise ConfigError(
                f"RELAUNCH_ATTEMPT must be an integer, got {env.get('RELAUNCH_ATTEMPT')!r}"
            ) from None
        return cls(
            job_id=env.get("RELAUNCH_JOB_ID") or "local",
            attempt=attempt,
            vertex_job_id=layout.vertex_job_id_from_env(env),
        )
