package api

import "time"

// The audit log's verdicts of egress decisions: one line per connection a
// sandbox asked its proxy for.
const (
	VerdictEgressAllowed = "egress_allowed"
	VerdictEgressDenied  = "egress_denied"
)

// EgressRecord is the audit line of one egress decision. It shares time,
// request_id, caller, verdict and reason with [AuditRecord], so a reader of
// the log can tell the two apart by verdict alone.
type EgressRecord struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id,omitempty"`
	// SessionID names the session whose proxy it was (a session's egress
	// is decided once, at its creation: its lines carry no request id).
	SessionID string `json:"session_id,omitempty"`
	Caller    string `json:"caller"`
	Verdict   string `json:"verdict"`
	// Reason is why the connection was refused, in words.
	Reason string `json:"reason,omitempty"`
	// Host and Port are what the sandbox asked for (a CONNECT target or
	// the host of an absolute URL); Addr is the address dialed.
	Host string `json:"egress_host"`
	Port int    `json:"egress_port"`
	Addr string `json:"egress_addr,omitempty"`
}
