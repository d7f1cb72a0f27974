package manifests

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// object is the part of a Kubernetes object the checks below read.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Image           string   `yaml:"image"`
					Args            []string `yaml:"args"`
					SecurityContext struct {
						Privileged bool `yaml:"privileged"`
					} `yaml:"securityContext"`
				} `yaml:"containers"`
				Volumes []volume `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type volume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
	} `yaml:"hostPath"`
}

func readObjects(t *testing.T, file string) []object {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var objs []object
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, len(objs)+1, err)
		}
		if o.Kind == "" { // a document of comments only
			continue
		}
		objs = append(objs, o)
	}
	return objs
}

// appVersion reads the chart's appVersion, the image tag the manifests must
// name: a chart bumped without rendering again fails here, without helm.
func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../helm/jaild/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	return c.AppVersion
}

// TestManifests checks the committed jaild.yaml: the objects it holds, all in
// the namespace jaild, which admits privileged pods, and a DaemonSet whose
// pod is what jaild needs on a node. scripts/k8s-test.sh checks that it
// equals a fresh render of the chart.
func TestManifests(t *testing.T) {
	objs := readObjects(t, "jaild.yaml")

	var got []string
	for _, o := range objs {
		got = append(got, o.APIVersion+" "+o.Kind+" "+o.Metadata.Name)
	}
	want := []string{
		"v1 Namespace jaild",
		"v1 Service jaild",
		"v1 Service jaild-peers",
		"apps/v1 DaemonSet jaild",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("objects:\n got %q\nwant %q", got, want)
	}

	for _, o := range objs {
		switch o.Kind {
		case "Namespace":
			if l := o.Metadata.Labels["pod-security.kubernetes.io/enforce"]; l != "privileged" {
				t.Errorf("namespace's PodSecurity enforce label = %q, want privileged (baseline rejects jaild's pods)", l)
			}
		default:
			if o.Metadata.Namespace != "jaild" {
				t.Errorf("%s %s: namespace %q, want jaild", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
			}
		}
		if o.Kind != "DaemonSet" {
			continue
		}
		cs := o.Spec.Template.Spec.Containers
		if len(cs) != 1 {
			t.Fatalf("DaemonSet: %d containers, want 1", len(cs))
		}
		c := cs[0]
		if want := "docker.io/library/jaild:" + appVersion(t); c.Image != want {
			t.Errorf("image %q, want %q (the chart's appVersion: render again)", c.Image, want)
		}
		if !c.SecurityContext.Privileged {
			t.Error("container not privileged")
		}
		if !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--token-file=") }) {
			t.Errorf("args %q: no --token-file", c.Args)
		}
		if !slices.ContainsFunc(o.Spec.Template.Spec.Volumes, func(v volume) bool {
			return v.Name == "state" && v.HostPath != nil && v.HostPath.Path == "/run/jaild"
		}) {
			t.Error("no hostPath state volume at /run/jaild")
		}
	}
}
