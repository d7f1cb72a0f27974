package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jaild/jaild/box"
)

// Sanity bounds on request fields, whatever the operator allows: they keep
// arithmetic on them from overflowing and catch typos (a cpus of 4000).
const (
	maxArgs      = 4096
	maxEnv       = 1024
	maxCPUs      = 1024
	maxPids      = 1 << 22 // the kernel's own pid_max ceiling
	maxSessionID = 128
)

// DecodeRequest reads one JSON Request from r, strictly: an unknown field,
// a field name in other case than documented ("Command"), a key given twice
// in any object, a value of the wrong type, a second value or trailing
// garbage after the object is an error. (encoding/json alone would take the
// last of duplicate keys and match names case-insensitively: a proxy or
// policy engine in front of jaild could then read a different request from
// the same bytes than jaild runs.) It does not check the request's meaning;
// see [Request.Spec].
func DecodeRequest(r io.Reader) (*Request, error) {
	var req Request
	if err := Decode(r, &req); err != nil {
		return nil, err
	}
	return &req, nil
}

// Decode reads one JSON object from r into v, a pointer to a struct, as
// strictly as [DecodeRequest] does (its session bodies use it).
func Decode(r io.Reader, v any) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty body: expected a JSON object")
	}
	// encoding/json would turn invalid UTF-8 and lone UTF-16 surrogates
	// into U+FFFD and run something other than what was sent.
	if err := checkText(data); err != nil {
		return fmt.Errorf("decode request: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode request: %w", err)
	}
	// A body must hold exactly one object: "{...}{...}" or "{...} x"
	// would otherwise be silently half-read.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			return errors.New("decode request: unexpected data after the JSON object")
		}
		return fmt.Errorf("decode request: after the JSON object: %w", err)
	}
	if err := checkKeys(data, jsonFields(reflect.TypeOf(v).Elem())); err != nil {
		return fmt.Errorf("decode request: %w", err)
	}
	return nil
}

// checkText refuses a body that is not valid UTF-8 or whose strings escape
// half of a UTF-16 surrogate pair (\ud800 not followed by \udc00-\udfff,
// or the reverse).
func checkText(data []byte) error {
	if !utf8.Valid(data) {
		return errors.New("body is not valid UTF-8")
	}
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(data):
			i++
			if data[i] != 'u' {
				continue
			}
			r, ok := hex4(data[i+1:])
			if !ok {
				continue // the decoder reports it
			}
			i += 4
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return fmt.Errorf("lone UTF-16 surrogate \\u%04x in a string", r)
			case r >= 0xd800 && r <= 0xdbff:
				lo, ok := rune(0), false
				if i+2 < len(data) && data[i+1] == '\\' && data[i+2] == 'u' {
					lo, ok = hex4(data[i+3:])
				}
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return fmt.Errorf("lone UTF-16 surrogate \\u%04x in a string", r)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// fieldsOf caches the JSON names of the types Decode decodes into,
// computed on first use (not at init: the binary re-execs itself for every
// sandbox).
var fieldsOf sync.Map // reflect.Type -> map[string]bool

// jsonFields are the JSON names of struct type rt's fields.
func jsonFields(rt reflect.Type) map[string]bool {
	if m, ok := fieldsOf.Load(rt); ok {
		return m.(map[string]bool)
	}
	m := map[string]bool{}
	if rt.Kind() == reflect.Struct {
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			m[name] = true
		}
	}
	fieldsOf.Store(rt, m)
	return m
}

// checkKeys walks data, which json.Unmarshal already accepted as one
// object, and refuses duplicate keys in any object and top-level keys that
// are not spelled exactly as documented.
func checkKeys(data []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		keys    map[string]bool // nil for arrays
		wantKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.keys != nil && top.wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			key := tok.(string)
			if top.keys[key] {
				return fmt.Errorf("duplicate key %q", key)
			}
			if len(stack) == 1 && !fields[key] {
				return fmt.Errorf("json: unknown field %q", key)
			}
			top.keys[key] = true
			top.wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
			if top != nil && top.keys != nil {
				top.wantKey = true // after this value, the parent wants a key
			}
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			if top != nil && top.keys != nil {
				top.wantKey = true
			}
			continue
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.keys != nil {
			top.wantKey = true // a scalar value: next comes a key
		}
	}
}

// TimeoutAsked is the request's timeout as the caller gave it: the field,
// its value (0 if none was given: the default) and its unit.
func (req *Request) TimeoutAsked() (field string, n int64, unit time.Duration) {
	if req.TimeoutSeconds != nil {
		return "timeout_seconds", *req.TimeoutSeconds, time.Second
	}
	if req.TimeoutMS != nil {
		return "timeout_ms", *req.TimeoutMS, time.Millisecond
	}
	return "timeout_ms", 0, time.Millisecond
}

