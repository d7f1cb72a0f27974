package session_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/box"
	"github.com/jaild/jaild/caller"
	"github.com/jaild/jaild/jail"
	"github.com/jaild/jaild/session"
)

// fakeJail makes workspaces that hold nothing, for what the Manager decides
// alone (quotas, eviction, expiry): no root needed.
type fakeJail struct {
	mu   sync.Mutex
	open int
}

func (j *fakeJail) NewWorkspace(context.Context, int64, bool, *box.Limits) (session.Workspace, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.open++
	return &fakeWorkspace{j: j}, nil
}

func (j *fakeJail) count() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.open
}

type fakeWorkspace struct {
	j    *fakeJail
	once sync.Once
}

func (w *fakeWorkspace) Dir() string                     { return "/nonexistent" }
func (w *fakeWorkspace) HostIDs() (uid, gid int)         { return 1, 1 }
func (w *fakeWorkspace) Size() int64                     { return 1 << 20 }
func (w *fakeWorkspace) Used() (int64, error)            { return 0, nil }
func (w *fakeWorkspace) Lost() <-chan struct{}           { return nil }
func (w *fakeWorkspace) TakeProxyListener() net.Listener { return nil }
func (w *fakeWorkspace) Run(ctx context.Context, _ *jail.Spec) (*box.Result, error) {
	return &box.Result{}, nil
}
func (w *fakeWorkspace) Close() error {
	w.once.Do(func() {
		w.j.mu.Lock()
		w.j.open--
		w.j.mu.Unlock()
	})
	return nil
}

func fakeManager(t *testing.T, cfg session.Config) (*session.Manager, *fakeJail) {
	t.Helper()
	j := &fakeJail{}
	m, err := session.New(j, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		if n := j.count(); n != 0 {
			t.Errorf("%d workspaces left open", n)
		}
	})
	return m, j
}

// TestAttachedQuota: attached sessions (an MCP session's) count apart from
// kept ones; when the owner's attached quota is full, the one idle the
// longest is evicted, never a held or busy one, and never another owner's;
// a refusal says what the owner holds.
func TestAttachedQuota(t *testing.T) {
	m, j := fakeManager(t, session.Config{MaxPerOwner: 2, MaxAttachedPerOwner: 2, MaxSessions: 10})
	alice, bob := caller.FromToken("alice"), caller.FromToken("bob")
	kept := []*session.Session{create(t, m, session.Options{Owner: alice}), create(t, m, session.Options{Owner: alice})}
	if _, err := m.Create(bg, session.Options{Owner: alice}); !errors.Is(err, session.ErrLimit) {
		t.Fatalf("third kept session: %v", err)
	}
	// The kept quota is full; the attached one is not.
	a1 := create(t, m, session.Options{Owner: alice, Attached: true})
	time.Sleep(10 * time.Millisecond)
	a2 := create(t, m, session.Options{Owner: alice, Attached: true})
	b1 := create(t, m, session.Options{Owner: bob, Attached: true})
	if !a1.Info().Attached || kept[0].Info().Attached {
		t.Errorf("Info.Attached: %v, %v", a1.Info().Attached, kept[0].Info().Attached)
	}

	// A third attached session of alice's evicts a1, idle the longest.
	a3 := create(t, m, session.Options{Owner: alice, Attached: true})
	select {
	case <-a1.Done():
	case <-time.After(time.Minute):
		t.Fatal("the session idle the longest was not evicted")
	}
	if err := a1.Err(); !errors.Is(err, session.ErrEvicted) || !strings.Contains(err.Error(), "made room") {
		t.Errorf("evicted session's Err: %v", err)
	}
	for _, s := range append(kept, a2, a3, b1) {
		if err := s.Err(); err != nil {
			t.Errorf("session %s removed: %v", s.ID(), err)
		}
	}
	if n := j.count(); n != 5 {
		t.Errorf("%d workspaces open, want 5", n)
	}

	// Held (a connection is there) or busy, none is evicted: refused,
	// with what alice holds.
	release2, release3 := a2.Hold(), a3.Hold()
	_, err := m.Create(bg, session.Options{Owner: alice, Attached: true})
	var le *session.LimitError
	if !errors.As(err, &le) || le.What != "attached sessions per owner" || le.Owner != alice || le.Kept != 2 || le.Attached != 2 || le.Idle != 0 {
		t.Fatalf("all held: %v (%+v)", err, le)
	}
	if !strings.Contains(err.Error(), "alice holds 2 sessions and 2 attached ones") || !strings.Contains(err.Error(), "none of them is idle") {
		t.Errorf("message: %v", err)
	}
	release2()
	release2() // twice is once
	a4 := create(t, m, session.Options{Owner: alice, Attached: true})
	if !errors.Is(a2.Err(), session.ErrEvicted) || a3.Err() != nil {
		t.Errorf("after releasing a2: a2 %v, a3 %v", a2.Err(), a3.Err())
	}
	release3()
	_ = a4

	// A kept session never makes room, nor takes an attached one's.
	_, err = m.Create(bg, session.Options{Owner: alice})
	if !errors.As(err, &le) || le.What != "sessions per owner" || le.Idle == 0 || le.TTL != session.DefaultTTL {
		t.Errorf("kept quota: %v (%+v)", err, le)
	}
	if !strings.Contains(err.Error(), "expires in") {
		t.Errorf("message: %v", err)
	}
}

