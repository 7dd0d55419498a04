// Package doccheck holds tests of the repository's own documentation: that
// every citation of the design names a section docs/design.md has, and
// that the links between the documents lead somewhere. It has no code of
// its own.
package doccheck