// Spec turns a decoded request into the limits and the command of a run,
// and checks everything that does not depend on the operator's
// configuration; the caller (the front end) puts them into the engine's
// spec. Errors are *box.InvalidError naming the request field. Limits left
// unset stay zero; the run chain's maxima fill them in. A timeout of 0 is
// the default, like none; one above box.MaxTimeout becomes box.MaxTimeout
// here, which no maximum exceeds: the run chain refuses what exceeds the
// operator's maximum, with TimeoutAsked's field and value. Egress is not
// part of it: the run chain decides it from the request's field and the
// operator's lists.
func (req *Request) Spec() (box.Limits, box.Command, error) {
	var (
		l   box.Limits
		c   box.Command
		err error
	)
	switch {
	case req.RunInBackground && req.SessionID == "":
		return l, c, invalid("run_in_background", "a background job runs in a session: set session_id")
	case len(req.SessionID) > maxSessionID || strings.IndexByte(req.SessionID, 0) >= 0:
		return l, c, invalid("session_id", "not a session id")
	}
	if c.Args, err = req.argv(); err != nil {
		return l, c, err
	}
	switch {
	case req.Stdin != nil && req.StdinB64 != nil:
		return l, c, invalid("stdin", "stdin and stdin_b64 are mutually exclusive")
	case req.Stdin != nil:
		c.Stdin = strings.NewReader(*req.Stdin)
	case req.StdinB64 != nil:
		c.Stdin = bytes.NewReader(req.StdinB64)
	}
	if c.Env, err = req.env(); err != nil {
		return l, c, err
	}
	if strings.IndexByte(req.Cwd, 0) >= 0 {
		return l, c, invalid("cwd", "contains a NUL byte")
	}
	c.Dir = req.Cwd
	if c.Timeout, err = req.timeout(); err != nil {
		return l, c, err
	}
	if l, c.MaxOutput, err = req.limits(); err != nil {
		return l, c, err
	}
	if err := l.Validate(); err != nil {
		return l, c, err
	}
	return l, c, c.Validate()
}

// argv is the command line of the request, shell mode or argv mode.
func (req *Request) argv() ([]string, error) {
	var args []string
	switch {
	case req.Command != "" && req.Executable != "":
		return nil, invalid("command", "command (shell mode) and executable (argv mode) are mutually exclusive")
	case req.Command != "":
		if strings.TrimSpace(req.Command) == "" {
			return nil, invalid("command", "is blank")
		}
		if len(req.Args) > 0 {
			return nil, invalid("args", "only allowed with executable; in shell mode put the arguments in command")
		}
		args = []string{"/bin/sh", "-c", req.Command}
	case req.Executable != "":
		if len(req.Args) >= maxArgs {
			return nil, invalid("args", "more than %d arguments", maxArgs)
		}
		args = append([]string{req.Executable}, req.Args...)
	default:
		return nil, invalid("command", "missing: set command (shell mode) or executable (argv mode)")
	}
	for i, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			field := "args"
			if i == 0 {
				field = "executable"
			}
			if req.Command != "" {
				field = "command"
			}
			return nil, invalid(field, "contains a NUL byte")
		}
	}
	return args, nil
}

// env is the request's variables as KEY=VALUE, sorted by name so that equal
// requests give equal commands (and audit hashes).
func (req *Request) env() ([]string, error) {
	if len(req.Env) > maxEnv {
		return nil, invalid("env", "more than %d variables", maxEnv)
	}
	return box.EnvList(req.Env)
}

// timeout is the timeout asked for, at most box.MaxTimeout. The maximum is
// the operator's: the run chain checks it, in the caller's field and unit
// (see TimeoutAsked).
func (req *Request) timeout() (time.Duration, error) {
	if req.TimeoutSeconds != nil && req.TimeoutMS != nil {
		return 0, invalid("timeout_ms", "timeout_seconds and timeout_ms are mutually exclusive")
	}
	field, n, unit := req.TimeoutAsked()
	if n < 0 {
		return 0, invalid(field, "%d: must not be negative (0 means the default)", n)
	}
	if n > int64(box.MaxTimeout/unit) {
		return box.MaxTimeout, nil
	}
	return time.Duration(n) * unit, nil
}

// limits are the limits and the output size asked for; zero where none
// was.
func (req *Request) limits() (l box.Limits, maxOutput int64, err error) {
	if l.Memory, err = positive("memory_bytes", req.MemoryBytes, math.MaxInt64); err != nil {
		return l, 0, err
	}
	if l.Pids, err = positive("pids", req.Pids, maxPids); err != nil {
		return l, 0, err
	}
	if l.TmpfsSize, err = positive("tmpfs_size_bytes", req.TmpfsSizeBytes, math.MaxInt64); err != nil {
		return l, 0, err
	}
	if maxOutput, err = positive("max_output_bytes", req.MaxOutputBytes, math.MaxInt64); err != nil {
		return l, 0, err
	}
	if req.CPUs != nil {
		c := *req.CPUs
		// !(c > 0) also rejects NaN, which JSON cannot carry but a Go
		// caller of Spec could.
		if !(c > 0) || c > maxCPUs {
			return l, 0, invalid("cpus", "%g: must be above 0 and at most %d", c, maxCPUs)
		}
		l.CPUs = c
	}
	return l, maxOutput, nil
}

func positive(field string, p *int64, max int64) (int64, error) {
	if p == nil {
		return 0, nil
	}
	if *p <= 0 || *p > max {
		return 0, invalid(field, "%d: must be between 1 and %d", *p, max)
	}
	return *p, nil
}

func invalid(field, format string, args ...any) *box.InvalidError {
	return &box.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
