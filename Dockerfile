# syntax=docker/dockerfile:1
# Multi-stage build: a Debian builder with libvirt-dev (the libvirt Go
# binding needs cgo), and a slim runtime with libvirt0 only.

FROM golang:1.26-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libvirt-dev pkg-config && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${VERSION}" -o /out/stockade-agent ./cmd/stockade-agent \
 && go build -trimpath -ldflags "-X main.version=${VERSION}" -o /out/stockade ./cmd/stockade

FROM debian:bookworm-slim
# libvirt0 for the control plane; the rest builds guest images
# (`stockade image build`) from Debian packages at runtime.
RUN apt-get update && apt-get install -y --no-install-recommends \
      libvirt0 ca-certificates busybox-static crun debootstrap e2fsprogs xfsprogs cpio xz-utils \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/stockade /out/stockade-agent /usr/local/bin/
RUN useradd --system --home /var/lib/stockade --create-home stockade
USER stockade
ENV STOCKADE_ADDR=0.0.0.0:8080 STOCKADE_DATA_DIR=/var/lib/stockade
VOLUME /var/lib/stockade
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/stockade"]
CMD ["serve"]
