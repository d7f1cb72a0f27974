package files_test

import (
	"os"
	"testing"

	// The sandbox test's binary is re-executed as each container's
	// init, like jaild itself.
	_ "github.com/jaild/jaild/internal/inithook"
)

func TestMain(m *testing.M) { os.Exit(m.Run()) }