// TestEvictForDaemonLimit: at the daemon's limit, a new session of an owner
// evicts that owner's idle attached session, never another owner's.
func TestEvictForDaemonLimit(t *testing.T) {
	m, _ := fakeManager(t, session.Config{MaxSessions: 2})
	alice, bob := caller.FromToken("alice"), caller.FromToken("bob")
	a := create(t, m, session.Options{Owner: alice, Attached: true})
	create(t, m, session.Options{Owner: bob, Attached: true})
	if _, err := m.Create(bg, session.Options{Owner: caller.FromToken("carol"), Attached: true}); !errors.Is(err, session.ErrLimit) {
		t.Fatalf("carol at the daemon's limit: %v", err)
	}
	create(t, m, session.Options{Owner: alice})
	if !errors.Is(a.Err(), session.ErrEvicted) {
		t.Errorf("alice's attached session: %v", a.Err())
	}
}

// TestHoldKeepsAlive: a held session does not expire however long it is
// idle; released, its TTL counts from the release, and its Err says it
// expired.
func TestHoldKeepsAlive(t *testing.T) {
	m, _ := fakeManager(t, session.Config{TTL: 200 * time.Millisecond, ReapInterval: 20 * time.Millisecond})
	s := create(t, m, session.Options{Owner: caller.FromToken("a"), Attached: true})
	release := s.Hold()
	time.Sleep(time.Second)
	if err := s.Err(); err != nil {
		t.Fatalf("held session expired: %v", err)
	}
	if in := s.Info(); in.ExpiresAt.Before(time.Now().Add(time.Hour)) {
		t.Errorf("held session's ExpiresAt %v", in.ExpiresAt)
	}
	released := time.Now()
	release()
	select {
	case <-s.Done():
	case <-time.After(time.Minute):
		t.Fatal("released session did not expire")
	}
	if d := time.Since(released); d < 200*time.Millisecond {
		t.Errorf("expired %v after the release, before its TTL", d)
	}
	if err := s.Err(); !errors.Is(err, session.ErrExpired) || !strings.Contains(err.Error(), "expired after 200ms idle") {
		t.Errorf("Err: %v", err)
	}
	d := create(t, m, session.Options{Owner: caller.FromToken("a")})
	if err := m.Delete(caller.FromToken("a"), d.ID()); err != nil {
		t.Fatal(err)
	}
	if err := d.Err(); !errors.Is(err, session.ErrNotFound) || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("deleted session's Err: %v", err)
	}
}
