// Package doclinks finds the doc links in a module's comments that name
// nothing. A doc link is a name in square brackets in a Go comment: Name
// or Recv.Name for this package, pkg or pkg.Name or pkg.Recv.Name for an
// imported one (see go/doc/comment). godoc and gopls render a link that
// resolves and silently print one that does not as plain text, so a link
// left behind by a rename or a move reads as a reference to something that
// no longer exists. [Check] resolves every link the way go/doc does,
// against the declarations of the package it names.
package doclinks

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Broken is a doc link that names nothing.
type Broken struct {
	Pos    token.Position // the comment line holding the link
	Link   string         // the link as written, without its brackets
	Reason string
}

func (b Broken) String() string {
	return fmt.Sprintf("%s: [%s]: %s", b.Pos, b.Link, b.Reason)
}

// Check resolves the doc links in the comments of every non-test Go file of
// the module rooted at root, selecting files as a build with the given tags
// on this GOOS would, and returns those that name nothing. It skips
// testdata, vendor and hidden directories. A lowercase word in brackets
// that names no package is prose, not a link, and is not reported.
func Check(root string, tags []string) ([]Broken, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	modPath, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	c := &checker{root: root, modPath: modPath, pkgs: map[string]*pkgDoc{}}
	c.ctx = build.Default
	c.ctx.BuildTags = tags
	c.ctx.Dir = root // the go command that finds imported modules runs there
	var broken []Broken
	err = filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if n := d.Name(); dir != root && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" || n == "vendor") {
			return filepath.SkipDir
		}
		p, err := c.parseDir(dir)
		if err != nil || p == nil {
			return err
		}
		broken = append(broken, c.checkPackage(p)...)
		return nil
	})
	return broken, err
}

// modulePath reads the module path from root/go.mod.
func modulePath(root string) (string, error) {
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s/go.mod names no module", root)
}

type checker struct {
	root    string
	modPath string
	ctx     build.Context
	pkgs    map[string]*pkgDoc // by import path; nil: not found
}

// pkgDoc is one parsed package: its files, for the comments, and its
// go/doc view, for the symbols and imports links resolve against.
type pkgDoc struct {
	fset  *token.FileSet
	files []*ast.File
	doc   *doc.Package
}

// parseDir parses the non-test files of the package in dir, or returns nil
// if dir holds none.
func (c *checker) parseDir(dir string) (*pkgDoc, error) {
	bp, err := c.ctx.ImportDir(dir, 0)
	if _, ok := errors.AsType[*build.NoGoError](err); ok {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p := &pkgDoc{fset: token.NewFileSet()}
	for _, name := range append(bp.GoFiles, bp.CgoFiles...) {
		f, err := parser.ParseFile(p.fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
	}
	if len(p.files) == 0 {
		return nil, nil
	}
	p.doc, err = doc.NewFromFiles(p.fset, p.files, bp.ImportPath, doc.AllDecls|doc.PreserveAST)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// load returns the package at importPath, parsed once, or nil if it cannot
// be found.
func (c *checker) load(importPath string) *pkgDoc {
	if p, ok := c.pkgs[importPath]; ok {
		return p
	}
	var dir string
	if rel, ok := strings.CutPrefix(importPath, c.modPath); ok && (rel == "" || rel[0] == '/') {
		dir = filepath.Join(c.root, filepath.FromSlash(rel))
	} else if bp, err := c.ctx.Import(importPath, c.root, build.FindOnly); err == nil {
		dir = bp.Dir
	}
	var p *pkgDoc
	if dir != "" {
		p, _ = c.parseDir(dir)
	}
	c.pkgs[importPath] = p
	return p
}

// unknownPkg marks, in a DocLink's ImportPath, a package name that neither
// the imports of the package nor the standard library resolve.
const unknownPkg = "\x00"

// checkPackage parses every comment of p with a parser that takes any
// capitalized name for a symbol, so that a link go/doc would drop to plain
// text still comes out as a link, and resolves each link found.
func (c *checker) checkPackage(p *pkgDoc) []Broken {
	strict := p.doc.Parser()
	loose := &comment.Parser{
		LookupPackage: func(name string) (string, bool) {
			if path, ok := strict.LookupPackage(name); ok {
				return path, true
			}
			if path, ok := comment.DefaultLookupPackage(name); ok {
				return path, true
			}
			return unknownPkg + name, true
		},
		LookupSym: func(recv, name string) bool { return true },
	}
	var broken []Broken
	for _, f := range p.files {
		for _, cg := range f.Comments {
			for _, l := range docLinks(loose.Parse(cg.Text())) {
				reason := c.resolve(strict, l)
				if reason == "" {
					continue
				}
				text := linkText(l)
				broken = append(broken, Broken{Pos: p.fset.Position(linePos(cg, text)), Link: text, Reason: reason})
			}
		}
	}
	return broken
}

// resolve returns why l names nothing, or "" if it names something.
func (c *checker) resolve(strict *comment.Parser, l *comment.DocLink) string {
	switch {
	case l.ImportPath == "":
		if !strict.LookupSym(l.Recv, l.Name) {
			return "no such declaration in this package"
		}
	case strings.HasPrefix(l.ImportPath, unknownPkg):
		if l.Name != "" { // a bare [word] is prose
			return "no imported package has this name"
		}
	default:
		target := c.load(l.ImportPath)
		if target == nil {
			return "cannot find package " + l.ImportPath
		}
		if l.Name != "" && !target.doc.Parser().LookupSym(l.Recv, l.Name) {
			return "no such declaration in " + l.ImportPath
		}
	}
	return ""
}

// docLinks returns the doc links in d, in order.
func docLinks(d *comment.Doc) []*comment.DocLink {
	var links []*comment.DocLink
	var text func([]comment.Text)
	text = func(ts []comment.Text) {
		for _, t := range ts {
			switch t := t.(type) {
			case *comment.DocLink:
				links = append(links, t)
			case *comment.Link:
				text(t.Text)
			case *comment.Italic, comment.Plain:
			}
		}
	}
	var blocks func([]comment.Block)
	blocks = func(bs []comment.Block) {
		for _, b := range bs {
			switch b := b.(type) {
			case *comment.Paragraph:
				text(b.Text)
			case *comment.Heading:
				text(b.Text)
			case *comment.List:
				for _, item := range b.Items {
					blocks(item.Content)
				}
			}
		}
	}
	blocks(d.Content)
	return links
}

// linkText returns the text between a link's brackets, as written.
func linkText(l *comment.DocLink) string {
	var b strings.Builder
	for _, t := range l.Text {
		if p, ok := t.(comment.Plain); ok {
			b.WriteString(string(p))
		}
	}
	return b.String()
}

// linePos returns the position of the comment line in cg that holds
// [text], or cg's position if the link spans lines.
func linePos(cg *ast.CommentGroup, text string) token.Pos {
	for _, c := range cg.List {
		if strings.Contains(c.Text, "["+text+"]") {
			return c.Pos()
		}
	}
	return cg.Pos()
}
