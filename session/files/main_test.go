package files_test

import (
	"os"
	"testing"

	// The sandbox test's binary is re-executed as each container's
	// init, like jaild itself.
	_ "github.com/jaild/jaild/internal/inithook"
	"github.com/jaild/jaild/session/files"
)

func TestMain(m *testing.M) {
	// The handler's writer process is this binary, re-executed.
	files.WriterMain()
	os.Exit(m.Run())
}
