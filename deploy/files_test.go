package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testproc"
	"go.yaml.in/yaml/v3"
)

// root is the repository, seen from this package's directory.
const root = ".."

// Secrets the tests hand to the processes they start, under the names the
// configs give.
const (
	testAdminToken = "admin-token-for-tests"
	testJWTSecret  = "jwt-secret-for-tests"
)

// dockerfile is what the tests read from the Dockerfile.
type dockerfile struct {
	builds      map[string]string // build-stage output path -> main package
	context     []string          // paths copied from the build context, any stage
	image       map[string]string // final image path -> "pkg:<main package>" or "file:<repo path>"
	expose      []string
	stopSignal  string
	entrypoint  []string
	cmd         []string
	healthcheck []string          // HEALTHCHECK's CMD, exec form
	user        string            // the final stage's USER
	env         map[string]string // the final stage's ENV
}

// runtimeGODEBUG is the GODEBUG the image and the systemd unit give the
// gateway (docs/operations.md, "The Go runtime's monitor").
const runtimeGODEBUG = "schedtrace=2147483647"

// readDockerfile parses the repository's Dockerfile: instructions joined
// across continuation lines, the go build commands of the build stage and
// the files of the final image.
func readDockerfile(t *testing.T) *dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var insts []string
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		insts = append(insts, cur.String())
		cur.Reset()
	}
	d := &dockerfile{builds: map[string]string{}, image: map[string]string{}, env: map[string]string{}}
	stages := 0
	for _, inst := range insts {
		op, rest, _ := strings.Cut(inst, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(op) {
		case "FROM":
			stages++
		case "RUN":
			for _, c := range strings.Split(rest, "&&") {
				f := strings.Fields(c)
				i := index(f, "-o")
				if index(f, "go") < 0 || index(f, "build") < 0 || i < 0 || i+1 >= len(f) {
					continue
				}
				d.builds[f[i+1]] = f[len(f)-1]
			}
		case "COPY":
			f := strings.Fields(rest)
			from := ""
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				if v, ok := strings.CutPrefix(f[0], "--from="); ok {
					from = v
				}
				f = f[1:]
			}
			if len(f) < 2 {
				t.Fatalf("Dockerfile: COPY with no destination: %s", inst)
			}
			srcs, dst := f[:len(f)-1], f[len(f)-1]
			if from == "" {
				d.context = append(d.context, srcs...)
			}
			if stages < 2 { // only the final stage's files are in the image
				continue
			}
			for _, src := range srcs {
				if from == "" {
					d.image[imageDst(src, dst)] = "file:" + src
					continue
				}
				for out, pkg := range d.builds {
					if strings.HasSuffix(src, "/") && strings.HasPrefix(out, src) {
						d.image[path.Join(dst, strings.TrimPrefix(out, src))] = "pkg:" + pkg
					} else if out == src {
						d.image[imageDst(src, dst)] = "pkg:" + pkg
					}
				}
			}
		case "ENV":
			if stages < 2 {
				continue
			}
			k, v, ok := strings.Cut(rest, "=")
			if !ok || strings.ContainsAny(v, " \t\"'") {
				t.Fatalf("Dockerfile: ENV %q: want one KEY=value, unquoted", rest)
			}
			d.env[k] = v
		case "EXPOSE":
			d.expose = strings.Fields(rest)
		case "STOPSIGNAL":
			d.stopSignal = rest
		case "ENTRYPOINT":
			d.entrypoint = jsonArgs(t, rest)
		case "CMD":
			d.cmd = jsonArgs(t, rest)
		case "USER":
			if stages >= 2 {
				d.user = rest
			}
		case "HEALTHCHECK":
			f := strings.Fields(rest)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			if len(f) < 2 || f[0] != "CMD" {
				t.Fatalf("Dockerfile: HEALTHCHECK %q: want CMD in exec form (the image has no shell)", rest)
			}
			d.healthcheck = jsonArgs(t, strings.Join(f[1:], " "))
		}
	}
	if stages < 2 {
		t.Fatalf("Dockerfile: want a build stage and a final stage, found %d stages", stages)
	}
	return d
}

// imageDst is where COPY puts src given dst: into it when it is a directory.
func imageDst(src, dst string) string {
	if strings.HasSuffix(dst, "/") {
		return path.Join(dst, path.Base(src))
	}
	return dst
}

func jsonArgs(t *testing.T, s string) []string {
	t.Helper()
	var a []string
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		t.Fatalf("Dockerfile: %q is not in exec (JSON) form: %v", s, err)
	}
	return a
}

func index(a []string, s string) int {
	for i, v := range a {
		if v == s {
			return i
		}
	}
	return -1
}

// flagValue returns the value of -name (or --name) in args, written as
// "-name value" or "-name=value".
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		a = strings.TrimLeft(a, "-")
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// withFlag returns args with the value of -name replaced by value.
func withFlag(t *testing.T, args []string, name, value string) []string {
	t.Helper()
	out := append([]string(nil), args...)
	for i, a := range out {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		a = strings.TrimLeft(a, "-")
		if a == name && i+1 < len(out) {
			out[i+1] = value
			return out
		}
		if strings.HasPrefix(a, name+"=") {
			out[i] = "-" + name + "=" + value
			return out
		}
	}
	t.Fatalf("no -%s in %q", name, args)
	return nil
}

// port returns the port of a host:port address.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return p
}

