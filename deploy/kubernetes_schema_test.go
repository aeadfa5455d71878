package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	psaapi "k8s.io/pod-security-admission/api"
	psa "k8s.io/pod-security-admission/policy"
	sigsyaml "sigs.k8s.io/yaml"
)

// typedDoc is one document of a manifest decoded into its k8s.io/api type.
type typedDoc struct {
	where string // file and document number, for messages
	kind  string
	name  string
	obj   any
}

// docSeparator splits a YAML stream into its documents.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// newTyped returns a new object of the k8s.io/api type of apiVersion and
// kind, or nil for a kind the manifests are not expected to hold.
func newTyped(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Service":
		return &corev1.Service{}
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	}
	return nil
}

// readTyped decodes every document of deploy/kubernetes/*.yaml into its
// k8s.io/api type, refusing unknown and duplicate fields
// (sigs.k8s.io/yaml's UnmarshalStrict: a misspelt or misplaced key, which
// the API server would drop or refuse, fails here).
func readTyped(t *testing.T) []typedDoc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var docs []typedDoc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, text := range docSeparator.Split(string(b), -1) {
			where := fmt.Sprintf("%s document %d", f, i+1)
			j, err := sigsyaml.YAMLToJSON([]byte(text))
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
				continue // comments only
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(j, &meta); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			obj := newTyped(meta.APIVersion, meta.Kind)
			if obj == nil {
				t.Fatalf("%s: %s %s: not a kind this test knows; add its k8s.io/api type to newTyped", where, meta.APIVersion, meta.Kind)
			}
			if err := sigsyaml.UnmarshalStrict([]byte(text), obj); err != nil {
				t.Errorf("%s (%s %s): %v", where, meta.Kind, meta.Metadata.Name, err)
				continue
			}
			docs = append(docs, typedDoc{where: where, kind: meta.Kind, name: meta.Metadata.Name, obj: obj})
		}
	}
	return docs
}

// typed returns the object of kind and name.
func typed[T any](t *testing.T, docs []typedDoc, kind, name string) T {
	t.Helper()
	for _, d := range docs {
		if d.kind == kind && d.name == name {
			return d.obj.(T)
		}
	}
	var zero T
	t.Fatalf("no %s %s in deploy/kubernetes", kind, name)
	return zero
}

// safeSysctls are the sysctls Pod Security's baseline (and so restricted)
// level allows: namespaced ones that cannot affect other pods.
var safeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
}

// restrictedVolumes are the volume types Pod Security's restricted level
// allows.
func restrictedVolume(v corev1.Volume) bool {
	s := v.VolumeSource
	return s.ConfigMap != nil || s.CSI != nil || s.DownwardAPI != nil || s.EmptyDir != nil ||
		s.Ephemeral != nil || s.PersistentVolumeClaim != nil || s.Projected != nil || s.Secret != nil
}

