package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestImageName pins one name for the wsgate image across the README, the
// Dockerfile's header, docs/operations.md, the compose file and the
// Kubernetes manifests (issue 19 item 5: the README built "wsgate",
// compose ran "wsgate:local" and Kubernetes "wsgate:latest"), and one
// Redis image across compose and Kubernetes.
func TestImageName(t *testing.T) {
	names := map[string][]string{} // name -> where
	add := func(name, where string) { names[name] = append(names[name], where) }

	// Commands in prose: `docker build -t NAME`, `kind load docker-image NAME`.
	build := regexp.MustCompile("docker build -t\\s+([^\\s`]+)")
	load := regexp.MustCompile("kind load docker-image\\s+([^\\s`]+)")
	for _, f := range []string{"README.md", "Dockerfile", "docs/operations.md", "deploy/kubernetes/gateway.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		// Markdown wraps a command across lines: read it as one line.
		text := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "#", " ")), " ")
		n := 0
		for _, re := range []*regexp.Regexp{build, load} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				add(m[1], f)
				n++
			}
		}
		if n == 0 && f != "deploy/kubernetes/gateway.yaml" {
			t.Errorf("%s: no `docker build -t NAME`: say which name the image is built under", f)
		}
	}
	// The Dockerfile header's `docker run ... NAME` (last word of the command).
	d, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?s)#\s+docker run (.*?[^\\])\n`).FindStringSubmatch(string(d)); m != nil {
		f := strings.Fields(m[1])
		add(f[len(f)-1], "Dockerfile docker run")
	} else {
		t.Errorf("Dockerfile: no `docker run` example in the header")
	}

	// Compose: every service built from the Dockerfile.
	files := readYAML[struct {
		Services map[string]composeService `yaml:"services"`
	}](t, "docker-compose.yml")
	redis := map[string][]string{}
	for name, s := range files[0].Services {
		if s.Build["dockerfile"] == "Dockerfile" {
			add(s.Image, "docker-compose.yml "+name)
		} else {
			redis[s.Image] = append(redis[s.Image], "docker-compose.yml "+name)
		}
	}
	// Kubernetes: every container of every Deployment.
	for _, doc := range readTyped(t) {
		dep, ok := doc.obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		for _, c := range dep.Spec.Template.Spec.Containers {
			if strings.HasPrefix(c.Image, "redis:") {
				redis[c.Image] = append(redis[c.Image], "Deployment "+doc.name)
			} else {
				add(c.Image, "Deployment "+doc.name)
			}
		}
	}
	if len(names) != 1 {
		t.Errorf("the wsgate image goes by %d names, want one: %v", len(names), names)
	}
	for n := range names {
		if !strings.Contains(n, ":") {
			t.Errorf("image %q has no tag: name it as compose and Kubernetes pull it", n)
		}
	}
	if len(redis) != 1 {
		t.Errorf("Redis runs from %d images, want one: %v", len(redis), redis)
	}
}
