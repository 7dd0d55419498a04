// Package api is ctxd's wire contract (docs/design.md §7): the route constants,
// the JSON types of every request and response, the error codes with the one
// table mapping code ↔ HTTP status both ways, and the one Go Client that
// ctxctl, the load generator and Go agents use.
//
// It imports the standard library only, so an agent depending on it pulls in
// nothing of the daemon. The message types (Message, Block, Usage, ToolDef)
// therefore duplicate the wire shape of package history field for field and
// tag for tag; the server converts between the two.
//
// Responses may gain fields over time and never lose or rename one: decode
// them leniently. Requests are decoded strictly by the server: an unknown
// field is an Invalid error naming it.
package api

import "strings"

import "time"

// Version is the version of the API and of the daemon built from this tree.
// The server sends it in the HeaderVersion header of every response; the
// Client sends "ctxd-client/<Version>" as its User-Agent.
const Version = "0.1.0"

// Header names and content types of the protocol.
const (
	// HeaderVersion is the response header carrying the daemon's Version.
	HeaderVersion = "Ctxd-Version"
	// HeaderLastEventID is the standard server-sent-events reconnect header.
	// The server treats "Last-Event-ID: N" like "from=N+1" when the from
	// query parameter is absent (docs/design.md §7: a reconnecting client misses
	// nothing).
	HeaderLastEventID = "Last-Event-ID"

	// ContentTypeJSON is the content type of every request body and of
	// every JSON response, errors included.
	ContentTypeJSON = "application/json"
	// ContentTypeEventStream is the content type of RouteEvents responses.
	ContentTypeEventStream = "text/event-stream"
	// ContentTypeArtifact is the content type of RouteArtifact responses:
	// the artifact's bytes, unchanged.
	ContentTypeArtifact = "application/octet-stream"
)

// MaxRequestBytes is the largest request body the server accepts, in bytes
// (32 MiB); a larger body is answered with TooLarge (413) and changes nothing
// (docs/design.md §7). It is sized for an append carrying several tool results of
// a few MiB each (a tool result is stored whole before it is offloaded,
// docs/design.md §6). The Client refuses to send a larger body with the same
// error, without a round trip.
const MaxRequestBytes = 32 << 20

// EventsHeartbeat is how often the server writes an SSE comment line on an
// idle event stream, so that proxies and the client notice a dead
// connection. Clients ignore comment lines.
const EventsHeartbeat = 15 * time.Second

// EnvSocket is the environment variable naming the daemon's unix socket; see
// DefaultSocketPath.
const EnvSocket = "CTXD_SOCKET"

// EnvSocketOwner lists, comma-separated, the uids besides the user's own
// (and root) whose socket a Client may use: another user's daemon that
// lets this user in (daemon.allowed_uids). Unset: only the user's own.
const EnvSocketOwner = "CTXD_SOCKET_OWNER"

// splitComma splits s at commas, trimming spaces and dropping empty
// fields.
func splitComma(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ArtifactScheme prefixes an artifact URI: "artifact://<id>" (docs/design.md §6,
// §8). Client.Artifact accepts either form.
const ArtifactScheme = "artifact://"
