# syntax=docker/dockerfile:1
# One image for every role; the command picks it (docs/deploy.md):
#
#   docker run IMAGE api        the HTTP API (REPROMPT_REDIS_URL, REPROMPT_API_KEYS)
#   docker run IMAGE worker     a worker (REPROMPT_REDIS_URL; /metrics on 9101)
#   docker run IMAGE serve      API + worker + embedded redis-server, one container
#   docker run IMAGE sim --host 0.0.0.0 --port 8099    the flaky-model simulator
#
#   docker build -t reprompt .                       slim: HTTP providers and the simulator
#   docker build --target local -t reprompt:local .  + the embedded gemma-3 270M model
#
# Every Python dependency comes at the version pinned in requirements.lock. No key, password
# or providers file is baked in: they come from the environment or mounted files at run time.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# -- the venv: reprompt and the simulator ---------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/reprompt/bin:$PATH
RUN python -m venv /opt/reprompt
WORKDIR /src
COPY requirements.lock pyproject.toml README.md LICENSE ./
COPY scripts/llama_wheel.py scripts/
COPY prompts prompts
COPY reprompt_sim reprompt_sim
COPY app app
RUN pip install --no-cache-dir -c requirements.lock ".[sim]"

# -- the same venv with the local model: llama-cpp-python built for any x86-64 CPU ---------
FROM build AS build-local
# scripts/llama_wheel.py builds the lock's pin with CMAKE_ARGS=-DGGML_NATIVE=OFF (a native
# build would use the build host's AVX-512/AMX and crash elsewhere: docs/local-model.md).
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential=12.9 cmake=3.25.* \
    && rm -rf /var/lib/apt/lists/*
RUN LLAMA_WHEEL_CACHE=/tmp/llama-wheels python scripts/llama_wheel.py --install \
    && pip install --no-cache-dir -c requirements.lock ".[sim,local]" \
    && rm -rf /tmp/llama-wheels

# -- what both images share -----------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/reprompt/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    REPROMPT_DATA_DIR=/var/lib/reprompt \
    REPROMPT_HOST=0.0.0.0
RUN groupadd --system --gid 10001 reprompt \
    && useradd --system --uid 10001 --gid reprompt --home-dir /var/lib/reprompt \
       --no-create-home --shell /usr/sbin/nologin reprompt \
    && install -d -o reprompt -g reprompt -m 0700 /var/lib/reprompt
WORKDIR /var/lib/reprompt
# 8080: the API (REPROMPT_PORT); 9101: a worker's /metrics (REPROMPT_WORKER_METRICS_PORT).
EXPOSE 8080 9101
# Liveness. Slim has no curl: Python asks. HEALTHCHECK_URL points it elsewhere (a worker's
# http://127.0.0.1:9101/metrics, the simulator's http://127.0.0.1:8099/healthz).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('HEALTHCHECK_URL') or 'http://127.0.0.1:%s/healthz' % os.environ.get('REPROMPT_PORT', '8080'), timeout=4)"]
ENTRYPOINT ["reprompt"]
CMD ["serve"]

# -- docker build --target local ------------------------------------------------------------
FROM runtime AS local
# llama.cpp's threads (OpenMP).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1=12.2.* \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build-local /opt/reprompt /opt/reprompt
USER 10001:10001

# -- the default target: slim ---------------------------------------------------------------
FROM runtime AS slim
COPY --from=build /opt/reprompt /opt/reprompt
USER 10001:10001
