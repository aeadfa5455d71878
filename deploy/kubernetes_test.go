package deploy

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/discovery/dnstest"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/internal/testproc"
)

// k8sObject is what the tests read of a Kubernetes object.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		ClusterIP                string         `yaml:"clusterIP"`
		PublishNotReadyAddresses bool           `yaml:"publishNotReadyAddresses"`
		Replicas                 int            `yaml:"replicas"`
		Selector                 map[string]any `yaml:"selector"`
		Ports                    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
		MinAvailable   any `yaml:"minAvailable"`
		MaxUnavailable any `yaml:"maxUnavailable"`
		Template       struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
	Containers                    []container `yaml:"containers"`
	Volumes                       []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		ValueFrom struct {
			SecretKeyRef struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// portOf resolves a port given by number or by a container port's name.
func (c *container) portOf(t *testing.T, p any) int {
	t.Helper()
	switch v := p.(type) {
	case int:
		return v
	case string:
		for _, cp := range c.Ports {
			if cp.Name == v {
				return cp.ContainerPort
			}
		}
	}
	t.Fatalf("container %s has no port %v", c.Name, p)
	return 0
}

// command is the container's command line, the image's entrypoint when
// it sets none.
func (c *container) command(d *dockerfile) []string {
	cmd := c.Command
	if len(cmd) == 0 {
		cmd = d.entrypoint
	}
	return append(append([]string(nil), cmd...), c.Args...)
}

// k8s is the manifests in deploy/kubernetes, by kind and name.
type k8s map[string]*k8sObject

func readKubernetes(t *testing.T) k8s {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	objs := k8s{}
	for _, f := range files {
		for _, o := range readYAML[k8sObject](t, f) {
			key := o.Kind + "/" + o.Metadata.Name
			if objs[key] != nil {
				t.Fatalf("%s: %s defined twice", f, key)
			}
			objs[key] = &o
		}
	}
	return objs
}

func (k k8s) get(t *testing.T, kind, name string) *k8sObject {
	t.Helper()
	o := k[kind+"/"+name]
	if o == nil {
		t.Fatalf("no %s named %s in deploy/kubernetes", kind, name)
	}
	return o
}

// matchLabels returns a selector's labels: a Service's selector is the
// labels themselves, a workload's or a budget's is under matchLabels.
func matchLabels(sel map[string]any) map[string]any {
	if m, ok := sel["matchLabels"].(map[string]any); ok {
		return m
	}
	return sel
}

func selects(sel map[string]any, labels map[string]string) bool {
	m := matchLabels(sel)
	for k, v := range m {
		if labels[k] != v {
			return false
		}
	}
	return len(m) > 0
}

// k8sGateway is the gateway's part of the manifests, read and checked.
type k8sGateway struct {
	c          *container
	configText string
	configFile string // the config's path in the pod
}

// checkGatewayManifests checks the gateway's Deployment, ConfigMap,
// Service and PodDisruptionBudget against the config and the image.
func checkGatewayManifests(t *testing.T, objs k8s, d *dockerfile) *k8sGateway {
	t.Helper()
	dep := objs.get(t, "Deployment", "wsgate")
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment wsgate: %d containers, want 1", len(pod.Containers))
	}
	c := &pod.Containers[0]
	cmd := c.command(d)
	if d.image[cmd[0]] != "pkg:./cmd/wsgate" {
		t.Fatalf("Deployment wsgate runs %q, not the image's wsgate", cmd[0])
	}
	if v, _ := flagValue(cmd, "watch"); v == "false" {
		t.Errorf("Deployment wsgate: -watch=false: a ConfigMap change would not be reloaded")
	}
	// The config: a file of the ConfigMap volume, mounted whole.
	cfgPath, ok := flagValue(cmd, "config")
	if !ok {
		t.Fatalf("Deployment wsgate: no -config in %q", cmd)
	}
	g := &k8sGateway{c: c, configFile: cfgPath}
	for _, m := range c.VolumeMounts {
		if filepath.Dir(cfgPath) != filepath.Clean(m.MountPath) && cfgPath != m.MountPath {
			continue
		}
		if m.SubPath != "" {
			t.Errorf("the config is mounted with subPath: the kubelet never updates such a mount, so nothing would reload")
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm := objs.get(t, "ConfigMap", v.ConfigMap.Name)
				g.configText, ok = cm.Data[filepath.Base(cfgPath)]
				if !ok {
					t.Fatalf("ConfigMap %s has no key %s", cm.Metadata.Name, filepath.Base(cfgPath))
				}
			}
		}
	}
	if g.configText == "" {
		t.Fatalf("Deployment wsgate: -config %s is not in a ConfigMap volume", cfgPath)
	}
	cfg := loadConfig(t, "ConfigMap wsgate", g.configText)

	// Ports, probes and secrets.
	if c.portOf(t, "admin") != mustAtoi(t, port(t, cfg.Admin.Listen)) {
		t.Errorf("container port admin is not admin.listen %s", cfg.Admin.Listen)
	}
	for _, pr := range []struct {
		name string
		p    *probe
		path string
	}{{"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
		if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path {
			t.Errorf("Deployment wsgate: %s must GET %s", pr.name, pr.path)
			continue
		}
		if got := c.portOf(t, pr.p.HTTPGet.Port); strconv.Itoa(got) != port(t, cfg.Admin.Listen) {
			t.Errorf("%s probes port %d, admin listens on %s", pr.name, got, cfg.Admin.Listen)
		}
	}
	if h, _, _ := net.SplitHostPort(cfg.Admin.Listen); h != "" && h != "0.0.0.0" {
		t.Errorf("admin.listen %s: the kubelet's probes come from outside the pod", cfg.Admin.Listen)
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom.SecretKeyRef.Name != ""
	}
	for _, name := range []string{cfg.Admin.TokenEnv, "JWT_SECRET"} {
		if !env[name] {
			t.Errorf("Deployment wsgate: %s is not set from a Secret", name)
		}
	}
	svc := objs.get(t, "Service", "wsgate")
	if !selects(svc.Spec.Selector, dep.Spec.Template.Metadata.Labels) {
		t.Errorf("Service wsgate does not select the gateway's pods")
	}
	for _, p := range svc.Spec.Ports {
		got := strconv.Itoa(c.portOf(t, p.TargetPort))
		if got != port(t, cfg.Gateway.Listen) && (cfg.Gateway.TLS.Listen == "" || got != port(t, cfg.Gateway.TLS.Listen)) {
			t.Errorf("Service wsgate sends to port %s; gateway.listen is %s, gateway.tls.listen %q", got, cfg.Gateway.Listen, cfg.Gateway.TLS.Listen)
		}
	}

	// Stopping: preStop, then SIGTERM's drain, all within the grace period.
	pre := 0
	if c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds <= 0 {
		t.Errorf("Deployment wsgate: want a preStop sleep before SIGTERM starts the drain")
	} else {
		pre = c.Lifecycle.PreStop.Sleep.Seconds
	}
	need := time.Duration(pre)*time.Second + cfg.Gateway.DrainTimeout.Duration
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v must exceed preStop %ds + drain_timeout %s", grace, pre, cfg.Gateway.DrainTimeout)
	}
	if d.stopSignal != "SIGTERM" {
		t.Errorf("the image's stop signal %q does not drain", d.stopSignal)
	}
	pdb := objs.get(t, "PodDisruptionBudget", "wsgate")
	if !selects(pdb.Spec.Selector, dep.Spec.Template.Metadata.Labels) || pdb.Spec.MinAvailable == nil && pdb.Spec.MaxUnavailable == nil {
		t.Errorf("PodDisruptionBudget wsgate does not cover the gateway's pods")
	}

	// Plugins where the image has them.
	pluginPaths(t, d, cfg)
	return g
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkRelayManifests checks the relays' Deployment, headless Service and
// budget, and that the gateway's pool finds the relay pods by the
// Service's name at the relay's -listen port. It returns the relay
// container.
func checkRelayManifests(t *testing.T, objs k8s, d *dockerfile, gatewayConfig string) *container {
	t.Helper()
	for key := range objs {
		if strings.HasPrefix(key, "StatefulSet/") {
			t.Errorf("%s: the relays are a Deployment, found by DNS; nothing needs stable pod names", key)
		}
	}
	dep := objs.get(t, "Deployment", "relay")
	cfg := loadConfig(t, "ConfigMap wsgate", gatewayConfig)
	disc := cfg.Pools[0].Discovery
	if disc.Kind != "dns" || len(cfg.Pools[0].Nodes) != 0 {
		t.Fatalf("ConfigMap wsgate: pool %s has kind %q and %d listed nodes: want its nodes from [pools.discovery] kind = \"dns\"", cfg.Pools[0].Name, disc.Kind, len(cfg.Pools[0].Nodes))
	}
	// The short name, resolved under the pod's namespace by the search
	// path of its resolv.conf (see the ConfigMap's comment).
	svc := objs.get(t, "Service", disc.Name)
	if svc.Spec.ClusterIP != "None" {
		t.Errorf("Service %s is not headless: its name answers one virtual IP, not the relay pods", svc.Metadata.Name)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: without publishNotReadyAddresses a relay failing its readiness probe leaves DNS and the gateway drains its tunnels", svc.Metadata.Name)
	}
	if !selects(svc.Spec.Selector, dep.Spec.Template.Metadata.Labels) {
		t.Errorf("Service %s does not select the relay pods", svc.Metadata.Name)
	}
	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment relay: %d containers, want 1", len(dep.Spec.Template.Spec.Containers))
	}
	c := &dep.Spec.Template.Spec.Containers[0]
	cmd := c.command(d)
	if d.image[cmd[0]] != "pkg:./relay-backend" {
		t.Fatalf("Deployment relay runs %q, not the image's relay-backend", cmd[0])
	}
	listen, ok := flagValue(cmd, "listen")
	if !ok {
		t.Fatalf("relay: no -listen (the default is loopback only)")
	}
	for _, p := range svc.Spec.Ports {
		if got := c.portOf(t, p.TargetPort); strconv.Itoa(got) != port(t, listen) {
			t.Errorf("Service %s sends to %d; relay -listen is %s", svc.Metadata.Name, got, listen)
		}
		if strconv.Itoa(p.Port) != port(t, listen) {
			t.Errorf("Service %s port %d is not the relay's -listen port %s: its SRV records would name another port than the one A records are dialed at", svc.Metadata.Name, p.Port, listen)
		}
	}
	// A records carry no port: the pool's port is the one the pods listen on.
	if strconv.Itoa(disc.Port) != port(t, listen) {
		t.Errorf("the gateway's discovery port %d is not the relay's -listen port %s", disc.Port, listen)
	}
	if pr := c.ReadinessProbe; pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/healthz" || strconv.Itoa(c.portOf(t, pr.HTTPGet.Port)) != port(t, listen) {
		t.Errorf("relay: readinessProbe must GET /healthz on the -listen port")
	}
	window, _ := flagValue(cmd, "drain-window")
	w, err := time.ParseDuration(window)
	if err != nil {
		t.Fatalf("relay -drain-window %q: %v", window, err)
	}
	if grace := time.Duration(dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second; grace <= w+10*time.Second {
		t.Errorf("relay terminationGracePeriodSeconds %v must exceed -drain-window %v + 10s", grace, w)
	}
	pdb := objs.get(t, "PodDisruptionBudget", "relay")
	if !selects(pdb.Spec.Selector, dep.Spec.Template.Metadata.Labels) {
		t.Errorf("PodDisruptionBudget relay does not cover the relay pods")
	}
	if u, ok := flagValue(cmd, "redis"); ok {
		host, _, _ := strings.Cut(strings.TrimPrefix(u, "redis://"), ":")
		objs.get(t, "Service", host)
	}
	return c
}

