package trigger

import (
	"math"
	"math/big"
	"testing"

	"github.com/ctxd/ctxd/config"
)

func TestThresholdPercent(t *testing.T) {
	const max = math.MaxUint64
	tests := []struct {
		name  string
		limit uint64
		n     uint64
		want  uint64
	}{
		{"limit 0, 1%", 0, 1, 0},
		{"limit 0, 99%", 0, 99, 0},
		{"limit 1, 1%", 1, 1, 0},
		{"limit 1, 99%", 1, 99, 0},
		{"limit 100, 1%", 100, 1, 1},
		{"limit 100, 99%", 100, 99, 99},
		{"limit 200000, 1%", 200000, 1, 2000},
		{"limit 200000, 70%", 200000, 70, 140000},
		{"limit 200000, 99%", 200000, 99, 198000},
		{"limit 199999, 70% floors", 199999, 70, 139999},
		{"limit max u64, 1%", max, 1, max / 100},
		{"limit max u64, 99%", max, 99, 18262276632972456098},
		{"limit max u64, 70%", max, 70, 12912720851596686130},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Threshold(tt.limit, config.Trigger{Percent: tt.n})
			if got != tt.want {
				t.Errorf("Threshold(%d, percent %d) = %d, want %d", tt.limit, tt.n, got, tt.want)
			}
			if ref := bigPercent(tt.limit, tt.n); got != ref {
				t.Errorf("Threshold(%d, percent %d) = %d, big.Int says %d", tt.limit, tt.n, got, ref)
			}
		})
	}
}

func TestThresholdBufferTokens(t *testing.T) {
	const max = math.MaxUint64
	tests := []struct {
		name   string
		limit  uint64
		buffer uint64
		want   uint64
	}{
		{"limit 0", 0, 1, 0},
		{"limit 1, buffer = limit", 1, 1, 0},
		{"limit 1, buffer = limit+1", 1, 2, 0},
		{"limit 100, buffer = limit", 100, 100, 0},
		{"limit 100, buffer = limit+1", 100, 101, 0},
		{"limit 100, buffer 1", 100, 1, 99},
		{"limit 200000, buffer 13000", 200000, 13000, 187000},
		{"limit 200000, buffer = limit", 200000, 200000, 0},
		{"limit 200000, buffer = limit+1", 200000, 200001, 0},
		{"limit max u64, buffer 1", max, 1, max - 1},
		{"limit max u64, buffer = limit", max, max, 0},
		{"limit max-1, buffer = limit+1", max - 1, max, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Threshold(tt.limit, config.Trigger{BufferTokens: tt.buffer}); got != tt.want {
				t.Errorf("Threshold(%d, buffer %d) = %d, want %d", tt.limit, tt.buffer, got, tt.want)
			}
		})
	}
}

func TestThresholdInvalidTriggerIsBounded(t *testing.T) {
	tests := []struct {
		name  string
		limit uint64
		t     config.Trigger
		want  uint64
	}{
		{"neither set", 1000, config.Trigger{}, 1000},
		{"percent 100", 1000, config.Trigger{Percent: 100}, 1000},
		{"percent above 100", 1000, config.Trigger{Percent: 150}, 1000},
		{"percent max u64 on max limit", math.MaxUint64, config.Trigger{Percent: math.MaxUint64}, math.MaxUint64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Threshold(tt.limit, tt.t); got != tt.want {
				t.Errorf("Threshold(%d, %+v) = %d, want %d", tt.limit, tt.t, got, tt.want)
			}
		})
	}
}

func FuzzThresholdPercent(f *testing.F) {
	f.Add(uint64(200000), uint64(70))
	f.Add(uint64(math.MaxUint64), uint64(99))
	f.Fuzz(func(t *testing.T, limit, n uint64) {
		n = n%99 + 1
		if got, want := Threshold(limit, config.Trigger{Percent: n}), bigPercent(limit, n); got != want {
			t.Fatalf("Threshold(%d, percent %d) = %d, want %d", limit, n, got, want)
		}
	})
}

func bigPercent(limit, n uint64) uint64 {
	x := new(big.Int).SetUint64(limit)
	x.Mul(x, new(big.Int).SetUint64(n))
	x.Quo(x, big.NewInt(100))
	return x.Uint64()
}
