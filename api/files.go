package api

// Error codes of the files endpoints (/sessions/{id}/files/...; see
// session/files), besides CodeInvalid (400: a path with "..", a bad mode,
// a bad archive; Field says which), CodeTooLarge (413) and CodeInternal.
const (
	CodeFileNotFound = "file_not_found" // 404: no such file or directory in the workspace
	CodeConflict     = "conflict"       // 409: a directory where a file was expected or the reverse, or not a regular file
	CodeNoSpace      = "no_space"       // 507: the workspace's quota is used up
)
