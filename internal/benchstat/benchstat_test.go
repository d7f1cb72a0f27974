package benchstat

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}, {0.01, 1}} {
		if got := Percentile(s, tt.p); got != tt.want {
			t.Errorf("Percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080/run", true},
		{"http://[::1]:8080", true},
		{"http://localhost:8080", true},
		{"http://10.0.0.1:8080", false},
		{"http://192.0.2.1", false},
		{"://bad", false},
	} {
		if err := CheckLoopback("test", tt.url); (err == nil) != tt.ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok %v", tt.url, err, tt.ok)
		}
	}
}
