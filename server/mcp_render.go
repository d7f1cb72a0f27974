package server

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jaild/jaild/box"
)

// The text a model reads of a tool result.

// renderText is the result as a model reads it: a verdict line, then the
// output streams.
func renderText(o *RunOutput, l box.Limits, clamped bool) string {
	var b strings.Builder
	switch {
	case o.TimedOut:
		fmt.Fprintf(&b, "TIMED OUT after %d ms: the sandbox was killed; the output below is partial.\n", o.TimeoutMS)
	case o.Signal != "":
		fmt.Fprintf(&b, "killed by %s", o.Signal)
	default:
		fmt.Fprintf(&b, "exit code %d", o.ExitCode)
	}
	if !o.TimedOut {
		fmt.Fprintf(&b, " (%d ms, cpu %d ms, peak memory %s)\n", o.DurationMS, o.CPUMS, humanBytes(o.MemoryPeakBytes))
	}
	if clamped {
		fmt.Fprintf(&b, "Note: the requested timeout was reduced to this server's maximum of %d ms.\n", o.TimeoutMS)
	}
	if o.OOMKilled {
		fmt.Fprintf(&b, "OUT OF MEMORY: a process was killed at the sandbox's memory limit of %s.\n", humanBytes(l.Memory))
	}
	if o.PidsLimitHit {
		fmt.Fprintf(&b, "PROCESS LIMIT HIT: a fork or thread was refused at the sandbox's limit of %d processes.\n", l.Pids)
	}
	for _, s := range []struct {
		name      string
		text      string
		n         int64
		truncated bool
	}{{"stdout", o.Stdout, o.StdoutBytes, o.StdoutTruncated}, {"stderr", o.Stderr, o.StderrBytes, o.StderrTruncated}} {
		if s.text == "" {
			continue
		}
		if s.truncated {
			fmt.Fprintf(&b, "--- %s (%d bytes, middle elided) ---\n", s.name, s.n)
		} else {
			fmt.Fprintf(&b, "--- %s ---\n", s.name)
		}
		b.WriteString(s.text)
		if !strings.HasSuffix(s.text, "\n") {
			b.WriteByte('\n')
		}
	}
	if o.Stdout == "" && o.Stderr == "" {
		b.WriteString("(no output)\n")
	}
	return b.String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20:
		return strings.TrimSuffix(strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64), ".0") + " MiB"
	case n >= 1<<10:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	default:
		return strconv.FormatInt(n, 10) + " B"
	}
}

// plural is n with the noun's singular or plural: "1 CPU", "0.5 CPUs", "2
// processes".
func plural(n float64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatFloat(n, 'g', -1, 64) + " " + many
}

// MCPCaptureBytes is how many bytes of a stream the sandbox keeps for a
// tool result of chars characters: enough for that many of any UTF-8.
func MCPCaptureBytes(chars int64) int64 { return chars * utf8.UTFMax }

// capChars cuts s, what the sandbox kept of a stream of total bytes, to at
// most max characters, marker included: the first and last characters
// around box.Elide's marker, which counts the bytes missing. s may have
// been cut by the sandbox already (at a larger size in bytes, with its own
// marker), which this marker then stands in for. It reports whether it cut.
func capChars(s string, max, total int64) (string, bool) {
	if int64(utf8.RuneCountInString(s)) <= max {
		return s, false
	}
	head, tail := s, s
	if total > int64(len(s)) {
		if i := strings.Index(s, "\n[... jaild: "); i >= 0 {
			if j := strings.IndexByte(s[i+1:], '\n'); j >= 0 {
				head, tail = s[:i], s[i+1+j+1:]
			}
		}
	}
	keep := max - int64(len(box.Elide(total)))
	if keep <= 0 {
		return firstRunes(s, max), true // no room for the marker
	}
	head = firstRunes(head, keep/2)
	tail = lastRunes(tail, keep-keep/2)
	return head + box.Elide(total-int64(len(head))-int64(len(tail))) + tail, true
}

// firstRunes is s's first n characters, lastRunes its last n.
func firstRunes(s string, n int64) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

func lastRunes(s string, n int64) string {
	for i := len(s); i > 0; {
		if n == 0 {
			return s[i:]
		}
		_, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
		n--
	}
	return s
}
