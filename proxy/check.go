package proxy

import "errors"

// errViolation: the assembled context breaks docs/design.md §4a; it is never
// sent.
var errViolation = errors.New("the assembled context breaks docs/design.md §4a, not sent")

// errClientRule: the client's own request breaks docs/design.md §4a. It is
// forwarded as sent (the provider judges it) and is not a ctxd violation.
var errClientRule = errors.New("the client's own request breaks docs/design.md §4a; forwarded as sent for the provider to judge")
