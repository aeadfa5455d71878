// Package deploy holds no code: its directory holds the deployment files
// (docker-compose.yml, kubernetes/, systemd/, docker/wsgate.toml), and its
// tests check each of them, and the repository's Dockerfile and
// .dockerignore, against what the binaries accept: every command line is
// run through the real flag parsing, every config through wsgate -check,
// every port against the listen keys, every probe against a running
// gateway or relay.
package deploy
