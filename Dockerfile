# Multi-stage build: the workdo binary and the demo step-function binaries, on a slim image with
# Python (for the Python demo function) and curl (for the health check).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --workspace --bins \
 && mkdir /out \
 && find target/release -maxdepth 1 -type f -executable -exec cp {} /out/ \;

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 curl \
 && rm -rf /var/lib/apt/lists/*
# Function binaries sit next to workdo, where it looks for programs named without a path.
COPY --from=build /out/ /usr/local/bin/
WORKDIR /app
COPY workflows /app/workflows
COPY functions/python /app/functions/python
COPY functions/shell /app/functions/shell
ENTRYPOINT ["workdo"]
