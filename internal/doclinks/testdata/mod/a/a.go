// Package a holds doc links, good and broken, for the doclinks test.
// Good: [A], [A.Method], [A.Field], [b.B], [b.B.Run], [b.B.Field], [io.Reader],
// [io.Reader.Read], [strings.Builder], [a.A], [b] and [fmt]. Prose, not a
// link: [optional] and [0, n).
package a

import (
	"io"

	"example.com/mod/b"
)

// A refers to [Gone] and [A.Gone], to [b.Gone] and [b.B.Gone], and to
// [io.Gone] and [nopkg.Thing].
type A struct {
	Field io.Reader
	b     b.B
}

// Method is good.
func (A) Method() {
	// An inside comment still names [Inner].
}
