// Package layering holds the test of the package layering of
// docs/design.md §1: every package of the module has a layer, and a
// package imports only packages of lower layers. It has no code of its
// own.
package layering
