package main

import (
	"context"
	"fmt"
	"io"
)

func imageCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return fmt.Errorf("image build: not wired yet")
}