// podSecurityRestricted lists how a pod breaks the Pod Security Standards'
// "restricted" level (which includes "baseline"), as the admission
// controller in enforce mode would judge it, plus this project's own rules
// for every container: a read-only root file system and CPU and memory
// requests and limits.
func podSecurityRestricted(meta map[string]string, spec *corev1.PodSpec) []string {
	var bad []string
	add := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		add("host namespaces: hostNetwork %v, hostPID %v, hostIPC %v", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	if spec.HostUsers != nil && !*spec.HostUsers {
		// user namespaces relax the run-as-non-root rules; none is used here
		add("hostUsers: false is not expected by these checks")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			add("volume %s: hostPath", v.Name)
		} else if !restrictedVolume(v) {
			add("volume %s: a type restricted does not allow", v.Name)
		}
	}
	for _, s := range psc.Sysctls {
		if !slices.Contains(safeSysctls, s.Name) {
			add("sysctl %s: not one of the safe sysctls", s.Name)
		}
	}
	if psc.WindowsOptions != nil && psc.WindowsOptions.HostProcess != nil && *psc.WindowsOptions.HostProcess {
		add("pod: windows hostProcess")
	}
	checkSELinux := func(who string, o *corev1.SELinuxOptions) {
		if o == nil {
			return
		}
		if o.User != "" || o.Role != "" {
			add("%s: seLinuxOptions user or role set", who)
		}
		if o.Type != "" && !slices.Contains([]string{"container_t", "container_init_t", "container_kvm_t", "container_engine_t"}, o.Type) {
			add("%s: seLinuxOptions type %s", who, o.Type)
		}
	}
	checkSELinux("pod", psc.SELinuxOptions)
	appArmorOK := func(p *corev1.AppArmorProfile) bool {
		return p == nil || p.Type == corev1.AppArmorProfileTypeRuntimeDefault || p.Type == corev1.AppArmorProfileTypeLocalhost
	}
	if !appArmorOK(psc.AppArmorProfile) {
		add("pod: appArmorProfile %s", psc.AppArmorProfile.Type)
	}
	for k, v := range meta {
		if strings.HasPrefix(k, "container.apparmor.security.beta.kubernetes.io/") && v != "runtime/default" && !strings.HasPrefix(v, "localhost/") {
			add("annotation %s: %s", k, v)
		}
	}
	podSeccomp := psc.SeccompProfile
	if podSeccomp != nil && podSeccomp.Type == corev1.SeccompProfileTypeUnconfined {
		add("pod: seccompProfile Unconfined")
	}
	podNonRoot := psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	if psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		add("pod: runAsUser 0")
	}

	var all []corev1.Container
	all = append(append(all, spec.InitContainers...), spec.Containers...)
	for _, e := range spec.EphemeralContainers {
		all = append(all, corev1.Container(e.EphemeralContainerCommon))
	}
	for _, c := range all {
		who := "container " + c.Name
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if sc.Privileged != nil && *sc.Privileged {
			add("%s: privileged", who)
		}
		if sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess {
			add("%s: windows hostProcess", who)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				add("%s: hostPort %d", who, p.HostPort)
			}
		}
		checkSELinux(who, sc.SELinuxOptions)
		if !appArmorOK(sc.AppArmorProfile) {
			add("%s: appArmorProfile %s", who, sc.AppArmorProfile.Type)
		}
		if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			add("%s: procMount %s", who, *sc.ProcMount)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			add("%s: allowPrivilegeEscalation is not false", who)
		}
		switch {
		case sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot:
			add("%s: runAsNonRoot false", who)
		case sc.RunAsNonRoot == nil && !podNonRoot:
			add("%s: runAsNonRoot is not true (pod or container)", who)
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			add("%s: runAsUser 0", who)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = podSeccomp
		}
		if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
			add("%s: seccompProfile is not RuntimeDefault or Localhost (pod or container)", who)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			add("%s: capabilities do not drop ALL", who)
		}
		if sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				if c != "NET_BIND_SERVICE" {
					add("%s: adds capability %s", who, c)
				}
			}
		}
		// This project's rules.
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			add("%s: readOnlyRootFilesystem is not true", who)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, okReq := c.Resources.Requests[r]
			lim, okLim := c.Resources.Limits[r]
			if !okReq || !okLim {
				add("%s: no %s request and limit", who, r)
			} else if req.Cmp(lim) > 0 {
				add("%s: %s request %s above its limit %s", who, r, req.String(), lim.String())
			}
		}
	}
	return bad
}

