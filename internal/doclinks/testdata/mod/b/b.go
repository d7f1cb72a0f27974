// Package b is imported by a; [B.Run] and [B.Gone] are checked here too.
package b

// B is a type with a method and a field.
type B struct {
	Field int
}

// Run does nothing.
func (B) Run() {}
