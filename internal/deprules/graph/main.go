// Command graph writes the package graph of docs/architecture.md: a
// Mermaid picture of what the module's commands link, drawn from
// `go list -json ./...` between the section's marker comments. Run it from
// the module's root after adding, moving or rewiring a package:
//
//	go run ./internal/deprules/graph
//
// internal/deprules's test fails while the section differs from what this
// would write.
package main

import (
	"fmt"
	"os"

	"github.com/wsgate/wsgate/internal/deprules"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "graph:", err)
		os.Exit(1)
	}
}

// run regenerates the section and rewrites the file if it changed.
func run() error {
	section, err := deprules.PackageGraph(".")
	if err != nil {
		return err
	}
	old, err := os.ReadFile(deprules.GraphDoc)
	if err != nil {
		return fmt.Errorf("%v (run it from the module's root)", err)
	}
	doc, err := deprules.ReplaceGraphSection(string(old), section)
	if err != nil {
		return fmt.Errorf("%s: %w", deprules.GraphDoc, err)
	}
	if doc == string(old) {
		fmt.Println(deprules.GraphDoc + ": package graph up to date")
		return nil
	}
	if err := os.WriteFile(deprules.GraphDoc, []byte(doc), 0o644); err != nil {
		return err
	}
	fmt.Println(deprules.GraphDoc + ": package graph rewritten")
	return nil
}
