package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testproc"
)

// composeService is what the tests read of one docker-compose service.
type composeService struct {
	Build           map[string]string `yaml:"build"`
	Image           string            `yaml:"image"`
	Entrypoint      []string          `yaml:"entrypoint"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	Volumes         []string          `yaml:"volumes"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	User            string            `yaml:"user"`
	ReadOnly        bool              `yaml:"read_only"`
	CapDrop         []string          `yaml:"cap_drop"`
	SecurityOpt     []string          `yaml:"security_opt"`
	Tmpfs           []string          `yaml:"tmpfs"`
	Sysctls         map[string]any    `yaml:"sysctls"`
	Healthcheck     struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Deploy struct {
		Resources struct {
			Limits map[string]string `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
}

// checkComposeHardening checks what every service of the compose file
// needs in production (issue 19 item 5): a read-only root, every
// capability dropped, no privilege gained by exec, CPU and memory limits,
// and a health check in exec form (the wsgate image has no shell).
func checkComposeHardening(t *testing.T, name string, s composeService) {
	t.Helper()
	if !s.ReadOnly {
		t.Errorf("service %s: read_only is not true", name)
	}
	if !slices.Contains(s.CapDrop, "ALL") {
		t.Errorf("service %s: cap_drop %v does not drop ALL", name, s.CapDrop)
	}
	if !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("service %s: security_opt %v lacks no-new-privileges:true", name, s.SecurityOpt)
	}
	if s.User == "0" || strings.HasPrefix(s.User, "0:") || s.User == "root" {
		t.Errorf("service %s runs as root", name)
	}
	if s.Deploy.Resources.Limits["cpus"] == "" || s.Deploy.Resources.Limits["memory"] == "" {
		t.Errorf("service %s: deploy.resources.limits %v, want cpus and memory", name, s.Deploy.Resources.Limits)
	}
	if len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
		t.Errorf("service %s: healthcheck %q, want one in exec form [\"CMD\", ...]", name, s.Healthcheck.Test)
	}
}

// healthcheckURL checks that a wsgate-image service's health check is the
// image's wsgate -healthcheck on a loopback URL with the given port and
// path, and returns the URL.
func healthcheckURL(t *testing.T, d *dockerfile, name string, s composeService, wantPort, wantPath string) string {
	t.Helper()
	hc := s.Healthcheck.Test
	if len(hc) != 4 || d.image[hc[1]] != "pkg:./cmd/wsgate" || hc[2] != "-healthcheck" {
		t.Fatalf("service %s: healthcheck %q, want [\"CMD\", the image's wsgate, \"-healthcheck\", URL]", name, hc)
	}
	u, err := url.Parse(hc[3])
	if err != nil || u.Hostname() != "127.0.0.1" || u.Port() != wantPort || u.Path != wantPath {
		t.Errorf("service %s: healthcheck URL %s, want http://127.0.0.1:%s%s", name, hc[3], wantPort, wantPath)
	}
	return hc[3]
}

// composeStack is deploy/docker-compose.yml read and checked: the gateway's
// command line and config (the file its volume mounts), and each relay's.
type composeStack struct {
	gateway    composeService
	configText string // the gateway's config as shipped
	relays     map[string]composeService
	health     map[string]string // each wsgate-image service's health check URL
}

// readCompose parses deploy/docker-compose.yml and checks what needs no
// process: services, images, entrypoints, the config the gateway's volume
// mounts, its discovery against the relays' registration flags, ports,
// environment and stop grace periods.
func readCompose(t *testing.T, d *dockerfile) *composeStack {
	t.Helper()
	files := readYAML[struct {
		Services map[string]composeService `yaml:"services"`
	}](t, "docker-compose.yml")
	if len(files) != 1 {
		t.Fatalf("docker-compose.yml: %d documents, want 1", len(files))
	}
	svcs := files[0].Services
	if _, ok := svcs["redis"]; !ok {
		t.Fatalf("docker-compose.yml has no redis service")
	}
	st := &composeStack{relays: map[string]composeService{}, health: map[string]string{}}
	for name, s := range svcs {
		checkComposeHardening(t, name, s)
		if name == "redis" {
			continue
		}
		if s.Build["context"] != ".." || s.Build["dockerfile"] != "Dockerfile" {
			t.Errorf("service %s: build %v, want the repository's Dockerfile", name, s.Build)
		}
		if len(s.Entrypoint) == 0 {
			st.gateway = s
			continue
		}
		if d.image[s.Entrypoint[0]] != "pkg:./relay-backend" {
			t.Errorf("service %s: entrypoint %q is not the image's relay-backend", name, s.Entrypoint)
		}
		st.relays[name] = s
	}
	if len(st.relays) != 2 || st.gateway.Image == "" {
		t.Fatalf("docker-compose.yml: want Redis, two relays and the gateway; got relays %v", keys(st.relays))
	}

	// The gateway's -config names a file its volume mounts from the repository.
	cfgPath, ok := flagValue(st.gateway.Command, "config")
	if !ok {
		t.Fatalf("gateway command %q names no -config", st.gateway.Command)
	}
	repoFile := ""
	for _, v := range st.gateway.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			if rel, ok := strings.CutPrefix(cfgPath, strings.TrimSuffix(parts[1], "/")+"/"); ok {
				repoFile = filepath.Join(parts[0], rel)
			}
		}
	}
	if repoFile == "" {
		t.Fatalf("gateway's -config %s is not on a volume (%v)", cfgPath, st.gateway.Volumes)
	}
	text, err := os.ReadFile(repoFile)
	if err != nil {
		t.Fatalf("gateway's -config %s is %s: %v", cfgPath, repoFile, err)
	}
	st.configText = string(text)
	cfg := loadConfig(t, repoFile, st.configText)
	_, baked := imageConfig(t, d)
	if cfgPath != baked {
		t.Errorf("gateway's -config %s is not where the image bakes its config (%s)", cfgPath, baked)
	}

	// Nodes: found in Redis, where every relay registers as its service
	// name and -listen port, under the prefix and in the Redis the pool
	// reads.
	disc := cfg.Pools[0].Discovery
	if disc.Kind != "redis" || len(cfg.Pools[0].Nodes) != 0 {
		t.Fatalf("%s: pool %s has kind %q and %d listed nodes: want its nodes from [pools.discovery] kind = \"redis\"", repoFile, cfg.Pools[0].Name, disc.Kind, len(cfg.Pools[0].Nodes))
	}
	if u, err := url.Parse(disc.Redis); err != nil || u.Hostname() != "redis" {
		t.Errorf("%s: discovery redis %q is not the compose file's redis service", repoFile, disc.Redis)
	}
	for name, s := range st.relays {
		listen, ok := flagValue(s.Command, "listen")
		if !ok {
			t.Fatalf("relay %s has no -listen (its default is loopback only)", name)
		}
		if h, _, _ := net.SplitHostPort(listen); h != "0.0.0.0" && h != "" {
			t.Errorf("relay %s listens on %s: the gateway in another container cannot reach it", name, listen)
		}
		redisURL, _ := flagValue(s.Command, "redis")
		if !strings.HasPrefix(redisURL, "redis://redis:6379/") {
			t.Errorf("relay %s: -redis %q, want the redis service", name, redisURL)
		}
		if reg, _ := flagValue(s.Command, "register-redis"); reg != disc.Redis {
			t.Errorf("relay %s: -register-redis %q, but the gateway's pool reads %q", name, reg, disc.Redis)
		}
		if prefix := relayFlag(t, s.Command, "register-prefix"); prefix != disc.Name {
			t.Errorf("relay %s registers under %q, but the gateway's pool reads %q", name, prefix, disc.Name)
		}
		if adv, _ := flagValue(s.Command, "advertise"); adv != net.JoinHostPort(name, port(t, listen)) {
			t.Errorf("relay %s: -advertise %q, want its service name and -listen port %s", name, adv, net.JoinHostPort(name, port(t, listen)))
		}
		st.health[name] = healthcheckURL(t, d, name, s, port(t, listen), "/healthz")
		window, _ := flagValue(s.Command, "drain-window")
		if w, err := time.ParseDuration(window); err != nil || !longer(s.StopGracePeriod, w+10*time.Second) {
			t.Errorf("relay %s: stop_grace_period %q must exceed -drain-window %q + 10s", name, s.StopGracePeriod, window)
		}
	}

	// Ports published are the ones the config listens on.
	published := map[string]bool{}
	for _, p := range st.gateway.Ports {
		parts := strings.Split(p, ":")
		published[parts[len(parts)-1]] = true
	}
	for _, a := range []string{cfg.Gateway.Listen, cfg.Admin.Listen} {
		if !published[port(t, a)] {
			t.Errorf("gateway ports %v do not publish %s", st.gateway.Ports, a)
		}
	}
	for _, env := range []string{cfg.Admin.TokenEnv, "JWT_SECRET"} {
		if _, ok := st.gateway.Environment[env]; !ok {
			t.Errorf("gateway environment lacks %s", env)
		}
	}
	st.health["gateway"] = healthcheckURL(t, d, "gateway", st.gateway, port(t, cfg.Admin.Listen), "/readyz")
	// The root is read-only: go-plugin's sockets need a writable /tmp.
	if len(cfg.Plugins) > 0 && !slices.Contains(st.gateway.Tmpfs, "/tmp") {
		t.Errorf("gateway: tmpfs %v lacks /tmp, where the auth plugins' sockets go", st.gateway.Tmpfs)
	}
	if _, ok := st.gateway.Sysctls["net.ipv4.ip_local_port_range"]; !ok {
		t.Errorf("gateway: sysctls %v lack net.ipv4.ip_local_port_range", st.gateway.Sysctls)
	}
	if !longer(st.gateway.StopGracePeriod, cfg.Gateway.DrainTimeout.Duration) {
		t.Errorf("gateway stop_grace_period %q must exceed drain_timeout %s", st.gateway.StopGracePeriod, cfg.Gateway.DrainTimeout)
	}
	return st
}

// longer reports whether the duration s is longer than d.
func longer(s string, d time.Duration) bool {
	v, err := time.ParseDuration(s)
	return err == nil && v > d
}

// TestCompose runs deploy/docker-compose.yml's stack on loopback: a real
// Redis, both relays with their command lines (addresses adapted: each
// listens on a loopback port and registers, in that Redis, as
// localhost:PORT, still a host name the gateway resolves), and the gateway
// with its command line and the mounted config (plugin path, listen
// addresses and the discovery Redis URL adapted). The gateway finds both
// relays in Redis; two clients with a JWT join one room through it, one on
// each relay, and a message from one reaches the other over Redis.
func TestCompose(t *testing.T) {
	d := readDockerfile(t)
	st := readCompose(t, d)
	rd := redistest.Start(t)

	var relayAddrs []string
	advertised := map[string]bool{}
	for name, s := range st.relays {
		addr := testproc.FreeAddr(t)
		args := withFlag(t, s.Command, "listen", addr)
		args = withFlag(t, args, "redis", rd.URL())
		args = withFlag(t, args, "register-redis", rd.URL())
		adv := net.JoinHostPort("localhost", port(t, addr))
		args = withFlag(t, args, "advertise", adv)
		advertised[adv] = true
		startRelay(t, name, addr, args)
		relayAddrs = append(relayAddrs, addr)
		runHealthcheck(t, name, st.health[name], addr)
	}
	cfg := loadConfig(t, "compose", st.configText)
	gw, admin := testproc.FreeAddr(t), testproc.FreeAddr(t)
	text := replaceOnce(t, st.configText,
		fmt.Sprintf("listen = %q", cfg.Gateway.Listen), fmt.Sprintf("listen = %q", gw),
		fmt.Sprintf("listen = %q", cfg.Admin.Listen), fmt.Sprintf("listen = %q", admin),
		fmt.Sprintf("redis = %q", cfg.Pools[0].Discovery.Redis), fmt.Sprintf("redis = %q", rd.URL()))
	text = replaceOnce(t, text, pluginPaths(t, d, cfg)...)
	args := withFlag(t, st.gateway.Command, "config", writeTemp(t, "wsgate.toml", text))
	startGateway(t, admin, args)
	runHealthcheck(t, "gateway", st.health["gateway"], admin)
	waitNodes(t, admin, "both relays found in Redis and up", func(v *nodesStatus) bool {
		n := 0
		for _, p := range v.Pools {
			for _, nd := range p.Nodes {
				if advertised[nd.Addr] && nd.State == "up" {
					n++
				}
			}
		}
		return n == len(advertised)
	})

	hdr := http.Header{"Authorization": {"Bearer " + clientToken(t)}}
	dialer := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	if _, resp, err := dialer.Dial("ws://"+gw+"/room/compose", nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a client without a token: %v %v, want 401", resp, err)
	}
	a, _, err := dialer.Dial("ws://"+gw+"/room/compose", hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _, err := dialer.Dial("ws://"+gw+"/room/compose", hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// A relay counts a client once its side of the upgrade is done, which
	// may come after the client has its 101: poll, bounded.
	for _, r := range relayAddrs {
		n := 0
		for range 100 {
			if n = relayConnections(t, r); n == 1 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n != 1 {
			t.Fatalf("relay %s holds %d connections, want 1 (one client each)", r, n)
		}
	}
	// b's relay subscribes to the room as b joins; send until it is in.
	got := make(chan string, 1)
	go func() {
		_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, m, err := b.ReadMessage()
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(m)
	}()
	for i := range 100 {
		if err := a.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m != "hello" {
				t.Fatalf("b read %q after %d sends", m, i+1)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("b received nothing after 100 sends")
}

// nodesStatus is what the tests read of the admin API's /api/nodes.
type nodesStatus struct {
	Tunnels int `json:"tunnels"`
	Pools   []struct {
		Nodes []struct {
			Addr  string `json:"addr"`
			State string `json:"state"`
		} `json:"nodes"`
	} `json:"pools"`
}

// up counts the nodes up.
func (v *nodesStatus) up() int {
	n := 0
	for _, p := range v.Pools {
		for _, nd := range p.Nodes {
			if nd.State == "up" {
				n++
			}
		}
	}
	return n
}

// waitNodes polls the admin API's /api/nodes (with the token) until ok
// says yes, for at most 20 s.
func waitNodes(t *testing.T, admin, what string, ok func(*nodesStatus) bool) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	var last string
	for range 200 {
		req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/api/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		resp, err := c.Do(req)
		if err == nil {
			var v nodesStatus
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err == nil && ok(&v) {
				return
			}
			last = fmt.Sprintf("%d %+v %v", resp.StatusCode, v, err)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within 20 s: %s", what, last)
}

// waitNodesUp waits until exactly n nodes are up.
func waitNodesUp(t *testing.T, admin string, n int) {
	t.Helper()
	waitNodes(t, admin, fmt.Sprintf("%d nodes up", n), func(v *nodesStatus) bool { return v.up() == n })
}

// relayConnections reads a relay's live connection count from /info.
func relayConnections(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Connections int `json:"connections"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("%s/info: %v", addr, err)
	}
	return v.Connections
}

// runHealthcheck runs a service's health check, its URL's host and port
// replaced by addr, with the real wsgate, and fails the test unless it
// exits 0.
func runHealthcheck(t *testing.T, name, checkURL, addr string) {
	t.Helper()
	u, err := url.Parse(checkURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	out, err := exec.Command(testproc.Build(t, "./cmd/wsgate"), "-healthcheck", u.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("service %s: wsgate -healthcheck %s: %v\n%s", name, u, err, out)
	}
}
