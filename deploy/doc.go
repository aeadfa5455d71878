// Package deploy holds no code: its directory holds the deployment files
// (docker-compose.yml, kubernetes/, systemd/, docker/wsgate.toml,
// prometheus/), and its tests check each of them, and the repository's
// Dockerfile and .dockerignore, against what the binaries accept and what
// production needs: every command line is run through the real flag
// parsing, every config through wsgate -check, every port against the
// listen keys, every probe and health check against a running gateway or
// relay; the Kubernetes manifests are decoded strictly into k8s.io/api
// types and held to Pod Security "restricted", the systemd units go
// through systemd-analyze verify, and the image has one name everywhere.
package deploy
