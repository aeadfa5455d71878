package deploy

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// imageConfig is the config the Dockerfile bakes into the image, by its
// path in the repository, and its path in the image.
func imageConfig(t *testing.T, d *dockerfile) (repoPath, imagePath string) {
	t.Helper()
	cfgPath, ok := flagValue(d.cmd, "config")
	if !ok {
		t.Fatalf("Dockerfile CMD %q names no -config", d.cmd)
	}
	src, ok := strings.CutPrefix(d.image[cfgPath], "file:")
	if !ok {
		t.Fatalf("Dockerfile: CMD's -config %s is not a file copied into the image", cfgPath)
	}
	return src, cfgPath
}

// TestDockerfile checks the image's layout against the binaries and the
// config it bakes: the entrypoint is the built wsgate, the CMD's flags and
// the baked config pass wsgate -check (with the plugins it names built for
// this machine), its plugin paths are where the image has the plugins, the
// admin API listens beyond loopback behind a token, its pools find their
// nodes by discovery, EXPOSE covers the config's ports, and SIGTERM (the
// drain) stops the container.
func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	if v := d.env["GODEBUG"]; v != runtimeGODEBUG {
		t.Errorf("Dockerfile: the image's GODEBUG is %q, want %q", v, runtimeGODEBUG)
	}
	for out, pkg := range d.builds {
		b, err := exec.Command("go", "list", "-f", "{{.Name}}", filepath.Join(root, pkg)).CombinedOutput()
		if err != nil || strings.TrimSpace(string(b)) != "main" {
			t.Errorf("Dockerfile builds %s from %s, which is not a main package: %v %s", out, pkg, err, b)
		}
	}
	if len(d.entrypoint) != 1 || d.image[d.entrypoint[0]] != "pkg:./cmd/wsgate" {
		t.Fatalf("ENTRYPOINT %q: want the wsgate binary built from ./cmd/wsgate (image: %v)", d.entrypoint, d.image)
	}
	for _, cmd := range []string{"./relay-backend", "./cmd/wsload", "./plugins/jwt", "./plugins/apikey"} {
		found := false
		for _, src := range d.image {
			found = found || src == "pkg:"+cmd
		}
		if !found {
			t.Errorf("the image lacks %s", cmd)
		}
	}
	if d.stopSignal != "SIGTERM" {
		t.Errorf("STOPSIGNAL %q: want SIGTERM, which drains the gateway", d.stopSignal)
	}
	// A numeric user other than root, so that Kubernetes can check
	// runAsNonRoot against the image.
	if uid, _, _ := strings.Cut(d.user, ":"); uid == "" || uid == "0" || strings.Trim(uid, "0123456789") != "" {
		t.Errorf("USER %q: want a numeric user other than 0", d.user)
	}
	// The health check: the image's wsgate -healthcheck (no shell, no
	// curl) on the baked config's admin port, /readyz.
	if hc := d.healthcheck; len(hc) != 3 || d.image[hc[0]] != "pkg:./cmd/wsgate" || hc[1] != "-healthcheck" {
		t.Errorf("HEALTHCHECK %q: want the image's wsgate -healthcheck URL", hc)
	}

	src, _ := imageConfig(t, d)
	if src != "deploy/docker/wsgate.toml" {
		t.Errorf("the image's config is %s, want the container config deploy/docker/wsgate.toml", src)
	}
	text, err := os.ReadFile(filepath.Join(root, src))
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, src, string(text))
	if h, _, _ := net.SplitHostPort(cfg.Admin.Listen); cfg.Admin.TokenEnv == "" || h != "" && h != "0.0.0.0" && h != "::" {
		t.Errorf("the container config's admin listens on %q with token_env %q: want every interface behind a token", cfg.Admin.Listen, cfg.Admin.TokenEnv)
	}
	for _, p := range cfg.Pools {
		if p.Discovery.Kind == "" {
			t.Errorf("the container config's pool %s lists its nodes: want them from [pools.discovery], as no node address is known when the image is built", p.Name)
		}
	}
	if hc := d.healthcheck; len(hc) == 3 && hc[2] != "http://127.0.0.1:"+port(t, cfg.Admin.Listen)+"/readyz" {
		t.Errorf("HEALTHCHECK GETs %s; the baked config's admin listens on %s", hc[2], cfg.Admin.Listen)
	}
	for _, a := range []string{cfg.Gateway.Listen, cfg.Admin.Listen} {
		if index(d.expose, port(t, a)) < 0 {
			t.Errorf("EXPOSE %v lacks port %s of %s", d.expose, port(t, a), a)
		}
	}
	if len(cfg.Plugins) == 0 {
		t.Errorf("the container config names no plugin: nothing checks the in-image plugin paths")
	}
	local := writeTemp(t, "wsgate.toml", replaceOnce(t, string(text), pluginPaths(t, d, cfg)...))
	wsgateCheck(t, withFlag(t, d.cmd, "config", local))
}

// TestDockerignore checks that the build context keeps every file the
// Dockerfile copies or its go build commands read (Go files, embedded
// files, go.mod and go.sum), and leaves out what the build never reads.
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") || strings.Contains(line, "**") {
			t.Fatalf(".dockerignore: %q: this test does not understand exceptions or **; teach it before using them", line)
		}
		patterns = append(patterns, filepath.Clean(strings.TrimPrefix(line, "/")))
	}
	ignored := func(rel string) string {
		parts := strings.Split(filepath.ToSlash(rel), "/")
		for _, p := range patterns {
			for i := 1; i <= len(parts); i++ { // the file or any directory above it
				if ok, _ := filepath.Match(p, strings.Join(parts[:i], "/")); ok {
					return p
				}
			}
		}
		return ""
	}
	for _, p := range []string{".git", "docs", "testdata"} {
		if ignored(p+"/x") == "" {
			t.Errorf(".dockerignore keeps %s in the build context", p)
		}
	}

	d := readDockerfile(t)
	need := map[string]bool{}
	for _, c := range d.context {
		if c != "." && c != "./" {
			need[c] = true
		}
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, pkg := range d.builds {
		pkgs = append(pkgs, pkg)
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f",
		`{{if not .Standard}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .SFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}`},
		pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		if rel, ok := strings.CutPrefix(f, abs+"/"); ok {
			need[rel] = true
			n++
		}
	}
	if n < 10 {
		t.Fatalf("go list found %d files of this module to build %v: too few to be right", n, pkgs)
	}
	for f := range need {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("the Dockerfile needs %s: %v", f, err)
		}
		if p := ignored(f); p != "" {
			t.Errorf("the Dockerfile needs %s, which .dockerignore's %q leaves out", f, p)
		}
	}
}
