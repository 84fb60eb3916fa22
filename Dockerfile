# Multi-stage build of the workdo binary.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p workdo && strip target/release/workdo

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates python3 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /src/target/release/workdo /usr/local/bin/workdo
COPY workflows /app/workflows
COPY functions /app/functions
ENTRYPOINT ["workdo"]
