# wsgate, relay-backend, wsload and the example auth plugins in one small image.
#   docker build -t wsgate .
#   docker run -p 8080:8080 -v $PWD/conf:/etc/wsgate wsgate
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
COPY --from=build /out/wsgate /out/relay-backend /out/wsload /usr/local/bin/
COPY --from=build /out/plugins/ /usr/local/lib/wsgate/plugins/
COPY conf/wsgate.toml /etc/wsgate/wsgate.toml
# 8080: clients. 9090: admin (listens on 127.0.0.1 by default; set
# [admin] listen = "0.0.0.0:9090" and token_env to reach it from outside).
EXPOSE 8080 9090
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/wsgate"]
CMD ["-config", "/etc/wsgate/wsgate.toml"]
