package config

import "testing"

// A zero [proxy.limits] key takes its built-in default; a set one stays.
func TestProxyLimitsWithDefaults(t *testing.T) {
	d := DefaultProxyLimits()
	if got := (ProxyLimits{}).WithDefaults(); got != d {
		t.Fatalf("zero limits with defaults = %+v, want %+v", got, d)
	}
	got := ProxyLimits{BodyBytes: 7, Connections: 3}.WithDefaults()
	want := d
	want.BodyBytes, want.Connections = 7, 3
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
}
