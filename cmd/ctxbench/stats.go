package main

import (
	"math"
	"slices"
	"time"
)

// Latencies summarizes request durations in milliseconds.
type Latencies struct {
	// Count is the number of requests measured.
	Count int `json:"count"`
	// P50, P99 and Max are the median, the 99th percentile and the largest
	// duration, in milliseconds.
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
	// Mean is the arithmetic mean, in milliseconds.
	Mean float64 `json:"mean_ms"`
}

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method: the smallest value with at least p % of the values
// at or below it. It returns 0 for an empty slice.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// summarize sorts ds in place and returns its summary.
func summarize(ds []time.Duration) Latencies {
	if len(ds) == 0 {
		return Latencies{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	return Latencies{
		Count: len(ds),
		P50:   ms(percentile(ds, 50)),
		P99:   ms(percentile(ds, 99)),
		Max:   ms(ds[len(ds)-1]),
		Mean:  ms(sum / time.Duration(len(ds))),
	}
}

// Gauge summarizes samples of a value taken over time.
type Gauge struct {
	// Samples is the number of samples.
	Samples int `json:"samples"`
	// Min, Avg and Max are the smallest, mean and largest sample.
	Min int     `json:"min"`
	Avg float64 `json:"avg"`
	Max int     `json:"max"`
	// Series is every sample in order (one per sampling interval).
	Series []int `json:"series,omitempty"`
}

// gauge summarizes samples, keeping them as the series.
func gauge(samples []int) Gauge {
	if len(samples) == 0 {
		return Gauge{}
	}
	g := Gauge{Samples: len(samples), Min: samples[0], Max: samples[0], Series: samples}
	sum := 0
	for _, s := range samples {
		g.Min = min(g.Min, s)
		g.Max = max(g.Max, s)
		sum += s
	}
	g.Avg = math.Round(float64(sum)/float64(len(samples))*100) / 100
	return g
}
