package server

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
)

// A result may carry two streams of up to --max-output bytes each. Marshaled
// whole, as encoding/json does, it would be held in memory several times
// over (each control byte becomes a six-byte escape), so writeResult encodes
// it straight into the response, in the field order of [api.Response].

// writeResult answers /run with res. It encodes the body twice, first only
// to count it for Content-Length (a client can tell a complete answer from
// one cut off), then onto the wire through a small buffer.
func writeResult(w http.ResponseWriter, res *box.Result) {
	var count countWriter
	if err := encodeResult(&count, res); err != nil {
		writeJSON(w, http.StatusInternalServerError, &api.ErrorResponse{Error: "encode answer", Code: api.CodeInternal})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.FormatInt(count.n, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	if encodeResult(bw, res) == nil {
		bw.Flush()
	}
}

// encodeResult writes res as a [api.Response] JSON object and a newline.
func encodeResult(w io.Writer, res *box.Result) error {
	bw, ok := w.(*bufio.Writer)
	if !ok {
		bw = bufio.NewWriter(w)
	}
	writeStream(bw, "stdout", res.Stdout)
	bw.WriteByte(',')
	writeStream(bw, "stderr", res.Stderr)
	// The small rest goes through encoding/json, from the same struct
	// that documents it, and is spliced after the streams.
	tail, err := json.Marshal(struct {
		ExitCode int `json:"exit_code"`
		api.Verdict
	}{res.ExitCode, api.VerdictOf(res)})
	if err != nil {
		return err
	}
	bw.WriteByte(',')
	bw.Write(tail[1:])
	bw.WriteByte('\n')
	return bw.Flush()
}

// writeStream writes `"name":"text"`, or for output that is not valid
// UTF-8 `"name":"","name_b64":"base64"`, where the opening brace or a comma
// has gone before. Binary output as text would need an escape or U+FFFD per
// byte and still not be exact.
func writeStream(bw *bufio.Writer, name, s string) {
	if name == "stdout" {
		bw.WriteByte('{')
	}
	bw.WriteString(`"` + name + `":`)
	if utf8.ValidString(s) {
		writeJSONString(bw, s)
		return
	}
	bw.WriteString(`"","` + name + `_b64":"`)
	enc := base64.NewEncoder(base64.StdEncoding, bw)
	io.WriteString(enc, s)
	enc.Close()
	bw.WriteByte('"')
}

const hexDigits = "0123456789abcdef"

// writeJSONString writes s, which must be valid UTF-8, as a JSON string,
// escaping what JSON requires.
func writeJSONString(bw *bufio.Writer, s string) {
	bw.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		bw.WriteString(s[start:i])
		switch c {
		case '"', '\\':
			bw.WriteByte('\\')
			bw.WriteByte(c)
		case '\n':
			bw.WriteString(`\n`)
		case '\r':
			bw.WriteString(`\r`)
		case '\t':
			bw.WriteString(`\t`)
		default:
			bw.WriteString(`\u00`)
			bw.WriteByte(hexDigits[c>>4])
			bw.WriteByte(hexDigits[c&0xf])
		}
		start = i + 1
	}
	bw.WriteString(s[start:])
	bw.WriteByte('"')
}

// countWriter counts what is written to it and keeps nothing.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
