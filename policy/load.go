package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// Query is the decision every policy set must make: a boolean, and anything
// but true is a deny.
const Query = "data.sandbox.main.allow"

// commandRoot is where the command packages (sandbox.curl, sandbox.date...)
// are loaded instead of under data.sandbox. The convention's router reads
// data.sandbox[input.command].allow from inside package sandbox.main,
// which OPA v1 rejects as a rego_recursion_error: for input.command ==
// "main" the rule would depend on itself. With the command packages under
// a root of their own, and the router's data.sandbox[...] references
// rewritten to it, main cannot route to itself and the same files load
// unchanged. The name is not an identifier, so no policy can declare it.
const commandRoot = "jaild:commands"

// routerPackage is the package that holds the decision.
var routerPackage = ast.MustParseRef("data.sandbox.main")

// set is one loaded policy set: what a reload swaps in whole.
type set struct {
	revision string
	files    []string
	query    rego.PreparedEvalQuery
	network  rego.PreparedEvalQuery // NetworkQuery
	action   rego.PreparedEvalQuery // ActionQuery
	// explainers are ReasonsQuery and DenyQuery.
	explainers []rego.PreparedEvalQuery
	modules    map[string]*ast.Module // rewritten, for the tester
}

// loadDir parses every .rego file under dir, recursively, rewrites it for
// the convention and prepares the query. Any failure fails the whole set:
// a partly loaded policy could allow what the whole would deny.
//
// A symlinked dir is read where it leads when the load starts, so one load
// reads one target even if the link is retargeted meanwhile.
func loadDir(ctx context.Context, dir string) (*set, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("read policy dir: %w", err)
	}
	files, err := regoFiles(root)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no .rego files under %s", dir)
	}
	h := sha256.New()
	modules := make(map[string]*ast.Module, len(files))
	router := false
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, fmt.Errorf("read policy: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(data))
		h.Write(data)
		m, err := ast.ParseModuleWithOpts(f, string(data), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", f, err)
		}
		if m == nil { // only comments
			continue
		}
		if m.Package.Path.Equal(routerPackage) {
			router = true
		}
		if err := rewrite(m); err != nil {
			return nil, fmt.Errorf("rewrite %s: %w", f, err)
		}
		modules[f] = m
	}
	if !router {
		return nil, fmt.Errorf("no file under %s declares package sandbox.main, which must decide %s", dir, Query)
	}
	s := &set{revision: hex.EncodeToString(h.Sum(nil))[:16], files: files, modules: modules}
	c := ast.NewCompiler().WithEnablePrintStatements(false)
	if c.Compile(modules); c.Failed() {
		return nil, compileError(c.Errors)
	}
	s.query, err = rego.New(rego.Query(Query), rego.Compiler(c)).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %s", Query, unrewrite(err.Error()))
	}
	if s.network, err = prepareNetwork(ctx, c); err != nil {
		return nil, err
	}
	s.action, err = rego.New(rego.Query(ActionQuery), rego.Compiler(c)).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %s", ActionQuery, unrewrite(err.Error()))
	}
	if s.explainers, err = prepareExplain(ctx, c); err != nil {
		return nil, fmt.Errorf("prepare %s: %s", ReasonsQuery, unrewrite(err.Error()))
	}
	return s, nil
}

// regoFiles lists the .rego files under dir, relative to it, sorted so the
// revision does not depend on the directory's order. Symlinked files are
// read; symlinked directories under dir are not walked (a ConfigMap's
// ..data would list every file twice).
func regoFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir // editors' and git's state
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".rego") && !strings.HasPrefix(d.Name(), ".") {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read policy dir: %w", err)
	}
	sort.Strings(files)
	return files, nil
}

// rewrite moves a command package (sandbox.X, X not main) under
// commandRoot and points every data.sandbox.X reference, static or
// dynamic, there too; data.sandbox.main stays where it is. An import of
// data.sandbox itself is followed through its alias (sandbox.curl.allow).
func rewrite(m *ast.Module) error {
	rewriteRef(m.Package.Path)
	aliases := map[ast.Var]bool{}
	for _, imp := range m.Imports {
		r, ok := imp.Path.Value.(ast.Ref)
		if !ok {
			continue
		}
		if len(r) == 2 && r.Equal(ast.MustParseRef("data.sandbox")) {
			alias := imp.Alias
			if alias == "" {
				alias = "sandbox"
			}
			aliases[alias] = true
		}
		rewriteRef(r)
	}
	_, err := ast.TransformRefs(m, func(r ast.Ref) (ast.Value, error) {
		if v, ok := r[0].Value.(ast.Var); ok && aliases[v] && len(r) >= 2 {
			r = append(ast.Ref{ast.DefaultRootDocument, ast.StringTerm("sandbox").SetLocation(r[0].Location)}, r[1:]...)
		}
		rewriteRef(r)
		return r, nil
	})
	return err
}

// rewriteRef turns data.sandbox[k]... into data.<commandRoot>[k]..., in
// place, unless k is the string "main".
func rewriteRef(r ast.Ref) {
	if len(r) < 3 || !r[0].Equal(ast.DefaultRootDocument) || !r[1].Equal(ast.StringTerm("sandbox")) {
		return
	}
	if r[2].Equal(ast.StringTerm("main")) || r[2].Equal(ast.StringTerm("network")) {
		return // the decisions' own packages (Query, NetworkQuery)
	}
	r[1] = ast.StringTerm(commandRoot).SetLocation(r[1].Location)
}

// unrewrite turns the internal root back into the names the policy's
// author wrote, for messages.
func unrewrite(s string) string {
	s = strings.ReplaceAll(s, `data["jaild:commands"]`, "data.sandbox")
	return strings.ReplaceAll(s, `"jaild:commands"`, "sandbox")
}

// compileError reports the compiler's errors in the author's names and
// says plainly why recursion fails.
func compileError(errs ast.Errors) error {
	var msgs []string
	recursion := false
	for _, e := range errs {
		if e.Code == ast.RecursionErr {
			recursion = true
		}
		msgs = append(msgs, unrewrite(e.Error()))
	}
	msg := strings.Join(msgs, "; ")
	if recursion {
		return errors.New("recursive rules are not supported by OPA, rewrite them without recursion (examples/policy/toolx_segments.rego shows how): " + msg)
	}
	return errors.New("compile policy: " + msg)
}
