# wsgate, relay-backend, wsload and the example auth plugins in one small image.
#
#   docker build -t wsgate:latest .
#   docker run --read-only --tmpfs /tmp --cap-drop ALL \
#     -p 8080:8080 -p 127.0.0.1:9090:9090 \
#     -e WSGATE_ADMIN_TOKEN=... -e JWT_SECRET=... wsgate:latest
#
# wsgate:latest is the one name deploy/docker-compose.yml and
# deploy/kubernetes use (deploy's TestImageName checks it): tag and push it
# to your registry under another, and change it there too.
#
# The baked config, deploy/docker/wsgate.toml, is for containers: the admin
# API listens on every interface behind the bearer token in
# $WSGATE_ADMIN_TOKEN, clients need a JWT signed with $JWT_SECRET, and the
# relays are found in the Redis at redis://redis:6379/0, where relay-backend
# registers itself when started with -register-redis and -advertise
# (deploy/docker-compose.yml). Mount your own over /etc/wsgate to change any
# of it.
#
# Restarts: in a container wsgate is PID 1, so the SIGUSR2 hand-over (a new
# process on the same sockets, then the old one exits) would end the
# container with the old process. Restart by starting a new container and
# stopping the old one: SIGTERM makes it answer 503 on /readyz and close its
# clients with 1001 over drain_window; they reconnect to the other replicas.
# SIGHUP reloads the config (docker kill -s HUP), and so does a change of
# the file. docs/operations.md, "Containers and Kubernetes".
#
# No shell, no curl: a container's health check is the image's own
# `wsgate -healthcheck http://127.0.0.1:9090/readyz` (exit 0 on a 2xx),
# which also checks a relay (its /healthz on its -listen port). The image
# runs as the distroless nonroot user (uid 65532), on a read-only root
# filesystem if asked: wsgate writes only the plugins' sockets in /tmp.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/wsgate ./cmd/wsgate \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/relay-backend ./relay-backend \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/wsload ./cmd/wsload \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/plugins/jwt ./plugins/jwt \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/plugins/apikey ./plugins/apikey

FROM gcr.io/distroless/static-debian12:nonroot
# Keeps the Go runtime's monitor out of its deep sleep, from which the start
# of every burst of handshakes otherwise wakes it to tick every 20 µs: a
# tenth to a sixth less CPU per handshake, the same per forwarded frame
# (docs/operations.md, "The Go runtime's monitor").
ENV GODEBUG=schedtrace=2147483647
COPY --from=build /out/wsgate /out/relay-backend /out/wsload /usr/local/bin/
COPY --from=build /out/plugins/ /usr/local/lib/wsgate/plugins/
COPY deploy/docker/wsgate.toml /etc/wsgate/wsgate.toml
# The base image's nonroot user, by number: Kubernetes can check a numeric
# user against runAsNonRoot (deploy/kubernetes runs the pods as it).
USER 65532:65532
# 8080: clients. 9090: admin (/healthz, /readyz, /metrics, /api).
# 7001: relay-backend, when the image runs it (-listen 0.0.0.0:7001).
EXPOSE 8080 9090 7001
STOPSIGNAL SIGTERM
# For the default command, the gateway; a relay's container replaces it
# with its own /healthz (deploy/docker-compose.yml).
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/wsgate", "-healthcheck", "http://127.0.0.1:9090/readyz"]
ENTRYPOINT ["/usr/local/bin/wsgate"]
CMD ["-config", "/etc/wsgate/wsgate.toml"]