// admissionRestricted evaluates a pod as the Pod Security admission
// controller does for a namespace labelled
// pod-security.kubernetes.io/enforce=restricted (its own checks, from
// k8s.io/pod-security-admission, at the latest version), and returns
// what it forbids.
func admissionRestricted(t *testing.T, meta *metav1.ObjectMeta, spec *corev1.PodSpec) []string {
	t.Helper()
	ev, err := psa.NewEvaluator(psa.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for _, r := range ev.EvaluatePod(lv, meta, spec) {
		if !r.Allowed {
			bad = append(bad, fmt.Sprintf("%s (%s)", r.ForbiddenReason, r.ForbiddenDetail))
		}
	}
	return bad
}

// TestKubernetesSchema decodes every manifest into its k8s.io/api type
// with unknown fields refused, and holds every pod to Pod Security
// "restricted" and the production rules of issue 19 item 5 (before it:
// no resources, no seccomp profile, Redis running as root with a writable
// root, no liveness probe on the relays, a ClusterIP Service no client
// outside the cluster could reach, no sysctl, no topology spread, no TLS).
func TestKubernetesSchema(t *testing.T) {
	docs := readTyped(t)
	pods := 0
	for _, d := range docs {
		dep, ok := d.obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		pods++
		tmpl := &dep.Spec.Template
		for _, v := range podSecurityRestricted(tmpl.Annotations, &tmpl.Spec) {
			t.Errorf("Deployment %s: %s", d.name, v)
		}
		for _, v := range admissionRestricted(t, &tmpl.ObjectMeta, &tmpl.Spec) {
			t.Errorf("Deployment %s: Pod Security admission, restricted: %s", d.name, v)
		}
		// Every container that serves has probes; the relays and the
		// gateway both kinds.
		for _, c := range tmpl.Spec.Containers {
			if c.ReadinessProbe == nil {
				t.Errorf("Deployment %s container %s: no readinessProbe", d.name, c.Name)
			}
			if c.LivenessProbe == nil {
				t.Errorf("Deployment %s container %s: no livenessProbe", d.name, c.Name)
			}
		}
		// Every writable path is a volume, with a size limit when in memory
		// or on the node's disk.
		for _, v := range tmpl.Spec.Volumes {
			if v.EmptyDir != nil && v.EmptyDir.SizeLimit == nil {
				t.Errorf("Deployment %s: emptyDir %s has no sizeLimit", d.name, v.Name)
			}
		}
		if sel := dep.Spec.Selector; sel == nil || !labelsMatch(sel.MatchLabels, tmpl.Labels) {
			t.Errorf("Deployment %s: its selector does not select its pods", d.name)
		}
	}
	if pods != 3 {
		t.Errorf("%d Deployments, want the gateway, the relays and Redis", pods)
	}

	// Gateways and relays spread over nodes and zones.
	for _, name := range []string{"wsgate", "relay"} {
		dep := typed[*appsv1.Deployment](t, docs, "Deployment", name)
		keys := map[string]bool{}
		for _, c := range dep.Spec.Template.Spec.TopologySpreadConstraints {
			if c.LabelSelector == nil || !labelsMatch(c.LabelSelector.MatchLabels, dep.Spec.Template.Labels) {
				t.Errorf("Deployment %s: topology spread on %s does not count its own pods", name, c.TopologyKey)
			}
			keys[c.TopologyKey] = true
		}
		if !keys["kubernetes.io/hostname"] || !keys["topology.kubernetes.io/zone"] {
			t.Errorf("Deployment %s: topology spread over %v, want nodes and zones", name, keys)
		}
	}

	// The wsgate image's pods run as the image's own user.
	d := readDockerfile(t)
	for _, name := range []string{"wsgate", "relay"} {
		sc := typed[*appsv1.Deployment](t, docs, "Deployment", name).Spec.Template.Spec.SecurityContext
		if uid, _, _ := strings.Cut(d.user, ":"); sc == nil || sc.RunAsUser == nil || strconv.FormatInt(*sc.RunAsUser, 10) != uid {
			t.Errorf("Deployment %s: runAsUser is not the image's USER %s", name, d.user)
		}
	}

	gw := typed[*appsv1.Deployment](t, docs, "Deployment", "wsgate")
	pod := gw.Spec.Template.Spec
	c := pod.Containers[0]
	cm := typed[*corev1.ConfigMap](t, docs, "ConfigMap", "wsgate")
	cfg := loadConfig(t, "ConfigMap wsgate", cm.Data["wsgate.toml"])

	// The ephemeral port range of the gateway's pod: wider than the
	// default, and above every port the pod listens on.
	var portRange string
	for _, s := range pod.SecurityContext.Sysctls {
		if s.Name == "net.ipv4.ip_local_port_range" {
			portRange = s.Value
		}
	}
	f := strings.Fields(portRange)
	if len(f) != 2 {
		t.Errorf("Deployment wsgate: no net.ipv4.ip_local_port_range pod sysctl (%q)", portRange)
	} else {
		lo, err1 := strconv.Atoi(f[0])
		hi, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil || hi > 65535 || hi-lo <= 60999-32768 {
			t.Errorf("Deployment wsgate: ip_local_port_range %q is not wider than the default 32768 60999", portRange)
		}
		for _, p := range c.Ports {
			if int(p.ContainerPort) >= lo {
				t.Errorf("Deployment wsgate: port %s %d is inside ip_local_port_range %q", p.Name, p.ContainerPort, portRange)
			}
		}
	}

	// Clients outside the cluster: a load balancer that keeps their
	// address, to the plain and the TLS listener.
	svc := typed[*corev1.Service](t, docs, "Service", "wsgate")
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		t.Errorf("Service wsgate: type %q, externalTrafficPolicy %q; want LoadBalancer and Local", svc.Spec.Type, svc.Spec.ExternalTrafficPolicy)
	}
	targets := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		targets[strconv.Itoa(int(containerPort(t, c, p.TargetPort)))] = true
	}
	for _, a := range []string{cfg.Gateway.Listen, cfg.Gateway.TLS.Listen} {
		if a == "" || !targets[port(t, a)] {
			t.Errorf("Service wsgate does not reach the listener %q (targets %v)", a, targets)
		}
	}

	// The TLS files: in a Secret of type kubernetes.io/tls's keys,
	// mounted whole (a subPath mount is never updated, so a renewed
	// certificate would never be seen).
	if len(cfg.Gateway.TLS.Certificates) == 0 {
		t.Fatalf("ConfigMap wsgate: no TLS certificate")
	}
	for _, cert := range cfg.Gateway.TLS.Certificates {
		for _, file := range []string{cert.CertFile, cert.KeyFile} {
			v, m := volumeOf(pod, c, file)
			if v == nil || v.Secret == nil {
				t.Errorf("Deployment wsgate: TLS file %s is not in a Secret volume", file)
				continue
			}
			if m.SubPath != "" || !m.ReadOnly {
				t.Errorf("Deployment wsgate: TLS mount %s: subPath %q, readOnly %v; want the whole Secret, read-only", m.MountPath, m.SubPath, m.ReadOnly)
			}
			if b := filepath.Base(file); b != corev1.TLSCertKey && b != corev1.TLSPrivateKeyKey {
				t.Errorf("Deployment wsgate: TLS file %s is not a kubernetes.io/tls Secret's key (%s, %s)", file, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
			}
		}
	}
	// The plugins' sockets: the temporary directory is writable.
	if v, _ := volumeOf(pod, c, "/tmp/plugin1234"); v == nil || v.EmptyDir == nil {
		t.Errorf("Deployment wsgate: /tmp is not an emptyDir; go-plugin cannot make its sockets on a read-only root")
	}

	// Redis's data directory is a volume (the root is read-only).
	rd := typed[*appsv1.Deployment](t, docs, "Deployment", "redis")
	if v, _ := volumeOf(rd.Spec.Template.Spec, rd.Spec.Template.Spec.Containers[0], "/data/dump.rdb"); v == nil {
		t.Errorf("Deployment redis: /data is not a volume")
	}
}

