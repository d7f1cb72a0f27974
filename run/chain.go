package run

// Chain builds the daemon's runner chain around base (the jail):
//
//	Enforce(max) -> Audit -> Admit -> Instrument -> base
//
// Enforce comes first so that invalid requests are refused before they wait
// for a slot and audit records carry effective limits; Audit sees refused
// runs too; Instrument sits inside admission to count only what reached the
// jail. audit may be nil (no audit log); metrics may be nil.
func Chain(base Base, c ChainOptions) (Runner, error) {
	if err := c.Max.Validate(); err != nil {
		return nil, err
	}
	c.Admission.Metrics = c.Metrics
	adm, err := Admit(Instrument(baseRunner{base}, c.Metrics), c.Admission)
	if err != nil {
		return nil, err
	}
	var r Runner = adm
	if c.Audit != nil {
		r = Audit(r, c.Audit)
	}
	return &enforcer{next: r, max: c.Max, audit: c.Audit}, nil
}

// ChainOptions configure [Chain]. Audit may be nil (no audit log), and so
// may Metrics.
type ChainOptions struct {
	Max       Maxima
	Admission AdmitOptions
	Audit     *AuditLog
	Metrics   *Metrics
}
