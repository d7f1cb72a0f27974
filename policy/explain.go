package policy

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// ReasonsQuery and DenyQuery are how a set explains a deny: each a set (or
// array) of messages, strings or objects with a "msg" or "message" string
// (OPA's deny[msg] convention). They are asked only after Query or
// ActionQuery denied, with the same input, so they cost nothing on an
// allowed request; they explain and never decide: a set whose deny should
// refuse says so in its allow.
const (
	ReasonsQuery = "data.sandbox.main.reasons"
	DenyQuery    = "data.sandbox.main.deny"
)

// Bounds of what a denial carries back, whatever the set makes.
const (
	maxReasons     = 16
	maxReasonBytes = 512
	// maxProbes bounds the evaluations refusedAlone makes for one
	// denied string.
	maxProbes = 64
)

// prepareExplain prepares ReasonsQuery and DenyQuery on a compiled set.
func prepareExplain(ctx context.Context, c *ast.Compiler) ([]rego.PreparedEvalQuery, error) {
	var qs []rego.PreparedEvalQuery
	for _, q := range []string{ReasonsQuery, DenyQuery} {
		pq, err := rego.New(rego.Query(q), rego.Compiler(c)).PrepareForEval(ctx)
		if err != nil {
			return nil, err
		}
		qs = append(qs, pq)
	}
	return qs, nil
}

// explain returns the set's reasons for denying v: the messages of
// ReasonsQuery then DenyQuery, without repeats, bounded. A query that is
// undefined or fails gives none: the request is denied all the same.
func (s *set) explain(ctx context.Context, v ast.Value) []string {
	var out []string
	seen := map[string]bool{}
	for _, q := range s.explainers {
		rs, err := eval(ctx, q, v)
		if err != nil || len(rs) != 1 || len(rs[0].Expressions) != 1 {
			continue
		}
		var msgs []any
		switch x := rs[0].Expressions[0].Value.(type) {
		case []any: // sets and arrays
			msgs = x
		default:
			msgs = []any{x}
		}
		for _, m := range msgs {
			r := reasonText(m)
			if r == "" || seen[r] {
				continue
			}
			if len(out) == maxReasons {
				return out
			}
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// reasonText is one message of a set's reasons as text.
func reasonText(m any) string {
	var s string
	switch x := m.(type) {
	case string:
		s = x
	case map[string]any:
		for _, k := range []string{"msg", "message"} {
			if t, ok := x[k].(string); ok {
				s = t
				break
			}
		}
	}
	if s == "" {
		b, err := json.Marshal(m)
		if err != nil {
			return ""
		}
		s = string(b)
	}
	if len(s) > maxReasonBytes {
		s = strings.ToValidUTF8(s[:maxReasonBytes], "") + "..."
	}
	return s
}

// refusedAlone finds the simple command of a denied shell string that the
// set denies on its own: in turn, each command is made the whole string
// (input.shell with that command only, its own text as the source, no
// functions, nothing dynamic unless the command is), and the first the
// set denies is returned, as text. "" when none is: the deny comes from
// the commands together, or from what is not a command.
func (st *state) refusedAlone(ctx context.Context, in *Input) string {
	for i, c := range in.Shell.Commands {
		if i == maxProbes {
			break
		}
		one := *in
		one.Shell = &Shell{Source: c.String(), Commands: []Command{c}, Functions: []Function{}}
		rs, err := eval(ctx, st.set.query, one.value())
		if err == nil && !rs.Allowed() {
			return c.String()
		}
	}
	return ""
}

// String is the command as argv in shell words: the name and its
// arguments, each quoted if the shell would read it otherwise. Arguments
// that are not literals are given as their source text, unquoted.
func (c Command) String() string {
	words := make([]string, 0, 1+len(c.Args))
	for _, w := range append([]string{c.Command}, c.Args...) {
		if !c.Dynamic {
			w = quote(w)
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

// quote returns w as one shell word that reads back as w.
func quote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}