// TestKubernetes checks the manifests against the binaries and runs them
// on loopback: the relay container's command line (against a real Redis)
// until its readiness probe passes, the gateway's command line with the
// ConfigMap's config through wsgate -check and then for real, finding the
// relays by DNS, its probes answered, and SIGTERM (what the kubelet sends
// after preStop) making /readyz answer 503 while a client still connected
// is closed with 1001, then an exit 0.
//
// DNS: the test's copy of the config adds a resolver key naming a DNS
// server on loopback that the test controls (internal/discovery/dnstest),
// which answers the Service's name with the relay pods' addresses, as a
// cluster's DNS answers a headless Service; the relays listen on that
// address's loopback IPs at one port, the config's discovery port
// replaced by it. Scaling is then a change of the answer, as
// `kubectl scale deployment relay` changes the Service's records: the
// gateway takes the second relay with no change to its config.
func TestKubernetes(t *testing.T) {
	d := readDockerfile(t)
	objs := readKubernetes(t)
	g := checkGatewayManifests(t, objs, d)
	rc := checkRelayManifests(t, objs, d, g.configText)

	rd := redistest.Start(t)
	relayAddr := testproc.FreeAddr(t)
	relayPort := port(t, relayAddr)
	relayArgs := rc.command(d)[1:]
	relayArgs = withFlag(t, withFlag(t, relayArgs, "listen", relayAddr), "redis", rd.URL())
	startRelay(t, "relay", relayAddr, relayArgs)

	cfg := loadConfig(t, "ConfigMap wsgate", g.configText)
	disc := cfg.Pools[0].Discovery
	dns := dnstest.Start(t)
	dns.SetA(disc.Name, "127.0.0.1")
	gw, wss, admin := testproc.FreeAddr(t), testproc.FreeAddr(t), testproc.FreeAddr(t)
	// The TLS Secret's files: a certificate of a throwaway CA.
	ca, err := testca.New("deploy test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := leaf.WriteFiles(t.TempDir(), "tls")
	if err != nil {
		t.Fatal(err)
	}
	text := replaceOnce(t, g.configText,
		fmt.Sprintf("listen = %q", cfg.Gateway.Listen), fmt.Sprintf("listen = %q", gw),
		fmt.Sprintf("listen = %q", cfg.Gateway.TLS.Listen), fmt.Sprintf("listen = %q", wss),
		fmt.Sprintf("cert_file = %q", cfg.Gateway.TLS.Certificates[0].CertFile), fmt.Sprintf("cert_file = %q", certFile),
		fmt.Sprintf("key_file = %q", cfg.Gateway.TLS.Certificates[0].KeyFile), fmt.Sprintf("key_file = %q", keyFile),
		fmt.Sprintf("listen = %q", cfg.Admin.Listen), fmt.Sprintf("listen = %q", admin),
		// A short window: the test waits through it.
		fmt.Sprintf("drain_window = %q", cfg.Gateway.DrainWindow.String()), `drain_window = "1s"`,
		// The relays' port here, the test's DNS server, and a short
		// interval: the test waits for the second relay to be found.
		fmt.Sprintf("port = %d", disc.Port), fmt.Sprintf("port = %s\nresolver = %q\ninterval = \"500ms\"", relayPort, dns.Addr))
	text = replaceOnce(t, text, pluginPaths(t, d, cfg)...)
	args := withFlag(t, g.c.command(d)[1:], "config", writeTemp(t, "wsgate.toml", text))
	wsgateCheck(t, args)
	p := startGateway(t, admin, args)
	for _, pr := range []*probe{g.c.ReadinessProbe, g.c.LivenessProbe} {
		if code := get(t, "http://"+admin+pr.HTTPGet.Path); code != http.StatusOK {
			t.Fatalf("probe %s: %d", pr.HTTPGet.Path, code)
		}
	}
	waitNodesUp(t, admin, 1)
	// What Prometheus scrapes (deploy/prometheus/wsgate.yml): /metrics
	// on the admin port, with the token and only with it.
	if code := get(t, "http://"+admin+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics with the token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Scale to two: a second relay pod at another address, the same port.
	second := net.JoinHostPort("127.0.0.2", relayPort)
	startRelay(t, "relay-2", second, withFlag(t, relayArgs, "listen", second))
	dns.SetA(disc.Name, "127.0.0.1", "127.0.0.2")
	waitNodesUp(t, admin, 2)
	// A wss:// client, through the listener of the TLS Secret.
	tlsDialer := &websocket.Dialer{HandshakeTimeout: 5 * time.Second, TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}}
	wssConn, _, err := tlsDialer.Dial("wss://"+wss+"/room/k8s", http.Header{"Authorization": {"Bearer " + clientToken(t)}})
	if err != nil {
		t.Fatalf("wss:// client: %v", err)
	}
	wssConn.Close()
	waitNodes(t, admin, "the wss:// tunnel closed", func(v *nodesStatus) bool { return v.Tunnels == 0 })
	ws, _, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial("ws://"+gw+"/room/k8s", http.Header{"Authorization": {"Bearer " + clientToken(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	// The client's 101 may come before the gateway holds the tunnel: wait
	// until it does, so the drain has it to close.
	waitNodes(t, admin, "one tunnel", func(v *nodesStatus) bool { return v.Tunnels == 1 })

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The client does not read yet, so its close handshake, and the drain,
	// last until it does: /readyz must say 503 meanwhile.
	testproc.WaitHTTP(t, "http://"+admin+g.c.ReadinessProbe.HTTPGet.Path, http.StatusServiceUnavailable, 10*time.Second)
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = ws.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Fatalf("client read %v, want close 1001", err)
	}
	if code, err := p.Wait(20 * time.Second); code != 0 || err != nil {
		t.Fatalf("wsgate after SIGTERM: exit %d, %v", code, err)
	}
}
