package session

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// parseExports parses the output of `export -p` strictly, with
// mvdan.cc/sh's parser (bash dialect, a superset of what the shells print):
//
//	export NAME='value'           dash (the quote as '"'"')
//	declare -x NAME="value"       bash (and -rx, -ix...; $'...' for
//	                              control characters and non-UTF-8 bytes)
//	export NAME="value"           bash in posix mode (/bin/sh -> bash)
//
// Every statement must be one such declaration, with a value made of
// quoted literals only. A variable exported without a value, and an
// exported array (which no shell puts in the environment), are skipped.
// Anything else (another command, an expansion, a redirection, a comment,
// a bad name, a duplicate) rejects the whole list.
func parseExports(text []byte) (map[string]string, error) {
	p := syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.KeepComments(true))
	f, err := p.Parse(bytes.NewReader(escapeBytes(text)), "")
	if err != nil {
		return nil, fmt.Errorf("variables: %w", err)
	}
	if len(f.Last) > 0 {
		return nil, errors.New("variables: a comment")
	}
	env := make(map[string]string, len(f.Stmts))
	for _, st := range f.Stmts {
		name, val, ok, err := exportStmt(st)
		if err != nil {
			return nil, fmt.Errorf("variables: line %d: %w", st.Pos().Line(), err)
		}
		if !ok {
			continue
		}
		if _, dup := env[name]; dup {
			return nil, fmt.Errorf("variable %s reported twice", name)
		}
		env[name] = val
	}
	return env, nil
}

// exportStmt checks one statement of `export -p` and returns the variable
// it exports; ok is false for one that has no value in the environment.
func exportStmt(st *syntax.Stmt) (name, val string, ok bool, err error) {
	if len(st.Comments) > 0 || st.Negated || st.Background || st.Coprocess || st.Semicolon.IsValid() || len(st.Redirs) > 0 {
		return "", "", false, errors.New("not a plain declaration")
	}
	d, isDecl := st.Cmd.(*syntax.DeclClause)
	if !isDecl || (d.Variant.Value != "export" && d.Variant.Value != "declare") {
		return "", "", false, errors.New("not an export or declare -x")
	}
	args := d.Args
	flags := ""
	if len(args) > 0 && args[0].Naked && args[0].Name == nil {
		if flags, err = declFlags(args[0].Value); err != nil {
			return "", "", false, err
		}
		args = args[1:]
	}
	if d.Variant.Value == "declare" && !strings.Contains(flags, "x") {
		return "", "", false, errors.New("declare without -x")
	}
	if len(args) != 1 {
		return "", "", false, fmt.Errorf("%d names in one declaration", len(args))
	}
	a := args[0]
	if a.Name == nil || !validName(a.Name.Value) || a.Append || a.Index != nil {
		return "", "", false, errors.New("not NAME=value")
	}
	name = a.Name.Value
	array := strings.ContainsAny(flags, "aA")
	switch {
	case a.Array != nil && array:
		return name, "", false, nil // an exported array stays in its shell
	case a.Array != nil:
		return "", "", false, fmt.Errorf("%s: an array value without -a", name)
	case a.Naked && a.Value == nil:
		return name, "", false, nil // exported, never set
	case a.Naked || a.Value == nil || len(a.Value.Parts) == 0 || array:
		return "", "", false, fmt.Errorf("%s: not NAME=value", name)
	}
	for _, part := range a.Value.Parts {
		if !quotedLiteral(part) {
			return "", "", false, fmt.Errorf("%s: the value is not a quoted literal", name)
		}
	}
	v, err := expand.Literal(nil, a.Value)
	if err != nil {
		return "", "", false, fmt.Errorf("%s: %w", name, err)
	}
	return name, unescapeBytes(v), true, nil
}

// declFlags checks the flags word of a declaration: "-" and attributes
// that bash's declare prints.
func declFlags(w *syntax.Word) (string, error) {
	lit := w.Lit()
	if len(w.Parts) != 1 || len(lit) < 2 || lit[0] != '-' || strings.Trim(lit[1:], "aAilnrtux") != "" {
		return "", errors.New("not a declaration's flags")
	}
	return lit[1:], nil
}

// quotedLiteral reports whether a word part is '...', $'...', or "..."
// without any expansion in it.
func quotedLiteral(part syntax.WordPart) bool {
	switch p := part.(type) {
	case *syntax.SglQuoted:
		return true
	case *syntax.DblQuoted:
		if p.Dollar { // $"..." is translated by the locale
			return false
		}
		for _, q := range p.Parts {
			if _, ok := q.(*syntax.Lit); !ok {
				return false
			}
		}
		return true
	}
	return false
}

// The parser accepts UTF-8 only, and an environment variable may hold any
// bytes (dash prints them as they are, between single quotes). escapeBytes
// writes each byte that is not part of valid UTF-8 as a rune of the private
// use range [byteRune, byteRune+0xff], and each byte of a rune that already
// is in that range the same way, so that unescapeBytes turns every rune of
// that range back into its byte and nothing else.
const byteRune = 0x10ff00

func escapeBytes(b []byte) []byte {
	if utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return r >= byteRune }) {
		return b
	}
	out := make([]byte, 0, len(b)+64)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if (r == utf8.RuneError && n == 1) || r >= byteRune {
			for _, c := range b[i : i+n] {
				out = utf8.AppendRune(out, byteRune+rune(c))
			}
		} else {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

func unescapeBytes(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r >= byteRune }) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r >= byteRune && n == 4 {
			sb.WriteByte(byte(r - byteRune))
		} else {
			sb.WriteString(s[i : i+n])
		}
		i += n
	}
	return sb.String()
}
