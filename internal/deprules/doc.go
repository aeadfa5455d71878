// Package deprules holds the test of the module's dependency rules: the
// leaf libraries in internal/ import neither side of the product, and the
// reference relay imports nothing of the gateway's side. It has no code of
// its own.
package deprules
