package main

import (
	"errors"
	"io"
)

// runCheck is not written yet; its owner replaces this file.
func runCheck(args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
