// Package netlimit bounds what one client of a listener may hold: the
// number of open connections (with a share kept for the daemon's own
// user), and how slowly a request body may arrive; and how long an
// upstream's answer may pause (IdleBody). The daemon API and the provider
// proxy use it (docs/operating.md "Limits").
package netlimit
