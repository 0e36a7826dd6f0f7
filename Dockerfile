# syntax=docker/dockerfile:1
#
# One image with every rollfleet binary: rollout (run, server, toyllm,
# gateway, env, ...), envworker, llmworker, collector, and healthcheck (the
# probe that container healthchecks run, as the image has no shell).
#
#   docker build -t rollfleet:latest .
#   docker run --rm rollfleet:latest rollout --help
#
# The final stage is distroless "static" (CA certificates, tzdata, no shell)
# running as the non-root user 65532. See docs/deployment.md.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a change to the code reuses this layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/bin/ \
      ./cmd/rollout ./cmd/envworker ./cmd/llmworker ./cmd/collector ./cmd/healthcheck \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bin/ /usr/local/bin/
# The NATS server's JetStream store ("rollout server --data-dir /data"). A
# named volume mounted here starts out owned by the non-root user.
COPY --from=build --chown=65532:65532 /out/data /data
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER 65532:65532
WORKDIR /data
VOLUME ["/data"]
# NATS clients, routes between cluster nodes, and the monitoring endpoints
# (/healthz); the stand-in model and the gateway serve on 8000 and 8080.
EXPOSE 4222 6222 8222 8000 8080
CMD ["rollout", "--help"]
