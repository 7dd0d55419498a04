// Package doccheck holds tests of the repository's own documentation: that
// every citation of the design names a section docs/design.md has, that
// the links between the documents lead somewhere, and that no Go file
// names the project's tracker. It has no code of its own.
package doccheck
