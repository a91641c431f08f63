# idem in a slim Debian image: the release binary, run as an unprivileged user (uid 10001), its
# data in the volume /var/lib/idem, its config read from /etc/idem/idem.toml (mount yours there:
# the image holds none, and no secret), secrets by `{ env = … }` or `{ file = … }` in that config.
# From the repository root, on Debian 12 or a system of the same glibc or older:
#
#   cargo build --release
#   podman build --format docker -t idem .      # or: docker build -t idem .
#
# (`--format docker` keeps the HEALTHCHECK: podman's default OCI format has no field for it.)
FROM debian:bookworm-slim

LABEL org.opencontainers.image.title="idem" \
      org.opencontainers.image.description="Exactly-once trust decisions for identity signals" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 10001 idem \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/idem --no-create-home \
      --shell /usr/sbin/nologin idem \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/idem \
 && install -d -m 0755 /etc/idem

COPY target/release/idem /usr/local/bin/idem

USER 10001:10001
WORKDIR /var/lib/idem
VOLUME /var/lib/idem
EXPOSE 8080
# `idem healthcheck` asks http://127.0.0.1:8080/healthz: a small write made durable by the store.
HEALTHCHECK --interval=30s --timeout=15s --start-period=10s --retries=3 CMD ["idem", "healthcheck"]
ENTRYPOINT ["idem"]
CMD ["serve", "--config", "/etc/idem/idem.toml"]
