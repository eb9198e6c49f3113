package main

import (
	"errors"
	"io"
)

// runServe is not written yet; its owner replaces this file.
func runServe(args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
