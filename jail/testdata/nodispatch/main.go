// Command nodispatch imports package jail and does not dispatch its
// watchdog: started as "nodispatch watchdog ...", it must still run its
// own main (see TestImportDoesNotTakeOver).
package main

import (
	"fmt"

	"github.com/jaild/jaild/jail"
)

func main() {
	fmt.Println("main ran; the watchdog argument is", jail.WatchdogArg)
}
