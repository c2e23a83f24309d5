# Two images from one Dockerfile:
#   docker build --target controller -t REGION-docker.pkg.dev/PROJECT/relaunch/controller .
#   docker build --target trainer    -t REGION-docker.pkg.dev/PROJECT/relaunch/trainer .
#   docker build --target trainer --build-arg TORCH_BUILD=cpu -t .../trainer-cpu .
# The controller image carries neither torch, devstack nor matplotlib; the trainer image is what
# every Vertex replica runs, as a non-root user.

# A pinned base: the same Python patch release and Debian release on every build.
FROM python:3.11.11-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# Dependency layer first: it changes only with pyproject.toml, so a source edit rebuilds in seconds.
# Empty packages let pip resolve and install every dependency before the real source is copied.
COPY pyproject.toml README.md ./
RUN mkdir -p controller trainer && touch controller/__init__.py trainer/__init__.py

FROM base AS controller
RUN pip install . && pip uninstall -y relaunch
COPY controller ./controller
# The controller reads the trainer's layout contract (trainer/layout.py, trainer/storage.py);
# nothing of the trainer's runtime is imported, and torch is not installed.
COPY trainer ./trainer
RUN pip install --no-deps . && rm -rf /app/controller /app/trainer
# Cloud Run sets PORT; the daemon serves /healthz, /readyz, /metrics, /v1/jobs and /pubsub/push.
USER 65532:65532
ENTRYPOINT ["relaunch", "controller"]

FROM base AS trainer
# torch 2.13.0 from PyPI is the CUDA build on Linux x86_64 (what GPU replicas need, several GB).
# TORCH_BUILD=cpu takes the CPU-only wheel of the same version from PyTorch's CPU index instead,
# for CPU-only machines and smoke tests.
ARG TORCH_BUILD=cuda
RUN if [ "$TORCH_BUILD" = "cpu" ]; then \
      pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu; \
    else \
      pip install torch==2.13.0; \
    fi
RUN pip install ".[trainer]" && pip uninstall -y relaunch
COPY controller ./controller
COPY trainer ./trainer
RUN pip install --no-deps ".[trainer]" && rm -rf /app/controller /app/trainer
RUN useradd --create-home --uid 10001 trainer
USER trainer
WORKDIR /home/trainer
ENTRYPOINT ["python", "-m", "trainer"]
