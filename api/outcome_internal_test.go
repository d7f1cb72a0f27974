package api

import "testing"

// TestEachCodeOneMeaning: a wire error code means one thing: every row of
// the outcome table that answers with a code gives the same HTTP status,
// verdict and exit status, so that CodeOutcome, a client's view of a code,
// does not depend on the order of the rows.
func TestEachCodeOneMeaning(t *testing.T) {
	seen := map[string]Outcome{}
	for _, row := range outcomes {
		if o, ok := seen[row.o.Code]; ok && o != row.o {
			t.Errorf("code %s means both %+v and %+v", row.o.Code, o, row.o)
		}
		seen[row.o.Code] = row.o
		if got := CodeOutcome(row.o.Code); got != row.o {
			t.Errorf("CodeOutcome(%s) = %+v, want %+v", row.o.Code, got, row.o)
		}
	}
}
