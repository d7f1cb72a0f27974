package api_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/run"
)

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr string // substring; "" means success
	}{
		{name: "shell", body: `{"command":"ls -al","timeout_seconds":5}`},
		{name: "argv", body: `{"executable":"echo","args":["a","b"],"env":{"A":"1"},"cwd":"/tmp","stdin":"x"}`},
		{name: "whitespace around", body: " \n{\"command\":\"true\"}\n\t"},
		{name: "empty body", body: ``, wantErr: "empty body"},
		{name: "malformed", body: `{"command":`, wantErr: "unexpected EOF"},
		{name: "not an object", body: `["ls"]`, wantErr: "cannot unmarshal array"},
		{name: "unknown field", body: `{"command":"ls","shell":"bash"}`, wantErr: `unknown field "shell"`},
		{name: "trailing object", body: `{"command":"ls"}{"command":"rm"}`, wantErr: "after the JSON object"},
		{name: "trailing garbage", body: `{"command":"ls"} x`, wantErr: "after the JSON object"},
		{name: "float timeout", body: `{"command":"ls","timeout_seconds":1.5}`, wantErr: "cannot unmarshal number 1.5"},
		{name: "huge timeout", body: `{"command":"ls","timeout_ms":1e30}`, wantErr: "cannot unmarshal number"},
		{name: "string timeout", body: `{"command":"ls","timeout_ms":"5"}`, wantErr: "cannot unmarshal string"},
		{name: "env not strings", body: `{"command":"ls","env":{"A":1}}`, wantErr: "cannot unmarshal number"},
		{name: "bad base64", body: `{"command":"ls","stdin_b64":"!!"}`, wantErr: "illegal base64"},
		{name: "duplicate key", body: `{"command":"ls","command":"rm -rf /work"}`, wantErr: `duplicate key "command"`},
		{name: "duplicate env key", body: `{"command":"ls","env":{"A":"1","B":"2","A":"3"}}`, wantErr: `duplicate key "A"`},
		{name: "name in other case", body: `{"Command":"ls"}`, wantErr: `unknown field "Command"`},
		{name: "same key in different objects", body: `{"env":{"command":"x"},"command":"ls","args":[],"stdin":"{\"command\":1}"}`},
		{name: "nested values", body: `{"executable":"a","args":["x","x",""],"env":{},"pids":3,"cpus":0.5,"stdin":null}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := api.DecodeRequest(strings.NewReader(tt.body))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeRequest: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("DecodeRequest error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestRequestSpec(t *testing.T) {
	tests := []struct {
		name      string
		req       api.Request
		wantField string // "" means success
		check     func(t *testing.T, s *jail.Spec)
	}{
		{
			name: "shell mode",
			req:  api.Request{Command: "echo $HOME", TimeoutSeconds: ptr[int64](5)},
			check: func(t *testing.T, s *jail.Spec) {
				if !slices.Equal(s.Args, []string{"/bin/sh", "-c", "echo $HOME"}) || s.Timeout != 5*time.Second {
					t.Errorf("Args %q Timeout %v", s.Args, s.Timeout)
				}
			},
		},
		{
			name: "argv mode, env sorted, stdin, limits",
			req: api.Request{Executable: "env", Args: []string{"-0"}, Env: map[string]string{"B": "2", "A": "1=x"},
				StdinB64: []byte{0, 1, 2}, TimeoutMS: ptr[int64](1500), MemoryBytes: ptr[int64](64 << 20),
				Pids: ptr[int64](10), CPUs: ptr(0.5), TmpfsSizeBytes: ptr[int64](1 << 20), MaxOutputBytes: ptr[int64](100)},
			check: func(t *testing.T, s *jail.Spec) {
				if !slices.Equal(s.Args, []string{"env", "-0"}) || !slices.Equal(s.Env, []string{"A=1=x", "B=2"}) {
					t.Errorf("Args %q Env %q", s.Args, s.Env)
				}
				in, _ := io.ReadAll(s.Stdin)
				if !bytes.Equal(in, []byte{0, 1, 2}) {
					t.Errorf("stdin %q", in)
				}
				want := box.Limits{Memory: 64 << 20, Pids: 10, CPUs: 0.5, TmpfsSize: 1 << 20}
				if s.Limits != want || s.Timeout != 1500*time.Millisecond || s.MaxOutput != 100 {
					t.Errorf("Limits %+v Timeout %v MaxOutput %d", s.Limits, s.Timeout, s.MaxOutput)
				}
			},
		},
		{
			name: "unset limits stay zero for Maxima.Apply",
			req:  api.Request{Executable: "true"},
			check: func(t *testing.T, s *jail.Spec) {
				if s.Limits != (box.Limits{}) || s.Timeout != 0 || s.MaxOutput != 0 || s.Stdin != nil {
					t.Errorf("spec %+v", s)
				}
			},
		},
		{name: "empty command", req: api.Request{}, wantField: "command"},
		{name: "blank command", req: api.Request{Command: " \t\n"}, wantField: "command"},
		{name: "both modes", req: api.Request{Command: "ls", Executable: "ls"}, wantField: "command"},
		{name: "args in shell mode", req: api.Request{Command: "ls", Args: []string{"-l"}}, wantField: "args"},
		{name: "NUL in command", req: api.Request{Command: "ls\x00-l"}, wantField: "command"},
		{name: "NUL in executable", req: api.Request{Executable: "l\x00s"}, wantField: "executable"},
		{name: "NUL in arg", req: api.Request{Executable: "ls", Args: []string{"a\x00"}}, wantField: "args"},
		{name: "NUL in env value", req: api.Request{Command: "ls", Env: map[string]string{"A": "\x00"}}, wantField: "env"},
		{name: "= in env name", req: api.Request{Command: "ls", Env: map[string]string{"A=B": "1"}}, wantField: "env"},
		{name: "empty env name", req: api.Request{Command: "ls", Env: map[string]string{"": "1"}}, wantField: "env"},
		{name: "NUL in cwd", req: api.Request{Command: "ls", Cwd: "/work/\x00"}, wantField: "cwd"},
		{name: "relative cwd", req: api.Request{Command: "ls", Cwd: "work"}, wantField: "cwd"},
		{name: "both stdins", req: api.Request{Command: "cat", Stdin: ptr("a"), StdinB64: []byte("a")}, wantField: "stdin"},
		{name: "both timeouts", req: api.Request{Command: "ls", TimeoutSeconds: ptr[int64](1), TimeoutMS: ptr[int64](1)}, wantField: "timeout_ms"},
		{name: "negative timeout", req: api.Request{Command: "ls", TimeoutSeconds: ptr[int64](-1)}, wantField: "timeout_seconds"},
		{name: "negative timeout_ms", req: api.Request{Command: "ls", TimeoutMS: ptr[int64](-1)}, wantField: "timeout_ms"},
		{
			name: "zero timeout is the default",
			req:  api.Request{Command: "ls", TimeoutMS: ptr[int64](0)},
			check: func(t *testing.T, s *jail.Spec) {
				if s.Timeout != 0 {
					t.Errorf("timeout %v, want 0 (the default)", s.Timeout)
				}
			},
		},
		{
			// The run chain refuses it, naming timeout_seconds.
			name: "timeout beyond the jail's maximum is the jail's maximum",
			req:  api.Request{Command: "ls", TimeoutSeconds: ptr[int64](1 << 40)},
			check: func(t *testing.T, s *jail.Spec) {
				if s.Timeout != box.MaxTimeout {
					t.Errorf("timeout %v, want %v", s.Timeout, box.MaxTimeout)
				}
			},
		},
		{name: "negative memory", req: api.Request{Command: "ls", MemoryBytes: ptr[int64](-1)}, wantField: "memory_bytes"},
		{name: "zero pids", req: api.Request{Command: "ls", Pids: ptr[int64](0)}, wantField: "pids"},
		{name: "absurd pids", req: api.Request{Command: "ls", Pids: ptr[int64](1 << 40)}, wantField: "pids"},
		{name: "zero cpus", req: api.Request{Command: "ls", CPUs: ptr(0.0)}, wantField: "cpus"},
		{name: "absurd cpus", req: api.Request{Command: "ls", CPUs: ptr(1e300)}, wantField: "cpus"},
		{name: "negative tmpfs", req: api.Request{Command: "ls", TmpfsSizeBytes: ptr[int64](-4096)}, wantField: "tmpfs_size_bytes"},
		{name: "zero max output", req: api.Request{Command: "ls", MaxOutputBytes: ptr[int64](0)}, wantField: "max_output_bytes"},
		{name: "memory below the jail's minimum", req: api.Request{Command: "ls", MemoryBytes: ptr[int64](1000)}, wantField: "memory_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, c, err := tt.req.Spec()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Spec: %v", err)
				}
				tt.check(t, &jail.Spec{Limits: l, Command: c})
				return
			}
			var ie *box.InvalidError
			if !errors.As(err, &ie) || ie.Field != tt.wantField {
				t.Fatalf("Spec error = %v, want *jail.InvalidError for field %q", err, tt.wantField)
			}
		})
	}
}

func TestMaximaApply(t *testing.T) {
	max := run.Maxima{
		Limits:    box.Limits{Memory: 128 << 20, Pids: 512, CPUs: 0.5, TmpfsSize: 1 << 30},
		Timeout:   5 * time.Second,
		MaxOutput: 1 << 30,
	}
	tests := []struct {
		name      string
		spec      jail.Spec
		wantField string
		want      func(t *testing.T, s *jail.Spec)
	}{
		{
			name: "defaults, lowered to the maxima where those are lower",
			spec: jail.Spec{Command: box.Command{Args: []string{"true"}}},
			want: func(t *testing.T, s *jail.Spec) {
				want := box.Limits{Memory: 128 << 20, Pids: box.DefaultPids, CPUs: 0.5, TmpfsSize: box.DefaultTmpfsSize}
				if s.Limits != want || s.Timeout != 5*time.Second || s.MaxOutput != box.DefaultMaxOutput {
					t.Errorf("Limits %+v Timeout %v MaxOutput %d", s.Limits, s.Timeout, s.MaxOutput)
				}
			},
		},
		{
			name: "explicit values at the maxima pass",
			spec: jail.Spec{Limits: max.Limits, Command: box.Command{Args: []string{"true"}, Timeout: max.Timeout, MaxOutput: max.MaxOutput}},
			want: func(t *testing.T, s *jail.Spec) {
				if s.Limits != max.Limits {
					t.Errorf("Limits %+v", s.Limits)
				}
			},
		},
		{name: "memory above", spec: jail.Spec{Limits: box.Limits{Memory: 129 << 20}, Command: box.Command{Args: []string{"true"}}}, wantField: "memory_bytes"},
		{name: "pids above", spec: jail.Spec{Limits: box.Limits{Pids: 513}, Command: box.Command{Args: []string{"true"}}}, wantField: "pids"},
		{name: "cpus above", spec: jail.Spec{Limits: box.Limits{CPUs: 0.6}, Command: box.Command{Args: []string{"true"}}}, wantField: "cpus"},
		{name: "tmpfs above", spec: jail.Spec{Limits: box.Limits{TmpfsSize: 1<<30 + 1}, Command: box.Command{Args: []string{"true"}}}, wantField: "tmpfs_size_bytes"},
		{name: "timeout above", spec: jail.Spec{Command: box.Command{Args: []string{"true"}, Timeout: 6 * time.Second}}, wantField: "timeout_ms"},
		{name: "output above", spec: jail.Spec{Command: box.Command{Args: []string{"true"}, MaxOutput: 1<<30 + 1}}, wantField: "max_output_bytes"},
		{name: "invalid command still caught", spec: jail.Spec{}, wantField: "command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.spec
			err := max.Apply(&s)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				tt.want(t, &s)
				return
			}
			var ie *box.InvalidError
			if !errors.As(err, &ie) || ie.Field != tt.wantField {
				t.Fatalf("Apply error = %v, want *jail.InvalidError for %q", err, tt.wantField)
			}
		})
	}

	t.Run("zero maxima mean the jail's own", func(t *testing.T) {
		s := jail.Spec{Command: box.Command{Args: []string{"true"}, Timeout: box.MaxTimeout}}
		if err := (run.Maxima{}).Apply(&s); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if s.Limits != (box.Limits{}).WithDefaults() {
			t.Errorf("Limits %+v, want the defaults", s.Limits)
		}
	})
}

// FuzzDecodeRequest feeds arbitrary bodies through the whole request path
// short of the jail: decoding, conversion, and the operator's maxima. Nothing
// may panic, and whatever is accepted must be a valid spec within the maxima.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"command":"ls -al","timeout_seconds":5}`,
		`{"executable":"echo","args":["a"],"env":{"K":"V"},"cwd":"/work/x","stdin":"in","timeout_ms":10}`,
		`{"command":"x","memory_bytes":67108864,"pids":3,"cpus":0.25,"tmpfs_size_bytes":4096,"max_output_bytes":1}`,
		`{"executable":"a\u0000b"}`,
		`{"command":"x","stdin_b64":"AAEC"}`,
		`{"command":"x"} {}`,
		`{"command":1}`,
		`{"Command":"case-insensitive"}`,
		`{"command":"a","command":"b"}`,
		`{"command":"a","env":{"K":"1","K":"2"}}`,
		``,
	} {
		f.Add([]byte(s))
	}
	max := run.Maxima{
		Limits:    box.Limits{Memory: 1 << 30, Pids: 1024, CPUs: 2, TmpfsSize: 1 << 30},
		Timeout:   time.Minute,
		MaxOutput: 1 << 20,
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := api.DecodeRequest(bytes.NewReader(body))
		if err != nil {
			return
		}
		l, c, err := req.Spec()
		if err != nil {
			if !box.IsInvalid(err) {
				t.Fatalf("Spec error %v is not a *jail.InvalidError", err)
			}
			return
		}
		spec := &jail.Spec{Limits: l, Command: c}
		if err := max.Apply(spec); err != nil {
			if !box.IsInvalid(err) {
				t.Fatalf("Apply error %v is not a *jail.InvalidError", err)
			}
			return
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("accepted spec is invalid: %v", err)
		}
		if err := spec.Limits.Within(max.Limits); err != nil {
			t.Fatalf("accepted spec above the maxima: %v", err)
		}
		l = spec.Limits
		if l.Memory <= 0 || l.Pids <= 0 || l.CPUs <= 0 || l.TmpfsSize <= 0 {
			t.Fatalf("accepted spec has an unset limit: %+v", l)
		}
		if spec.Timeout <= 0 || spec.Timeout > max.Timeout || spec.MaxOutput <= 0 || spec.MaxOutput > max.MaxOutput {
			t.Fatalf("accepted spec has timeout %v, max output %d", spec.Timeout, spec.MaxOutput)
		}
		for _, a := range append(append([]string{}, spec.Args...), spec.Env...) {
			if strings.IndexByte(a, 0) >= 0 {
				t.Fatalf("accepted spec has a NUL byte: %q", a)
			}
		}
	})
}

