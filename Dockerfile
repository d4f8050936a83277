# Multi-stage build of the walbox binaries (walbox, and the example orders and notifier services).
# The image's walbox is built without tracing, as `go build` builds it; for one that exports
# OpenTelemetry spans (--otlp-endpoint), built from the otel module: docker build --build-arg TAGS=otel .
# GO_IMAGE and RUNTIME_IMAGE only swap the base images (`make test-compose` builds this file on
# images made locally, without a registry); the defaults are the public ones.
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY examples/go.mod examples/go.sum ./examples/
COPY otel/go.mod otel/go.sum ./otel/
RUN go mod download && (cd examples && go mod download) && cd otel && go mod download
COPY . .
ARG VERSION=dev
ARG TAGS=
# walbox from the product module (with TAGS=otel, from the otel module instead); orders and
# notifier from the examples module.
RUN CGO_ENABLED=0 go build -trimpath -tags "${TAGS}" -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/... \
 && case " $(echo "${TAGS}" | tr , ' ') " in *" otel "*) (cd otel && CGO_ENABLED=0 go build -trimpath -tags "${TAGS}" \
      -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/walbox);; esac \
 && cd examples && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/orders ./cmd/notifier

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/ /usr/local/bin/
USER nonroot
ENTRYPOINT ["/usr/local/bin/walbox"]
CMD ["run"]
