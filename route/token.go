package route

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/google/uuid"
)

// The route token's layout (see the package doc).
const (
	tokenVersion = 1
	instanceLen  = 6
	macLen       = 12 // 96 bits: a forger needs 2^96 tries per address
	// Sep separates the route token from the random part of an id. It is
	// not in base64url's alphabet, and it is unreserved in URL paths.
	Sep = "."
)

// MinKeyLen is the shortest fleet key accepted.
const MinKeyLen = 32

// Domain separation: the same key MACs ids and forwarded headers, and
// neither may pass for the other.
const (
	idDomain  = "jaild route id v1\x00"
	fwdDomain = "jaild route forwarded v1\x00"
)

// Token is what a session id's route token names.
type Token struct {
	// Addr is the address the minting daemon advertised to its peers.
	Addr netip.AddrPort
	// Instance is the minting daemon's instance id, drawn at its start.
	Instance [instanceLen]byte
}

// keyring MACs tokens and forwarded headers under the signing key, and
// checks them against every key it accepts: the signing key first, then
// the keys a rotation keeps accepting (see the package doc). It is never
// changed once made; a Router swaps whole keyrings.
type keyring struct {
	// keys[0] signs; every one of keys verifies.
	keys [][]byte
}

// newKeyring checks the keys and copies them: sign at least MinKeyLen
// bytes, each accepted key too, and no key given twice (a rotation that
// lists the signing key as accepted, or one key under two names, is a
// mistake an operator should hear about, not a no-op).
func newKeyring(sign []byte, accept [][]byte) (*keyring, error) {
	k := &keyring{keys: [][]byte{bytes.Clone(sign)}}
	if len(sign) < MinKeyLen {
		return nil, fmt.Errorf("route: fleet key of %d bytes, want at least %d", len(sign), MinKeyLen)
	}
	for i, a := range accept {
		if len(a) < MinKeyLen {
			return nil, fmt.Errorf("route: accepted fleet key %d of %d bytes, want at least %d", i+1, len(a), MinKeyLen)
		}
		for j, prev := range k.keys {
			if hmac.Equal(prev, a) {
				if j == 0 {
					return nil, fmt.Errorf("route: accepted fleet key %d is the signing key", i+1)
				}
				return nil, fmt.Errorf("route: accepted fleet keys %d and %d are the same key", j, i+1)
			}
		}
		k.keys = append(k.keys, bytes.Clone(a))
	}
	return k, nil
}

// mac is the MAC of parts under the signing key.
func (k *keyring) mac(domain string, parts ...[]byte) []byte {
	return macUnder(k.keys[0], domain, parts...)
}

// verify reports whether sum is the first len(sum) bytes of the MAC of
// parts under one of the keys. Each comparison is constant-time; which key
// matched (the signing key is tried first, as it signs nearly every token
// a fleet sees) shows in the time taken, and reveals nothing of the keys.
func (k *keyring) verify(sum []byte, domain string, parts ...[]byte) bool {
	for _, key := range k.keys {
		if hmac.Equal(macUnder(key, domain, parts...)[:len(sum)], sum) {
			return true
		}
	}
	return false
}

func macUnder(key []byte, domain string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(domain))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// encode is t's route token.
func (k *keyring) encode(t Token) string {
	ip := t.Addr.Addr().Unmap()
	var b []byte
	b = append(b, tokenVersion)
	b = append(b, ip.AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, t.Addr.Port())
	b = append(b, t.Instance[:]...)
	b = append(b, k.mac(idDomain, b)[:macLen]...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parse returns the token an id begins with, if it has one whose MAC
// holds under one of the keys. ok is false for an id without a token (a plain uuid, from a
// daemon without a fleet key) and for a malformed or forged one, which
// must be served as an unknown id: never followed.
func (k *keyring) parse(id string) (t Token, ok bool) {
	tok, _, found := strings.Cut(id, Sep)
	// 1+4+2+6+12 and 1+16+2+6+12 bytes: 34 or 50 characters.
	if !found || (len(tok) != 34 && len(tok) != 50) {
		return t, false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil || b[0] != tokenVersion {
		return t, false
	}
	body, sum := b[:len(b)-macLen], b[len(b)-macLen:]
	if !k.verify(sum, idDomain, body) {
		return t, false
	}
	ipLen := len(body) - 1 - 2 - instanceLen
	ip, _ := netip.AddrFromSlice(body[1 : 1+ipLen])
	port := binary.BigEndian.Uint16(body[1+ipLen:])
	copy(t.Instance[:], body[1+ipLen+2:])
	t.Addr = netip.AddrPortFrom(ip, port)
	return t, true
}

// newID is a fresh id naming t.
func (k *keyring) newID(t Token) string {
	return k.encode(t) + Sep + uuid.NewString()
}

// KeyID is a short name of key for logs: daemons that log the same ids
// hold the same keys, which is how an operator sees a rotation's step
// reach every daemon. It is a hash of the key under a domain of its own,
// and tells nothing of the key.
func KeyID(key []byte) string {
	sum := sha256.Sum256(append([]byte("jaild fleet key id\x00"), key...))
	return hex.EncodeToString(sum[:4])
}

// LoadKey reads a fleet key file: at least MinKeyLen bytes (surrounding
// white space is not part of the key, so that a key written by echo or
// kept in a Kubernetes Secret works). It refuses a file other users may
// read or write: whoever knows the key can make any daemon of the fleet
// connect to an address of their choosing.
func LoadKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load fleet key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load fleet key: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		return nil, fmt.Errorf("load fleet key: %s has mode %#o, open to other users; chmod o-rwx it", path, perm)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("load fleet key: %w", err)
	}
	key := bytes.TrimSpace(buf.Bytes())
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("load fleet key: %s holds %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64)", path, len(key), MinKeyLen)
	}
	return key, nil
}
