// Package deprules holds the module's dependency rules and the picture of
// them. Its test holds the rules: the leaf libraries in internal/ import
// neither side of the product, the reference relay imports nothing of the
// gateway's side, and the production wsgate binary links no package of the
// relay. Its code draws the package graph of docs/architecture.md from
// `go list` (run by `go run ./internal/deprules/graph`), and its test fails
// while that graph is out of date.
package deprules