// loadConfig loads a wsgate config from text, as the gateway would.
func loadConfig(t *testing.T, name, text string) *conf.Config {
	t.Helper()
	cfg, err := conf.Parse(name, []byte(text))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return cfg
}

// replaceOnce replaces each old with its new in s, failing the test when
// old is not found exactly once: the adaptation of a shipped config to the
// test machine must change what it means to and nothing else.
func replaceOnce(t *testing.T, s string, oldNew ...string) string {
	t.Helper()
	for i := 0; i+1 < len(oldNew); i += 2 {
		if n := strings.Count(s, oldNew[i]); n != 1 {
			t.Fatalf("adapting a config: %q found %d times, want once", oldNew[i], n)
		}
		s = strings.Replace(s, oldNew[i], oldNew[i+1], 1)
	}
	return s
}

// writeTemp writes text to a new file named name in a test directory.
func writeTemp(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// testEnv is the environment of the processes the tests start: the
// secrets every shipped config names.
func testEnv() []string {
	return append(os.Environ(), "WSGATE_ADMIN_TOKEN="+testAdminToken, "JWT_SECRET="+testJWTSecret)
}

// pluginPaths maps each in-image plugin path a config names to the same
// plugin built for this machine, so the config can be checked and run here.
func pluginPaths(t *testing.T, d *dockerfile, cfg *conf.Config) []string {
	t.Helper()
	var repl []string
	for _, p := range cfg.Plugins {
		src, ok := d.image[p.Path]
		if !ok {
			t.Fatalf("%s: plugin %q path %s is not in the image (image files: %v)", cfg.File, p.Name, p.Path, keys(d.image))
		}
		pkg, ok := strings.CutPrefix(src, "pkg:")
		if !ok {
			t.Fatalf("%s: plugin %q path %s is a copied file, not a built plugin", cfg.File, p.Name, p.Path)
		}
		repl = append(repl, fmt.Sprintf("path = %q", p.Path), fmt.Sprintf("path = %q", testproc.Build(t, pkg)))
	}
	return repl
}

// keys returns a map's keys, for messages.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// wsgateCheck runs the real wsgate with args and -check, and fails the
// test unless it accepts them and the config they name.
func wsgateCheck(t *testing.T, args []string) {
	t.Helper()
	cmd := exec.Command(testproc.Build(t, "./cmd/wsgate"), append(append([]string(nil), args...), "-check")...)
	cmd.Env = testEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ": ok") {
		t.Fatalf("wsgate %q -check: %v\n%s", args, err, out)
	}
}

// startGateway runs the real wsgate with args (its config adapted to
// loopback) and waits until the admin listener's /readyz answers 200.
func startGateway(t *testing.T, adminAddr string, args []string) *testproc.Proc {
	t.Helper()
	cmd := exec.Command(testproc.Build(t, "./cmd/wsgate"), args...)
	cmd.Env = testEnv()
	p := testproc.StartCmd(t, "wsgate", cmd)
	testproc.WaitHTTP(t, "http://"+adminAddr+"/readyz", http.StatusOK, 20*time.Second)
	return p
}

// startRelay runs the real relay-backend with args and waits until its
// /healthz answers 200 on addr.
func startRelay(t *testing.T, name, addr string, args []string) *testproc.Proc {
	t.Helper()
	p := testproc.Start(t, name, testproc.Build(t, "./relay-backend"), args...)
	testproc.WaitHTTP(t, "http://"+addr+"/healthz", http.StatusOK, 20*time.Second)
	return p
}

// relayFlag returns the value of -name in a relay's args, or, when they
// leave it out, its default as the real relay-backend's -h prints it.
func relayFlag(t *testing.T, args []string, name string) string {
	t.Helper()
	if v, ok := flagValue(args, name); ok {
		return v
	}
	out, _ := exec.Command(testproc.Build(t, "./relay-backend"), "-h").CombinedOutput()
	lines := strings.Split(string(out), "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "-"+name {
			continue
		}
		// The usage text follows on the lines indented by a tab, up to
		// the next flag.
		for _, u := range lines[i+1:] {
			if !strings.HasPrefix(u, "    \t") {
				break
			}
			if m := flagDefault.FindStringSubmatch(u); m != nil {
				return m[1]
			}
		}
		t.Fatalf("relay-backend -h: -%s has no default\n%s", name, out)
	}
	t.Fatalf("relay-backend -h does not list -%s\n%s", name, out)
	return ""
}

// flagDefault is how package flag prints a non-zero default in usage.
var flagDefault = regexp.MustCompile(`\(default "?([^")]*)"?\)$`)

// clientToken is a JWT the shipped configs' jwt plugin accepts.
func clientToken(t *testing.T) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "deploy-test", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(testJWTSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// get answers the status of GET url.
func get(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// readYAML decodes every document of a YAML file into a new T each.
func readYAML[T any](t *testing.T, file string) []T {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var out []T
	for range 100 {
		var v T
		err := dec.Decode(&v)
		if err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("%s: %v", file, err)
		}
		out = append(out, v)
	}
	t.Fatalf("%s: more than 100 documents", file)
	return nil
}

// unit is a systemd unit file: section -> key -> values in order.
type unit map[string]map[string][]string

// readUnit parses a systemd unit file as INI lines.
func readUnit(t *testing.T, file string) unit {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", file, n, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// one returns the single value of key in section.
func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	if len(v) != 1 {
		t.Fatalf("[%s] %s: want one value, got %q", section, key, v)
	}
	return v[0]
}

// gone reports whether process pid has exited (or is a zombie nobody has
// reaped yet).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z")
}
