# Two images from one Dockerfile:
#   docker build --target controller -t REGION-docker.pkg.dev/PROJECT/relaunch/controller .
#   docker build --target trainer    -t REGION-docker.pkg.dev/PROJECT/relaunch/trainer .
# The controller image carries no torch; the trainer image is what every Vertex replica runs.

FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY controller ./controller
COPY trainer ./trainer
COPY devstack ./devstack

FROM base AS controller
RUN pip install .
# Cloud Run sets PORT; the daemon serves /healthz, /readyz, /metrics, /v1/jobs and /pubsub/push.
USER 65532:65532
ENTRYPOINT ["relaunch", "controller"]

FROM base AS trainer
# On GPU machines install the CUDA build of the same torch version instead of the CPU one.
RUN pip install ".[trainer]"
ENTRYPOINT ["python", "-m", "trainer"]
