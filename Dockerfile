# The Dex MCP gateway as a container image (docs/deployment.md).
#
#   docker build -t dex-gateway .
#   docker run --read-only --tmpfs /tmp -v dex-var:/var/lib/dex-gateway -p 8080:8080 \
#     -e DEX_AGENT_TOKEN_SHA256=... -e DEX_ADMIN_TOKEN_SHA256=... dex-gateway
#
# Runs as an unprivileged user (uid 10001) and writes nothing outside /tmp and
# /var/lib/dex-gateway, so the root filesystem can be mounted read-only. The config is
# /etc/dex-gateway/gateway.yaml (deploy/gateway.yaml; mount your own over it, or point
# DEX_GATEWAY_CONFIG elsewhere); ${VAR} references in it and DEX_GATEWAY__SECTION__KEY
# variables override it from the environment; OTEL_* variables configure tracing.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY agent_host ./agent_host
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN groupadd --system --gid 10001 dex \
 && useradd --system --uid 10001 --gid dex --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin dex \
 && mkdir -p /var/lib/dex-gateway /var/lib/dex-agent /etc/dex-gateway \
 && chown dex:dex /var/lib/dex-gateway /var/lib/dex-agent
COPY --from=build /install /usr/local
COPY deploy/gateway.yaml /etc/dex-gateway/gateway.yaml
ENV DEX_GATEWAY_CONFIG=/etc/dex-gateway/gateway.yaml \
    DEX_FENCES_STORE=sqlite:////var/lib/dex-gateway/gateway.db \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OPENBLAS_NUM_THREADS=1 \
    TMPDIR=/tmp
WORKDIR /var/lib/dex-gateway
USER 10001:10001
EXPOSE 8080
VOLUME ["/var/lib/dex-gateway"]
# SIGTERM drains (in-flight calls finish within server.drain_seconds) and exits 0.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["dex-gateway", "serve"]
CMD []
