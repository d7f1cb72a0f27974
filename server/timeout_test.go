package server_test

import (
	"strings"
	"testing"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/run"
	"github.com/jaild/jaild/server"
)

// TestTimeoutOneRule: a timeout of 0 is the default, like none, and any
// timeout above the maximum (30 s here) gets one message, naming the field
// the caller sent, with the maximum in its unit.
func TestTimeoutOneRule(t *testing.T) {
	f := &fake{}
	m := run.NewMetrics()
	ts := start(t, server.Options{Runner: chain(t, f, m, nil, run.AdmitOptions{}), Metrics: m})
	for _, body := range []string{`{"command":"ls","timeout_seconds":0}`, `{"command":"ls","timeout_ms":0}`, `{"command":"ls"}`} {
		resp, answer := post(t, ts.URL+"/run", body)
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", body, resp.StatusCode, answer)
		}
	}
	for i, c := range f.Calls() {
		if c.Timeout != box.DefaultTimeout {
			t.Errorf("call %d: timeout %v, want the default %v", i, c.Timeout, box.DefaultTimeout)
		}
	}
	for _, tt := range []struct{ body, field, msg string }{
		{`{"command":"ls","timeout_seconds":31}`, "timeout_seconds", "31 exceeds the maximum of 30"},
		{`{"command":"ls","timeout_seconds":100000}`, "timeout_seconds", "100000 exceeds the maximum of 30"},
		{`{"command":"ls","timeout_seconds":99999999999999}`, "timeout_seconds", "99999999999999 exceeds the maximum of 30"},
		{`{"command":"ls","timeout_ms":30001}`, "timeout_ms", "30001 exceeds the maximum of 30000"},
		{`{"command":"ls","timeout_ms":-1}`, "timeout_ms", "must not be negative"},
	} {
		resp, answer := post(t, ts.URL+"/run", tt.body)
		e := decodeError(t, answer)
		if resp.StatusCode != 400 || e.Code != api.CodeInvalid || e.Field != tt.field || !strings.Contains(e.Error, tt.msg) {
			t.Errorf("%s: %d %+v, want field %s and %q", tt.body, resp.StatusCode, e, tt.field, tt.msg)
		}
	}
}
