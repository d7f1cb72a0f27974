package policy

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/tester"
)

// TestResult is one Rego unit test's outcome.
type TestResult struct {
	// Name is data.<package>.<rule>, as the author wrote it.
	Name string
	// File is where the test is, relative to the directory.
	File     string
	Pass     bool
	Skip     bool
	Err      error
	Output   string
	Duration float64 // seconds
}

// Test runs the Rego unit tests under dir, the rules named test_* (todo_*
// are skipped), as opa test does, over the same rewritten modules the
// engine loads: tests of the convention's policies pass here as they would
// in production. An error means the set does not load, or has no tests.
func Test(ctx context.Context, dir string) ([]TestResult, error) {
	s, err := loadDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	ch, err := tester.NewRunner().CapturePrintOutput(true).Run(ctx, s.modules)
	if err != nil {
		return nil, fmt.Errorf("run tests: %s", unrewrite(err.Error()))
	}
	var out []TestResult
	for r := range ch {
		t := TestResult{
			Name:     unrewrite(r.Package) + "." + r.Name,
			Pass:     r.Pass(),
			Skip:     r.Skip,
			Err:      r.Error,
			Output:   string(r.Output),
			Duration: r.Duration.Seconds(),
		}
		t.Name = strings.Replace(t.Name, "data.jaild:commands.", "data.sandbox.", 1)
		if r.Location != nil {
			t.File = r.Location.File
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no test_ rules under %s", dir)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// PrintTests writes PASS, FAIL, ERROR or SKIP per test and a summary, and
// reports whether every test passed.
func PrintTests(w io.Writer, results []TestResult) bool {
	var pass, fail, skip int
	for _, r := range results {
		word := "PASS"
		switch {
		case r.Skip:
			word = "SKIP"
			skip++
		case r.Err != nil:
			word = "ERROR"
			fail++
		case !r.Pass:
			word = "FAIL"
			fail++
		default:
			pass++
		}
		fmt.Fprintf(w, "%-5s %s (%s)", word, r.Name, r.File)
		if r.Err != nil {
			fmt.Fprintf(w, ": %s", unrewrite(r.Err.Error()))
		}
		fmt.Fprintln(w)
		if !r.Pass && r.Output != "" {
			for _, l := range strings.Split(strings.TrimRight(r.Output, "\n"), "\n") {
				fmt.Fprintf(w, "      %s\n", l)
			}
		}
	}
	// opa test's summary line.
	fmt.Fprintln(w, strings.Repeat("-", 80))
	if fail == 0 {
		fmt.Fprintf(w, "PASS: %d/%d", pass, len(results))
	} else {
		fmt.Fprintf(w, "FAIL: %d/%d", fail, len(results))
	}
	if skip > 0 {
		fmt.Fprintf(w, " (%d skipped)", skip)
	}
	fmt.Fprintln(w)
	return fail == 0
}
