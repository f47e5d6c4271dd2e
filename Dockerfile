# flatstate server image: Debian 12, built with the same scripts/setup.sh as the README.
#   docker build -t flatstate:local .
#   docker run --rm -p 50051:50051 -p 8000:8000 -p 9090:9090 -v flatstate-ckpt:/var/lib/flatstate/checkpoints \
#       flatstate:local
# docker-compose.yml adds a health-gated load test (docs/loadtest.md).
FROM debian:12

ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
WORKDIR /opt/flatstate
COPY . .
# Installs the Debian packages (apt, as root) and builds everything into build/ (Release).
RUN bash scripts/setup.sh && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/flatstate/checkpoints

VOLUME ["/var/lib/flatstate/checkpoints"]
# gRPC (flatstate.v1.Inference, grpc.health.v1, reflection), the OpenAI-compatible HTTP API
# (docs/http-api.md) and Prometheus /metrics.
EXPOSE 50051 8000 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["build/clients/loadtest/flatstate-loadtest", "--mode=health", \
         "--server=127.0.0.1:50051", "--deadline=3s"]
CMD ["build/server/flatstate-server", "--models_dir=models", "--port=50051", \
     "--http_port=8000", "--metrics_port=9090", "--checkpoint_dir=/var/lib/flatstate/checkpoints"]