// labelsMatch reports whether every label of sel is in labels.
func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// containerPort resolves a Service's target port in a container.
func containerPort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %s", c.Name, p.StrVal)
	return 0
}

// volumeOf returns the volume, and its mount in c, under which file lies.
func volumeOf(pod corev1.PodSpec, c corev1.Container, file string) (*corev1.Volume, *corev1.VolumeMount) {
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if !strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for j := range pod.Volumes {
			if pod.Volumes[j].Name == m.Name {
				return &pod.Volumes[j], m
			}
		}
	}
	return nil, nil
}

// TestPodSecurityRestrictedRules pins that podSecurityRestricted sees each
// breach of the restricted level it checks, so TestKubernetesSchema's
// silence means something: the gateway's pod passes, and each change
// below is reported, by the admission controller's own checks too where
// the rule is Pod Security's.
func TestPodSecurityRestrictedRules(t *testing.T) {
	gw := typed[*appsv1.Deployment](t, readTyped(t), "Deployment", "wsgate")
	if bad := podSecurityRestricted(nil, &gw.Spec.Template.Spec); len(bad) != 0 {
		t.Fatalf("the shipped gateway pod: %v", bad)
	}
	yes, no, root := true, false, int64(0)
	for name, breach := range map[string]func(*corev1.PodSpec){
		"hostNetwork": func(s *corev1.PodSpec) { s.HostNetwork = true },
		"hostPath": func(s *corev1.PodSpec) {
			s.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		},
		"unsafe sysctl":     func(s *corev1.PodSpec) { s.SecurityContext.Sysctls[0].Name = "net.core.somaxconn" },
		"privileged":        func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.Privileged = &yes },
		"escalation":        func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil },
		"root":              func(s *corev1.PodSpec) { s.SecurityContext.RunAsUser = &root },
		"runAsNonRoot":      func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.RunAsNonRoot = &no },
		"no seccomp":        func(s *corev1.PodSpec) { s.SecurityContext.SeccompProfile = nil },
		"capabilities kept": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.Capabilities.Drop = nil },
		"capability added": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		},
		"hostPort":      func(s *corev1.PodSpec) { s.Containers[0].Ports[0].HostPort = 8080 },
		"writable root": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.ReadOnlyRootFilesystem = &no },
		"no limits":     func(s *corev1.PodSpec) { s.Containers[0].Resources.Limits = nil },
		"init container": func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init", SecurityContext: &corev1.SecurityContext{}}}
		},
	} {
		spec := gw.DeepCopy().Spec.Template.Spec
		breach(&spec)
		if bad := podSecurityRestricted(nil, &spec); len(bad) == 0 {
			t.Errorf("%s: not reported", name)
		}
		// The admission controller's own checks agree, but for this
		// project's rules, which are not Pod Security's.
		projectRule := name == "writable root" || name == "no limits"
		if bad := admissionRestricted(t, &metav1.ObjectMeta{}, &spec); (len(bad) == 0) != projectRule {
			t.Errorf("%s: the Pod Security admission checks say %q", name, bad)
		}
	}
}

