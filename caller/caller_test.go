package caller_test

import (
	"testing"

	"github.com/jaild/jaild/caller"
)

// TestIDCompare: IDs are the same caller only when kind and name both are;
// in particular no two uids and no uid and token or address share an ID,
// whatever their String forms have in common.
func TestIDCompare(t *testing.T) {
	tests := []struct {
		name string
		a, b caller.ID
		same bool
	}{
		{"same uid", caller.FromUID(1000), caller.FromUID(1000), true},
		{"two uids", caller.FromUID(0), caller.FromUID(1000), false},
		{"uid and token", caller.FromUID(0), caller.FromToken("0"), false},
		{"token and address", caller.FromToken("127.0.0.1"), caller.FromAddr("127.0.0.1"), false},
		{"two addresses", caller.FromAddr("127.0.0.1"), caller.FromAddr("127.0.0.2"), false},
		{"same token", caller.FromToken("alice"), caller.FromToken("alice"), true},
		{"local and token", caller.ID{Kind: caller.Local}, caller.FromToken("local"), false},
		{"nobody and empty token", caller.ID{}, caller.FromToken(""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a == tt.b; got != tt.same {
				t.Errorf("%#v == %#v is %v, want %v", tt.a, tt.b, got, tt.same)
			}
		})
	}
}

func TestIDString(t *testing.T) {
	tests := []struct {
		id   caller.ID
		want string
	}{
		{caller.FromToken("alice"), "alice"},
		{caller.FromUID(1000), "uid:1000"},
		{caller.FromAddr("::1"), "::1"},
		{caller.ID{Kind: caller.Local}, "local"},
		{caller.ID{}, ""},
	}
	for _, tt := range tests {
		if got := tt.id.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.id, got, tt.want)
		}
	}
	if !(caller.ID{}).IsZero() || caller.FromUID(0).IsZero() {
		t.Error("IsZero: only the zero ID is nobody")
	}
}
