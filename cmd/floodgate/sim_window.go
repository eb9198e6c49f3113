package main

import (
	"errors"
	"io"
)

// runSimWindow is not written yet; its owner replaces this file.
func runSimWindow(args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
