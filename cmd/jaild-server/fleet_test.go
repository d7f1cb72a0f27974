package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/jaild/jaild/route"
)

// fleetKeyDir holds key files: keyFile(name, key, mode) writes one.
type fleetKeyDir struct {
	t   *testing.T
	dir string
}

// key is a distinct fleet key for each n.
func key(n int) []byte {
	return []byte(strings.Repeat(string(rune('a'+n)), route.MinKeyLen))
}

// write puts data at name, by a rename over it (a new inode, as a
// Kubernetes Secret's update or mv makes), with mode.
func (d fleetKeyDir) write(name string, data []byte, mode os.FileMode) string {
	d.t.Helper()
	p := filepath.Join(d.dir, name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		d.t.Fatal(err)
	}
	return p
}

// serveFleet parses args with jaild serve's flags and returns what
// fleetOptions makes of them.
func serveFleet(t *testing.T, args ...string) (*fleetMember, error) {
	t.Helper()
	for _, v := range []string{"JAILD_FLEET_KEY", "JAILD_FLEET_KEY_ACCEPT", "JAILD_ADVERTISE_ADDR", "JAILD_FLEET_KEY_RELOAD"} {
		if _, set := os.LookupEnv(v); !set {
			setenv(t, v, "-")
		}
	}
	var fm *fleetMember
	var ferr error
	app := &cli.App{Flags: serveCommand.Flags, Action: func(c *cli.Context) error {
		fm, _, ferr = fleetOptions(c, 1<<20, slog.New(slog.DiscardHandler))
		return nil
	}}
	if err := app.Run(append([]string{"serve"}, args...)); err != nil {
		t.Fatal(err)
	}
	return fm, ferr
}

// goneID is a session id minted under key that names an address where
// nothing listens.
func goneID(t *testing.T, key []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	minter, err := route.New(route.Config{Key: key, Advertise: gone})
	if err != nil {
		t.Fatal(err)
	}
	return minter.NewID()
}

// followed reports whether rt follows id, which names an address where
// nothing listens: a followed id is answered 410 (its node is gone); one
// whose token fails is served here, as unknown (404).
func followed(t *testing.T, rt *route.Router, id string) bool {
	t.Helper()
	rec := httptest.NewRecorder()
	rt.Handler(http.NotFoundHandler(), func(*http.Request) string { return "" }).ServeHTTP(rec, httptest.NewRequest("GET", "/sessions/"+id+"/jobs", nil))
	switch rec.Code {
	case http.StatusGone:
		return true
	case http.StatusNotFound:
		return false
	}
	t.Fatalf("answered %d", rec.Code)
	return false
}

// signedWith reports whether rt mints its ids under key: a daemon holding
// key alone follows them (rt advertises an address where nothing listens).
func signedWith(t *testing.T, rt *route.Router, key []byte) bool {
	t.Helper()
	holder, err := route.New(route.Config{Key: key, Advertise: netip.MustParseAddrPort("127.0.0.1:2")})
	if err != nil {
		t.Fatal(err)
	}
	return followed(t, holder, rt.NewID())
}

