package main

import (
	"errors"
	"io"
)

// runSimWorst is not written yet; its owner replaces this file.
func runSimWorst(args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