// scrapeJob is what deploy/prometheus/wsgate.yml may hold of a Prometheus
// scrape job: a key outside it fails the decoding.
type scrapeJob struct {
	JobName       string `yaml:"job_name"`
	MetricsPath   string `yaml:"metrics_path"`
	Authorization struct {
		Type            string `yaml:"type"`
		CredentialsFile string `yaml:"credentials_file"`
	} `yaml:"authorization"`
	KubernetesSDConfigs []struct {
		Role string `yaml:"role"`
	} `yaml:"kubernetes_sd_configs"`
	RelabelConfigs []struct {
		SourceLabels []string `yaml:"source_labels"`
		Regex        string   `yaml:"regex"`
		Action       string   `yaml:"action"`
		TargetLabel  string   `yaml:"target_label"`
	} `yaml:"relabel_configs"`
}

// TestPrometheusScrape checks the scrape job against the manifests (issue
// 19 item 5: nothing told Prometheus where the gateways' metrics are):
// it finds pods, keeps exactly the gateway pods' admin port (its keep
// rule, applied as Prometheus does to the label values joined by ";",
// matches the gateway's pod label and admin port name, and neither the
// relays' nor the gateway's client port), sends the admin token from the
// key of the Secret the gateway reads it from, and scrapes /metrics.
func TestPrometheusScrape(t *testing.T) {
	f, err := os.Open(filepath.Join("prometheus", "wsgate.yml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var jobs []scrapeJob
	if err := dec.Decode(&jobs); err != nil {
		t.Fatalf("prometheus/wsgate.yml: %v", err)
	}
	if len(jobs) != 1 {
		t.Fatalf("prometheus/wsgate.yml: %d jobs, want 1", len(jobs))
	}
	job := jobs[0]
	if job.MetricsPath != "/metrics" || job.Authorization.CredentialsFile == "" || len(job.KubernetesSDConfigs) != 1 || job.KubernetesSDConfigs[0].Role != "pod" {
		t.Errorf("scrape job: metrics_path %q, credentials_file %q, sd %v; want /metrics with the token, pods found by role pod", job.MetricsPath, job.Authorization.CredentialsFile, job.KubernetesSDConfigs)
	}
	docs := readTyped(t)
	gw := typed[*appsv1.Deployment](t, docs, "Deployment", "wsgate")
	relay := typed[*appsv1.Deployment](t, docs, "Deployment", "relay")
	c := gw.Spec.Template.Spec.Containers[0]
	for _, e := range c.Env {
		if e.Name == "WSGATE_ADMIN_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			if want := "/" + ref.Name + "/" + ref.Key; !strings.HasSuffix(job.Authorization.CredentialsFile, want) {
				t.Errorf("credentials_file %s is not the Secret %s's key %s mounted (…%s)", job.Authorization.CredentialsFile, ref.Name, ref.Key, want)
			}
		}
	}
	// Each target Prometheus would see: a pod's name label and a port name.
	kept := func(labels map[string]string, portName string) bool {
		meta := map[string]string{"__meta_kubernetes_pod_container_port_name": portName}
		for k, v := range labels {
			meta["__meta_kubernetes_pod_label_"+strings.NewReplacer(".", "_", "/", "_", "-", "_").Replace(k)] = v
		}
		for _, r := range job.RelabelConfigs {
			if r.Action != "keep" {
				continue
			}
			var vals []string
			for _, l := range r.SourceLabels {
				vals = append(vals, meta[l])
			}
			if !regexp.MustCompile("^(?:" + r.Regex + ")$").MatchString(strings.Join(vals, ";")) {
				return false
			}
		}
		return true
	}
	for _, p := range c.Ports {
		if got, want := kept(gw.Spec.Template.Labels, p.Name), p.Name == "admin"; got != want {
			t.Errorf("gateway port %s: scraped %v, want %v", p.Name, got, want)
		}
	}
	for _, p := range relay.Spec.Template.Spec.Containers[0].Ports {
		if kept(relay.Spec.Template.Labels, p.Name) {
			t.Errorf("relay port %s is scraped; relays have no /metrics", p.Name)
		}
	}
}
