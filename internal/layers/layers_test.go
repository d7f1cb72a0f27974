package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/jaild/jaild/"

// layers are the package doc's, top to bottom; a name ending in "/..."
// matches the packages under it.
var layers = []struct {
	name string
	pkgs []string
}{
	{"front end", []string{"cmd/...", "server", "client", "route", "internal/command",
		"internal/inithook", "internal/testdaemon", "internal/testenv", "scripts/...", "deploy/..."}},
	{"run", []string{"run"}},
	{"policy", []string{"policy", "egress"}},
	{"session", []string{"session", "session/files"}},
	{"jail", []string{"jail", "internal/worker"}},
	{"host", []string{"rootfs", "cgroup", "fdstore"}},
	{"leaf", []string{"box", "api", "caller", "internal/fdpass", "internal/pidfile",
		"internal/sibling", "internal/benchstat", "internal/doclinks", "internal/layers"}},
}

// only are the packages that import no more of jaild than the packages
// listed.
var only = map[string][]string{
	"box":    {},
	"api":    {"box"},
	"client": {"api", "box"},
	"route":  {"api", "box"},
	"caller": {},
}

// layerOf returns the index in layers of pkg (a path in the module), or an
// error if no layer or more than one holds it.
func layerOf(pkg string) (int, error) {
	found := -1
	for i, l := range layers {
		for _, p := range l.pkgs {
			dir, tree := strings.CutSuffix(p, "/...")
			if pkg != dir && !(tree && strings.HasPrefix(pkg, dir+"/")) {
				continue
			}
			if found >= 0 {
				return 0, fmt.Errorf("%s is in the layers %s and %s", pkg, layers[found].name, l.name)
			}
			found = i
		}
	}
	if found < 0 {
		return 0, fmt.Errorf("%s is in no layer: place it in one (internal/layers)", pkg)
	}
	return found, nil
}

// check returns every break of the rules in graph, which maps each package
// of the module (paths in it) to the packages of the module it imports.
func check(graph map[string][]string) []error {
	var errs []error
	for _, pkg := range sortedKeys(graph) {
		from, err := layerOf(pkg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		allowed, narrow := only[pkg]
		for _, imp := range graph[pkg] {
			to, err := layerOf(imp)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if to < from {
				errs = append(errs, fmt.Errorf("%s (layer %s) imports %s, of the layer %s above it",
					pkg, layers[from].name, imp, layers[to].name))
			}
			if narrow && !slices.Contains(allowed, imp) {
				errs = append(errs, fmt.Errorf("%s imports %s: of jaild it may import only %v", pkg, imp, allowed))
			}
		}
	}
	return errs
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// moduleGraph lists the module's packages with go list under tags and
// returns what check takes.
func moduleGraph(t *testing.T, tags string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-tags", tags, "-json=ImportPath,Imports,Error", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -tags %q: %v\n%s", tags, err, stderr.Bytes())
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list -tags %q: %v", tags, err)
		}
		if p.Error != nil {
			t.Fatalf("go list -tags %q: %s: %s", tags, p.ImportPath, p.Error.Err)
		}
		pkg, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok {
			continue
		}
		graph[pkg] = []string{}
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				graph[pkg] = append(graph[pkg], rel)
			}
		}
	}
	// A pattern that matched too little would pass any rule.
	for _, want := range []string{"cmd/jaild-server", "server", "run", "policy", "session", "jail", "box", "api"} {
		if _, ok := graph[want]; !ok {
			t.Fatalf("go list -tags %q listed no %s", tags, want)
		}
	}
	return graph
}

func TestImportGraph(t *testing.T) {
	for _, tags := range []string{"", "seccomp"} {
		graph := moduleGraph(t, tags)
		for _, err := range check(graph) {
			t.Errorf("tags %q: %v", tags, err)
		}
	}
}

// TestCheck: each rule is held, on graphs that break one each.
func TestCheck(t *testing.T) {
	ok := map[string][]string{
		"server":  {"run", "jail", "api"},
		"run":     {"policy", "session", "jail", "box"},
		"session": {"jail"},
		"jail":    {"rootfs", "cgroup", "box"},
		"api":     {"box"},
		"box":     {},
	}
	if errs := check(ok); len(errs) > 0 {
		t.Fatalf("a graph within the rules: %v", errs)
	}
	for _, tt := range []struct {
		name    string
		pkg     string
		imports []string
		want    string
	}{
		{"jail imports run", "jail", []string{"run"}, "jail (layer jail) imports run, of the layer run above it"},
		{"session imports policy", "session", []string{"policy"}, "session (layer session) imports policy, of the layer policy above it"},
		{"policy imports server", "policy", []string{"server"}, "policy (layer policy) imports server, of the layer front end above it"},
		{"api imports jail", "api", []string{"box", "jail"}, "api imports jail: of jaild it may import only [box]"},
		{"box imports api", "box", []string{"api"}, "box imports api: of jaild it may import only []"},
		{"client imports run", "client", []string{"api", "run"}, "client imports run"},
		{"a package in no layer", "newpkg", nil, "newpkg is in no layer"},
		{"an import in no layer", "server", []string{"newpkg"}, "newpkg is in no layer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := map[string][]string{}
			for k, v := range ok {
				g[k] = v
			}
			g[tt.pkg] = tt.imports
			errs := check(g)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.want) }) {
				t.Errorf("check = %v, want an error with %q", errs, tt.want)
			}
		})
	}
}
