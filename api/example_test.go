package api_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jaild/jaild/api"
	"github.com/jaild/jaild/box"
)

// A request body decodes strictly, then becomes a run's limits and command.
func ExampleDecodeRequest() {
	req, err := api.DecodeRequest(strings.NewReader(`{"command":"echo hi","timeout_ms":2000}`))
	if err != nil {
		panic(err)
	}
	_, cmd, err := req.Spec()
	if err != nil {
		panic(err)
	}
	fmt.Println(cmd.Args, cmd.Timeout)

	_, err = api.DecodeRequest(strings.NewReader(`{"command":"id","command":"true"}`))
	fmt.Println(err)
	// Output:
	// [/bin/sh -c echo hi] 2s
	// decode request: duplicate key "command"
}

// Every front end reports a failed run through the same table.
func ExampleErrorOutcome() {
	err := fmt.Errorf("start: %w", box.ErrCommandNotFound)
	o := api.ErrorOutcome(err)
	fmt.Println(o.Code, o.Verdict, o.Status, o.Exit)

	o = api.ErrorOutcome(&box.BusyError{})
	fmt.Println(o.Code, o.Status, errors.Is(&box.BusyError{}, box.ErrBusy))
	// Output:
	// command_not_found not_found 422 127
	// busy 429 true
}
