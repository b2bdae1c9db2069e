# The daemon's image: `docker build -t tether .` (no registry is reachable from the
# development machines; CI builds the binary, not the image).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin tether

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 openssh-client \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/tether /usr/local/bin/tether
# The restricted Pod Security profile runs it as this non-root user.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/tether"]
CMD ["run", "--sources", "--leader-elect", "--listen=0.0.0.0:8080", "--log-format=json"]
