package redact

import (
	"strings"
	"testing"
)

// TestHold: a held secret is masked whole, in part (12 bytes of it) and
// reversed, by the Redactor and every Redactor With made from it, until
// it is released as many times as it was held; a short one is ignored.
func TestHold(t *testing.T) {
	r := New()
	key := "client-key-0123456789abcdef"
	text := "invalid x-api-key " + key + "; starts " + key[:14] + "; reversed " + reverse(key)
	if got := r.String(text); strings.Contains(got, key[:14]) {
		// Not key-shaped: before Hold nothing masks it.
	} else {
		t.Fatalf("masked before it was held: %q", got)
	}
	rel1 := r.Hold(key)
	rel2 := r.Hold(key)
	w := r.With("other-secret-value")
	for _, red := range []*Redactor{r, w} {
		got := red.String(text)
		if strings.Contains(got, key[:12]) || strings.Contains(got, reverse(key)[:12]) || strings.Count(got, Mask) != 3 {
			t.Fatalf("held key not masked: %q", got)
		}
	}
	rel1()
	rel1() // a release is once
	if got := r.String(text); strings.Contains(got, key[:12]) {
		t.Fatalf("released once of twice: not masked: %q", got)
	}
	rel2()
	if got := r.String(text); !strings.Contains(got, key) || r.Held() != 0 {
		t.Fatalf("released: still masked (%q), held %d", got, r.Held())
	}
	if rel := r.Hold("short"); r.Held() != 0 {
		t.Fatal("a secret under MinSecretLen was held")
	} else {
		rel()
	}
	var nilR *Redactor
	nilR.Hold(key)()
}

// TestHoldManyCheap: holding and releasing thousands of distinct secrets
// keeps the other held ones masked (the counts are per window).
func TestHoldManyCheap(t *testing.T) {
	r := New()
	var rels []func()
	for i := 0; i < 5000; i++ {
		rels = append(rels, r.Hold(strings.Repeat(string(rune('a'+i%26)), 4)+"-key-"+itoa(i)+"-padding-xyz"))
	}
	keep := "keep-this-secret-masked-0001"
	relKeep := r.Hold(keep)
	for _, rel := range rels {
		rel()
	}
	if got := r.String("x " + keep + " y"); strings.Contains(got, keep) || r.Held() != 1 {
		t.Fatalf("%q, held %d", got, r.Held())
	}
	relKeep()
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	s := ""
	for ; i > 0; i /= 10 {
		s = string(rune('0'+i%10)) + s
	}
	return s
}
