// Package wire is what every provider wire API's package has in common:
// the normalisation a resent message is matched by (docs/design.md §10),
// which is the same for all of them.
package wire