func TestEgressJSON(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    *api.Egress
		wantErr string
	}{
		{name: "unset", body: `{"command":"true"}`},
		{name: "true", body: `{"command":"true","egress":true}`, want: &api.Egress{Allowed: true}},
		{name: "false", body: `{"command":"true","egress":false}`, want: &api.Egress{}},
		{name: "list", body: `{"command":"true","egress":["a.example:443"]}`, want: &api.Egress{Allowed: true, Hosts: []string{"a.example:443"}}},
		{name: "empty list", body: `{"command":"true","egress":[]}`, want: &api.Egress{Allowed: true, Hosts: []string{}}},
		{name: "string", body: `{"command":"true","egress":"yes"}`, wantErr: "egress must be"},
		{name: "null", body: `{"command":"true","egress":null}`},
		{name: "numbers", body: `{"command":"true","egress":[1]}`, wantErr: "egress must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := api.DecodeRequest(strings.NewReader(tt.body))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (req.Egress == nil) != (tt.want == nil) || (req.Egress != nil &&
				(req.Egress.Allowed != tt.want.Allowed || !slices.Equal(req.Egress.Hosts, tt.want.Hosts) ||
					(req.Egress.Hosts == nil) != (tt.want.Hosts == nil))) {
				t.Fatalf("egress = %+v, want %+v", req.Egress, tt.want)
			}
		})
	}
}

// TestRequestSpecRefusesUnserved: fields the daemon does not serve yet are
// refused with the field named, never ignored, and so is a background job
// outside a session.
func TestRequestSpecRefusesUnserved(t *testing.T) {
	for _, body := range []string{
		`{"command":"true","run_in_background":true}`,
		`{"command":"true","session_id":"a\u0000b"}`,
	} {
		req, err := api.DecodeRequest(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = req.Spec()
		var ie *box.InvalidError
		if !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want an InvalidError", body, err)
		}
	}
	req, err := api.DecodeRequest(strings.NewReader(`{"command":"true","session_id":"x","run_in_background":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := req.Spec(); err != nil {
		t.Errorf("a background job in a session: %v", err)
	}
}
