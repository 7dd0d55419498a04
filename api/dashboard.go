package api

import (
	"context"
	"net/http"
	"time"
)

// RouteDashboardLink mints a one-time link to the dashboard on the
// daemon's TCP listener (docs/api.md "Dashboard"): → DashboardLink. The
// link's code is good for one use within DashboardLinkTTL; opening it
// sets the HttpOnly, SameSite=Strict cookie that lets the browser read the
// dashboard, which is never reachable on TCP without the token or that
// cookie. Errors: Unavailable (the daemon serves no dashboard).
const RouteDashboardLink = "POST /v1/dashboard/links"

// DashboardLinkTTL is how long a link's code stays good.
const DashboardLinkTTL = 2 * time.Minute

// DashboardLink is the body of RouteDashboardLink's response.
type DashboardLink struct {
	// Path is the link's path and query: "/ui/login?code=…".
	Path string `json:"path"`
	// URL is the whole link on the daemon's TCP listener
	// ("http://127.0.0.1:7421/ui/login?code=…"), "" when the daemon has
	// no TCP listener (daemon.listen).
	URL string `json:"url,omitempty"`
	// Expires is when the code stops being good, UTC.
	Expires time.Time `json:"expires"`
}

// DashboardLinksPath is the path of RouteDashboardLink.
const DashboardLinksPath = "/v1/dashboard/links"

// DashboardLink mints a one-time dashboard link (RouteDashboardLink).
// Errors: Unavailable.
func (c *Client) DashboardLink(ctx context.Context) (*DashboardLink, error) {
	var r DashboardLink
	if err := c.do(ctx, http.MethodPost, DashboardLinksPath, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
