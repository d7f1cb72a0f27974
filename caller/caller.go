package caller

import "strconv"

// Kind says how the daemon knows a caller.
type Kind uint8

const (
	// None is the zero ID's kind: nobody the daemon authenticated (a
	// handler used outside the daemon's authentication).
	None Kind = iota
	// Token is a caller that showed a bearer token; Name is its name.
	Token
	// UID is a unix socket peer; Name is its uid in decimal, as the
	// kernel reported it (SO_PEERCRED), not as the peer claims it.
	UID
	// Addr is a TCP peer of a daemon without tokens; Name is its IP
	// address without the port (a port names one connection, not a
	// caller).
	Addr
	// Local is the one client of a daemon serving a single client over
	// its stdin and stdout (jaild mcp); Name is empty.
	Local
)

// ID is one caller. Its zero value is nobody.
type ID struct {
	Kind Kind
	Name string
}

// FromToken is the caller that showed the token named name.
func FromToken(name string) ID { return ID{Kind: Token, Name: name} }

// FromUID is the unix socket peer running as uid.
func FromUID(uid uint32) ID { return ID{Kind: UID, Name: strconv.FormatUint(uint64(uid), 10)} }

// FromAddr is the TCP peer at the IP address addr (no port).
func FromAddr(addr string) ID { return ID{Kind: Addr, Name: addr} }

// IsZero reports whether id is nobody.
func (id ID) IsZero() bool { return id == ID{} }

// String is the caller as the audit log and the policy name it: a token's
// name, "uid:N", an IP address, or "local".
func (id ID) String() string {
	switch id.Kind {
	case UID:
		return "uid:" + id.Name
	case Local:
		return "local"
	}
	return id.Name
}