// TestFleetKeyAcceptFlags: --fleet-key-accept (or JAILD_FLEET_KEY_ACCEPT)
// makes the router accept ids under each key it names, never sign with
// them; every misuse is a usage error naming the problem.
func TestFleetKeyAcceptFlags(t *testing.T) {
	d := fleetKeyDir{t, t.TempDir()}
	k1, k2, k3 := d.write("k1", key(1), 0o600), d.write("k2", key(2), 0o400), d.write("k3", key(3), 0o600)
	copyOf1 := d.write("copy-of-k1", key(1), 0o600)
	short := d.write("short", []byte("0123456789"), 0o600)
	open := d.write("open", key(4), 0o644)
	base := []string{"--advertise-addr", "127.0.0.1:1", "--fleet-key", k1}

	t.Run("accepted, not signed", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			env  string
		}{
			{"flags", append(base[:4:4], "--fleet-key-accept", k2, "--fleet-key-accept", k3), "-"},
			{"env", base, k2 + "," + k3},
		} {
			setenv(t, "JAILD_FLEET_KEY_ACCEPT", tc.env)
			fm, err := serveFleet(t, tc.args...)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			for n, want := range map[int]bool{1: true, 2: true, 3: true, 4: false} {
				if got := followed(t, fm.router, goneID(t, key(n))); got != want {
					t.Errorf("%s: an id under key %d followed: %v, want %v", tc.name, n, got, want)
				}
			}
			if !signedWith(t, fm.router, key(1)) || signedWith(t, fm.router, key(2)) || signedWith(t, fm.router, key(3)) {
				t.Errorf("%s: ids not minted under the --fleet-key alone", tc.name)
			}
		}
	})
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"without --fleet-key", []string{"--fleet-key-accept", k2}, "--fleet-key-accept needs --fleet-key"},
		{"the signing key's file", append(base[:4:4], "--fleet-key-accept", k1), "is the --fleet-key file"},
		{"one file twice", append(base[:4:4], "--fleet-key-accept", k2, "--fleet-key-accept", k2), "is given twice"},
		{"one file twice in a list", append(base[:4:4], "--fleet-key-accept", k2+","+d.dir+"/./k2"), "is given twice"},
		{"the signing key in another file", append(base[:4:4], "--fleet-key-accept", copyOf1), "holds the same key as " + k1},
		{"one key in two files", append(base[:4:4], "--fleet-key-accept", k2, "--fleet-key-accept", d.write("copy-of-k2", key(2), 0o600)), "holds the same key as " + k2},
		{"short", append(base[:4:4], "--fleet-key-accept", short), "--fleet-key-accept: load fleet key: " + short + " holds 10 bytes"},
		{"open to others", append(base[:4:4], "--fleet-key-accept", open), "open to other users"},
		{"missing", append(base[:4:4], "--fleet-key-accept", d.dir+"/nothing"), "no such file"},
		{"an empty name", append(base[:4:4], "--fleet-key-accept", k2+", ,"+k3), "an empty file name"},
		{"negative reload", append(base[:4:4], "--fleet-key-reload", "-1s"), "--fleet-key-reload must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fm, err := serveFleet(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v (router %v), want an error with %q", err, fm != nil, tt.want)
			}
			t.Logf("%v", err)
		})
	}
}

// TestFleetKeyReload: a daemon takes its key files' changes without a
// restart (its instance, and so its sessions, are kept); a change that
// fails to load keeps the keys in use until the files change again.
func TestFleetKeyReload(t *testing.T) {
	d := fleetKeyDir{t, t.TempDir()}
	sign, accept := d.write("sign", key(1), 0o600), d.write("accept", key(2), 0o600)
	fm, err := serveFleet(t, "--advertise-addr", "127.0.0.1:1", "--fleet-key", sign, "--fleet-key-accept", accept)
	if err != nil {
		t.Fatal(err)
	}
	rt, instance := fm.router, fm.router.Instance()
	want := func(step string, keys map[int]bool) {
		t.Helper()
		fm.keys.reload(rt)
		for n, want := range keys {
			if got := followed(t, rt, goneID(t, key(n))); got != want {
				t.Errorf("%s: an id under key %d followed: %v, want %v", step, n, got, want)
			}
		}
		if rt.Instance() != instance {
			t.Fatalf("%s: the instance changed", step)
		}
	}
	want("unchanged", map[int]bool{1: true, 2: true, 3: false})
	d.write("accept", key(3), 0o600)
	want("accept 3", map[int]bool{1: true, 2: false, 3: true})
	// Half way through swapping the files: one key in both. Refused;
	// the keys in use are kept.
	d.write("sign", key(3), 0o600)
	want("3 in both files", map[int]bool{1: true, 2: false, 3: true})
	d.write("accept", key(1), 0o600)
	want("sign with 3, accept 1", map[int]bool{1: true, 2: false, 3: true})
	if !signedWith(t, rt, key(3)) || signedWith(t, rt, key(1)) {
		t.Error("after the swap, ids are not minted under key 3")
	}
	// A file open to others is refused: the keys in use are kept.
	d.write("accept", key(1), 0o644)
	want("accept file open to others", map[int]bool{1: true, 3: true})
	d.write("accept", key(4), 0o600)
	want("accept 4", map[int]bool{1: false, 3: true, 4: true})
}
