package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/server"
)

// rawLines splits a /raw body into its events as generic objects, so that
// their keys can be checked.
func rawLines(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, l := range bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		evs = append(evs, m)
	}
	return evs
}

// hasKeys fails t unless ev has every key of want with a value of its JSON
// type ("string", "number").
func hasKeys(t *testing.T, ev map[string]any, want map[string]string) {
	t.Helper()
	for k, typ := range want {
		v, ok := ev[k]
		switch {
		case !ok:
			t.Errorf("event %v lacks %q", ev, k)
		case typ == "string" && !isString(v), typ == "number" && !isNumber(v):
			t.Errorf("event %v: %q is %T, want a %s", ev, k, v, typ)
		}
	}
}

func isString(v any) bool { _, ok := v.(string); return ok }
func isNumber(v any) bool { _, ok := v.(float64); return ok }

// TestRawEventShapes: /raw's events carry the policy-runner convention's
// keys with its types: {"event":"start"}, {"event":"stdout"|"stderr",
// "data_b64"} and nothing else, {"event":"exit","exitCode":N} and
// {"event":"error","message":...}; jaild's own fields are extra.
func TestRawEventShapes(t *testing.T) {
	f := &fake{Fn: func(ctx context.Context, s *jail.Spec) (*box.Result, error) {
		s.Stdout.Write([]byte("out\n"))
		s.Stdout.Write(nil) // no event for an empty chunk
		s.Stderr.Write([]byte("err\n"))
		if s.Args[0] == "fail" {
			return nil, errors.New("the sandbox broke")
		}
		return &box.Result{ID: "x", ExitCode: 7, Stdout: "out\n", Stderr: "err\n"}, nil
	}}
	ts := start(t, server.Options{Runner: server.Direct(f)})

	resp, body := post(t, ts.URL+"/raw", `{"executable":"ok"}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	evs := rawLines(t, body)
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, ev["event"].(string))
	}
	if !slices.Equal(kinds, []string{"start", "stdout", "stderr", "exit"}) {
		t.Fatalf("events %v", kinds)
	}
	hasKeys(t, evs[0], map[string]string{"event": "string"})
	for i, want := range []string{"out\n", "err\n"} {
		ev := evs[1+i]
		if keys := slices.Sorted(maps.Keys(ev)); !slices.Equal(keys, []string{"data_b64", "event"}) {
			t.Errorf("%s event keys %v, want exactly data_b64 and event", ev["event"], keys)
		}
		data, err := base64.StdEncoding.DecodeString(ev["data_b64"].(string))
		if err != nil || string(data) != want {
			t.Errorf("%s data %q (%v), want %q", ev["event"], data, err, want)
		}
	}
	hasKeys(t, evs[3], map[string]string{"event": "string", "exitCode": "number"})
	if evs[3]["exitCode"] != 7.0 {
		t.Errorf("exit event %v, want exitCode 7", evs[3])
	}

	// A failure once the stream started: a final error event.
	_, body = post(t, ts.URL+"/raw", `{"executable":"fail"}`)
	evs = rawLines(t, body)
	last := evs[len(evs)-1]
	hasKeys(t, last, map[string]string{"event": "string", "message": "string"})
	if last["event"] != "error" || last["message"] == "" {
		t.Errorf("final event %v, want an error with a message", last)
	}
	if evs[0]["event"] != "start" {
		t.Errorf("first event %v", evs[0])
	}
}
