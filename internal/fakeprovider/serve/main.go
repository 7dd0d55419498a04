// Command serve runs the fake provider on its own, for trying an agent
// against ctxd by hand with no network (docs/testing.md "The fake provider
// by hand"): it prints the fake's base URL, serves until interrupted, and
// then prints each request it answered or refused, one line each, and,
// with -requests FILE, writes them as JSON.
//
//	go run ./internal/fakeprovider/serve -window 8000 -rounds 8 -output-bytes 8000
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ctxd/ctxd/internal/fakeprovider"
)

func main() {
	var cfg fakeprovider.Config
	flag.IntVar(&cfg.WindowTokens, "window", 200000, "the context window, in the fake's tokens")
	flag.IntVar(&cfg.Rounds, "rounds", 2, "shell rounds of the scripted task before its file write and final answer")
	flag.IntVar(&cfg.OutputBytes, "output-bytes", 4000, "bytes each shell round prints")
	flag.StringVar(&cfg.APIKey, "api-key", "", "the only key accepted (empty: any non-empty key)")
	flag.StringVar(&cfg.Marker, "marker", "", "text the final answer carries")
	urlFile := flag.String("url-file", "", "also write the base URL to this file")
	requests := flag.String("requests", "", "on exit, write the requests as JSON to this file")
	flag.Parse()

	p := fakeprovider.New(cfg)
	defer p.Close()
	fmt.Println(p.URL())
	if *urlFile != "" {
		if err := os.WriteFile(*urlFile, []byte(p.URL()+"\n"), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop

	reqs := p.Requests()
	for _, r := range reqs {
		fmt.Printf("request %d %s %s: %d %s tokens=%d cache_read=%d %s\n", r.Seq, r.Method, r.Path, r.Status, r.Step, r.Tokens, r.CacheRead, r.Error)
	}
	if *requests != "" {
		b, err := json.MarshalIndent(reqs, "", "  ")
		if err == nil {
			err = os.WriteFile(*requests, b, 0o600)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
	}
}
