# Multi-stage build of the walbox binaries (walbox, and the example orders and notifier services).
# The image's walbox is built without tracing, as `go build` builds it; for one that exports
# OpenTelemetry spans (--otlp-endpoint): docker build --build-arg TAGS=otel .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TAGS=
RUN CGO_ENABLED=0 go build -trimpath -tags "${TAGS}" -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER nonroot
ENTRYPOINT ["/usr/local/bin/walbox"]
CMD ["run"]
