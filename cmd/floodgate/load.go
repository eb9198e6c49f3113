package main

import (
	"errors"
	"io"
)

// runLoad is not written yet; its owner replaces this file.
func runLoad(args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
