# Two images from one Dockerfile (deploy/cloudbuild.yaml builds and pushes both):
#   docker build --target controller -t REGION-docker.pkg.dev/PROJECT/relaunch/controller .
#   docker build --target trainer    -t REGION-docker.pkg.dev/PROJECT/relaunch/trainer .
#   docker build --target trainer --build-arg TORCH_BUILD=cpu -t .../trainer-cpu .
# The controller image carries neither torch, devstack nor matplotlib; the trainer image is what
# every Vertex replica runs, as a non-root user. Users build their own trainer image FROM it
# (trainer/README.md, "Your own trainer image").
#
# Every pip install is held to constraints.txt: the versions `make test` ran with
# (`make constraints` rewrites it; tests/deploy/test_images.py keeps it within pyproject.toml).

# A pinned base: the same Python patch release and Debian release on every build.
FROM python:3.11.11-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# Dependency layer first: it changes only with pyproject.toml, so a source edit rebuilds in seconds.
# Empty packages let pip resolve and install every dependency before the real source is copied.
COPY pyproject.toml README.md constraints.txt ./
RUN mkdir -p controller trainer && touch controller/__init__.py trainer/__init__.py

FROM base AS controller
# No extras: exactly what tests/deploy/test_packaged.py installs from the wheel.
RUN pip install --constraint constraints.txt . && pip uninstall -y relaunch
COPY controller ./controller
# The controller reads the trainer's layout contract (trainer/layout.py, trainer/storage.py);
# nothing of the trainer's runtime is imported, and torch is not installed.
COPY trainer ./trainer
RUN pip install --no-deps . && rm -rf /app/controller /app/trainer
# Cloud Run sets PORT; the daemon serves /healthz, /readyz, /metrics, /v1/jobs and /pubsub/push.
USER 65532:65532
ENTRYPOINT ["relaunch", "controller"]

FROM base AS trainer
# DeepSpeed builds its C++ ops with the system compiler the first time a process loads them. On
# CPU (DS_ACCELERATOR=cpu) its communication backend loads the shared-memory op
# (deepspeed_shm_comm) at start; g++ (with OpenMP) is what that build needs, and is kept so that
# other CPU ops a user's DeepSpeed config asks for (CPU Adam for optimizer offload) build too. On
# GPU the trainer needs no compiled op (torch's AdamW, NCCL); ops that need nvcc (FusedAdam in a
# user's config) are not supported by this image (trainer/README.md).
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++=4:12.2.0-3 \
    && rm -rf /var/lib/apt/lists/*
# torch 2.13.0 from PyPI is the CUDA build on Linux x86_64 (what GPU replicas need, several GB).
# TORCH_BUILD=cpu takes the CPU-only wheel of the same version from PyTorch's CPU index instead,
# for CPU-only machines and smoke tests.
ARG TORCH_BUILD=cuda
RUN if [ "$TORCH_BUILD" = "cpu" ]; then \
      pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu; \
    else \
      pip install torch==2.13.0; \
    fi
RUN pip install --constraint constraints.txt ".[trainer]" && pip uninstall -y relaunch
COPY controller ./controller
COPY trainer ./trainer
RUN pip install --no-deps . && rm -rf /app/controller /app/trainer
RUN useradd --create-home --uid 10001 trainer
# Build the DeepSpeed ops now, into a directory the trainer user owns, with the trainer's own
# warm-up (the one way they are built: trainer/warmup.py picks the ops for the accelerator, builds
# each with a timeout and clears stale locks). No GPU is visible during a build, so it builds the
# CPU ops; on GPU the trainer needs none. At start DeepSpeed finds them built (ninja has nothing to
# do) instead of compiling in every replica of every attempt.
ENV TORCH_EXTENSIONS_DIR=/opt/torch-extensions
RUN python -m trainer.warmup \
    && chown -R 10001:10001 /opt/torch-extensions
USER 10001:10001
WORKDIR /home/trainer
ENTRYPOINT ["python", "-m", "trainer"]
