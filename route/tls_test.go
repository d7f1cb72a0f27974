package route

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"
)

// testCA returns a CA's pool and a certificate it signed for name (a DNS
// name only: peers are dialled by IP and checked for the fleet's name).
func testCA(t *testing.T, name string) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Peers are dialled over TLS and checked against the fleet's CA for the
// fleet's name; a peer whose certificate the CA did not sign gets nothing.
func TestForwardTLS(t *testing.T) {
	pool, cert := testCA(t, "jaild.test")
	otherPool, _ := testCA(t, "jaild.test")
	for _, tc := range []struct {
		name    string
		roots   *x509.CertPool
		forward bool
	}{
		{"the fleet's CA", pool, true},
		{"another CA", otherPool, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleetServing(t, 2, func(c *Config) {
				c.TLS = &tls.Config{RootCAs: tc.roots, ServerName: "jaild.test", MinVersion: tls.VersionTLS13}
			}, &cert)
			id := f.rts[1].NewID()
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "jaild.test"}}}
			req, _ := http.NewRequest("POST", f.srvs[0].URL+"/sessions/"+id+"/run", strings.NewReader(`{"command":"true"}`))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			// A peer that fails its handshake is misconfigured, not gone:
			// 502, never session_lost.
			want := map[bool]int{true: 200, false: http.StatusBadGateway}[tc.forward]
			served := f.served(1) != nil
			if served != tc.forward || resp.StatusCode != want {
				t.Errorf("status %d, served by the session's node: %v; want %d, forwarded %v", resp.StatusCode, served, want, tc.forward)
			}
		})
	}
}
