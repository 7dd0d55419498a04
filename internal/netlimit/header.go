package netlimit

import "net/http"

// HeaderSlack is how many bytes past http.Server.MaxHeaderBytes net/http
// itself still reads before it answers its own plain-text 431 (its read
// buffer's size). Between a configured limit and limit + HeaderSlack, only
// a HeaderBytes check in the handler refuses a request.
const HeaderSlack = 4096

// HeaderBytes is the size in bytes of r's request line and headers as
// sent: the request line with its CRLF, then "Name: value\r\n" for the
// Host header and for each value of every other header. Whitespace that
// net/http trimmed around values, and the blank line ending the headers,
// are not counted, so it is at most a few bytes under what the client
// sent.
func HeaderBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: \r\n") + len(r.Host)
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}
