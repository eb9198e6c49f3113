package main

import (
	"errors"
	"io"
)

// runSimKeys is not written yet; its owner replaces this file.
func runSimKeys(args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
